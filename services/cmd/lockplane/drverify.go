package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// restoreRecord is what the up of a DR stack keeps beside its profile
// (.lockplane/<stack>/restore.json), for `lockplane dr verify`: when the
// restore began, what it made and, once verified, its first grant.
type restoreRecord struct {
	Stack     string    `json:"stack"`
	StartedAt time.Time `json:"startedAt"`
	// Floor is the highest epoch the snapshots show; Above, the floor
	// with EpochMargin for epochs allocated after them, is what the
	// printed unseal anchors coord above, and every epoch after the
	// unseal must exceed it.
	Floor int64 `json:"floor"`
	Above int64 `json:"above"`
	// Clusters are the restored clusters' new IDs, by name.
	Clusters map[string]string `json:"clusters"`
	// InPlace marks shards restored in place in a serving region: the map
	// keeps shards not restored, and the probe grant must come from a
	// restored shard (its epoch is that shard's).
	InPlace bool `json:"inPlace,omitempty"`
	// Verified is the first grant verify took after the unseal: the end
	// of the RTO.
	Verified *verifiedGrant `json:"verified,omitempty"`
}

type verifiedGrant struct {
	At    time.Time `json:"at"`
	Key   string    `json:"key"`
	Class string    `json:"class"`
	Epoch uint32    `json:"epoch"`
}

func restoreRecordPath(root, stack string) string {
	return filepath.Join(root, ".lockplane", stack, "restore.json")
}

// beginRestore notes when the first up of a restore began, before it
// runs: an up that fails or is interrupted is where the RTO starts, not
// the retry that succeeds. A record already there is kept.
func beginRestore(root, stack string, began time.Time) error {
	path := restoreRecordPath(root, stack)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeRestoreRecord(path, restoreRecord{Stack: stack, StartedAt: began.UTC()})
}

// recordRestore records what an up restored, floor the highest epoch its
// snapshots show. The start is kept from beginRestore's record, or from
// an earlier up of the same clusters (an up re-run after the restore);
// clusters the record does not name are a new restore, timed from began.
func recordRestore(root, stack string, began time.Time, floor int64, restored map[string]any) error {
	cs, err := restoredClusters(restored)
	if err != nil {
		return err
	}
	rec := restoreRecord{Stack: stack, StartedAt: began.UTC(), Floor: floor, Above: floor + EpochMargin, Clusters: map[string]string{}}
	for _, c := range cs {
		rec.Clusters[c.name] = c.clusterID
	}
	path := restoreRecordPath(root, stack)
	old, err := readRestoreRecord(path)
	switch {
	case err == nil && maps.Equal(old.Clusters, rec.Clusters):
		return nil
	case err == nil && len(old.Clusters) == 0:
		rec.StartedAt = old.StartedAt
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeRestoreRecord(path, rec)
}

// recordInPlace records the shards an up restored in place, timed from
// that up's start, or from the restore itself when an earlier up made it
// and failed after (its start is not known here): a new restore replaces
// any record before it. Their epochs must exceed the snapshots' own
// records; coord, not restored, allocates above every epoch the region
// served.
func recordInPlace(root, stack string, began time.Time, restored []restoredCluster) error {
	rec := restoreRecord{Stack: stack, StartedAt: began.UTC(), Clusters: map[string]string{}, InPlace: true}
	for _, c := range restored {
		rec.Clusters[c.name] = c.clusterID
		rec.Floor = max(rec.Floor, c.epoch)
		if !c.restoredAt.IsZero() && c.restoredAt.Before(rec.StartedAt) {
			rec.StartedAt = c.restoredAt.UTC()
		}
	}
	rec.Above = rec.Floor
	path := restoreRecordPath(root, stack)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeRestoreRecord(path, rec)
}

func readRestoreRecord(path string) (restoreRecord, error) {
	var rec restoreRecord
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}

// writeRestoreRecord replaces the record whole: two verifies at once each
// write a file of their own and rename it in, so neither reads a torn one.
func writeRestoreRecord(path string, rec restoreRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".restore-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// verifyReport is what `dr verify` prints.
type verifyReport struct {
	Stack     string          `json:"stack"`
	Above     int64           `json:"above"`
	Clusters  []verifiedEpoch `json:"clusters"`
	Grant     verifiedGrant   `json:"grant"`
	StartedAt time.Time       `json:"startedAt"`
	RTO       string          `json:"rto"`
	RTOSecs   float64         `json:"rtoSeconds"`
	// First is whether this run took the first grant; the RTO ends at
	// FirstGrant, this run's or an earlier one's.
	First      bool          `json:"firstVerification"`
	FirstGrant verifiedGrant `json:"firstGrant"`
}

type verifiedEpoch struct {
	Cluster   string `json:"cluster"`
	ClusterID string `json:"clusterId"`
	Epoch     uint32 `json:"epoch"`
}

func drCmd() *cobra.Command {
	dr := &cobra.Command{Use: "dr", Short: "Disaster recovery: check a restored region (docs/dr.md)"}
	var f stackFlags
	var key, class, workload, operator string
	var timeout time.Duration
	verify := &cobra.Command{
		Use:   "verify --stack DR_STACK",
		Short: "Check every restored cluster is unsealed above the snapshots' epochs, take a grant, and print the RTO",
		Long: `verify ends a restore. After ` + "`lockplane up`" + ` of a DR stack and the two-person
unseal it printed, verify asks the arbiter for every restored cluster's
status (each must be unsealed, serving an epoch above every epoch the
snapshots show, and be the cluster the restore made), then takes and
releases one grant as a workload. The RTO is from the start of the up
that restored to the first grant verify took; later runs check again and
print that first RTO.

After a region's up restored an entity shard in place (lockplane:restoreInPlace)
and its advance, verify checks that shard alone, and the probe must be granted
by it: give an entity-tier --class and a --key the shard map homes on it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout: %s must be above 0", timeout)
			}
			root, err := projectRoot()
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(root, "stacks", "Pulumi."+f.stack+".yaml")); err != nil {
				return fmt.Errorf("--stack: no stacks/Pulumi.%s.yaml", f.stack)
			}
			ctx, cancel := signalContext()
			defer cancel()
			ctx, cancelT := context.WithTimeout(ctx, timeout)
			defer cancelT()
			rep, err := verifyRestore(ctx, root, f.stack, operator, workload, class, key)
			if err != nil {
				return fmt.Errorf("dr verify --stack %s: %w", f.stack, err)
			}
			rep.print(f.output == "json")
			return nil
		},
	}
	verify.Flags().StringVar(&f.stack, "stack", "", "the stack that restored: a DR stack, or a region that restored a shard in place (required)")
	verify.Flags().StringVarP(&f.output, "output", "o", "text", "output: text or json")
	verify.MarkFlagRequired("stack")
	verify.Flags().StringVar(&key, "key", "demo/dr/verify", "the key of the probe grant")
	verify.Flags().StringVar(&class, "class", "demo", "the class of the probe grant")
	verify.Flags().StringVar(&workload, "identity", "demo", "the profile's workload identity the probe grant is taken as")
	verify.Flags().StringVar(&operator, "operator", "operator", "the profile's operator identity the clusters' status is read as")
	verify.Flags().DurationVar(&timeout, "timeout", time.Minute, "bound on the whole check")
	dr.AddCommand(verify)
	return dr
}

// verifyRestore checks a restored region's clusters and takes its first
// grant, recording it on the first success.
func verifyRestore(ctx context.Context, root, stack, operator, workload, class, key string) (verifyReport, error) {
	path := restoreRecordPath(root, stack)
	rec, err := readRestoreRecord(path)
	if errors.Is(err, os.ErrNotExist) {
		return verifyReport{}, fmt.Errorf("%s: no restore recorded: this stack's up restored nothing (its lockplane:restore is unset) or ran elsewhere", path)
	}
	if err != nil {
		return verifyReport{}, fmt.Errorf("%s: %v", path, err)
	}
	p, err := profile.Load(filepath.Join(root, ".lockplane", stack, "profile.json"))
	if err != nil {
		return verifyReport{}, err
	}
	if len(rec.Clusters) == 0 {
		return verifyReport{}, fmt.Errorf("%s: the restore has not completed: run `lockplane up --stack %s` until it succeeds", path, stack)
	}
	rep := verifyReport{Stack: stack, Above: rec.Above, StartedAt: rec.StartedAt}
	if rep.Clusters, err = unsealedEpochs(ctx, p, operator, rec); err != nil {
		return verifyReport{}, err
	}
	if rep.Grant, err = probeGrant(ctx, p, workload, class, key); err != nil {
		return verifyReport{}, err
	}
	if rec.InPlace && !slices.ContainsFunc(rep.Clusters, func(c verifiedEpoch) bool { return c.Epoch == rep.Grant.Epoch }) {
		// Every advance allocates an epoch of its own, so the grant's
		// epoch says which cluster granted it.
		return verifyReport{}, fmt.Errorf("the grant on %s (class %s) carries epoch %d, no restored shard's: it was not granted by %s; "+
			"give --class an entity-tier class and a --key the shard map homes on it", key, class, rep.Grant.Epoch, strings.Join(sortedKeys(rec.Clusters), ", "))
	}
	if int64(rep.Grant.Epoch) <= rec.Above && rec.InPlace {
		return verifyReport{}, fmt.Errorf("the grant on %s carries epoch %d, not above its shard's snapshot's %d", key, rep.Grant.Epoch, rec.Above)
	}
	if int64(rep.Grant.Epoch) <= rec.Above {
		return verifyReport{}, fmt.Errorf("the grant on %s carries epoch %d, not above %d (the snapshots' highest epoch plus %d): its token could repeat one the region issued before the disaster",
			key, rep.Grant.Epoch, rec.Above, EpochMargin)
	}
	if rec.Verified == nil {
		v := rep.Grant
		rec.Verified, rep.First = &v, true
		if err := writeRestoreRecord(path, rec); err != nil {
			return verifyReport{}, err
		}
	}
	rto := rec.Verified.At.Sub(rec.StartedAt)
	rep.RTO, rep.RTOSecs = rto.Round(time.Second).String(), rto.Seconds()
	rep.FirstGrant = *rec.Verified
	return rep, nil
}

// unsealedEpochs reads each restored cluster's status as the operator:
// each must be the cluster the restore made (not a profile pointing at
// another region), have quorum, be unsealed and serve an epoch above the
// unseal's anchor; and every shard in the map must be one restored.
func unsealedEpochs(ctx context.Context, p *profile.Profile, operator string, rec restoreRecord) ([]verifiedEpoch, error) {
	c, err := lockclient.DialProfile(p, operator)
	if err != nil {
		return nil, err
	}
	defer closeBounded(ctx, c)
	admin := adminv1.NewAdminServiceClient(c.Conn())
	m, err := admin.ShardMap(ctx, &adminv1.ShardMapRequest{})
	if status.Code(err) == codes.FailedPrecondition {
		// An arbiter with no entity shards: the entity tier is coord.
		m, err = &adminv1.ShardMapResponse{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the shard map: %w", err)
	}
	for _, shard := range m.GetShards() {
		if _, ok := rec.Clusters[shard]; !ok && !rec.InPlace {
			return nil, fmt.Errorf("shard %s is in the map but was not restored by this stack", shard)
		}
	}
	var out []verifiedEpoch
	for _, name := range sortedKeys(rec.Clusters) {
		cluster := name
		if name == "coord" {
			cluster = ""
		}
		st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: cluster})
		switch {
		case err != nil:
			return nil, fmt.Errorf("status of %s: %w", name, err)
		case st.GetClusterId() != rec.Clusters[name]:
			return nil, fmt.Errorf("%s is cluster %s, not %s, the one the restore made: the profile reaches another region", name, st.GetClusterId(), rec.Clusters[name])
		case !st.GetQuorum():
			return nil, fmt.Errorf("%s has no etcd quorum: it cannot grant (lockctl status --cluster %s shows its members)", name, cluster)
		case st.GetEpochMissing() || st.GetSealed() || st.GetEpochClusterId() != st.GetClusterId():
			return nil, fmt.Errorf("%s is still sealed: run the unseal `lockplane up` printed (coord first)", name)
		case int64(st.GetEpoch()) <= rec.Above && rec.InPlace:
			return nil, fmt.Errorf("%s serves epoch %d, not above its snapshot's %d: advance it", name, st.GetEpoch(), rec.Above)
		case int64(st.GetEpoch()) <= rec.Above:
			return nil, fmt.Errorf("%s serves epoch %d, not above %d (the snapshots' highest epoch plus %d): advance coord again with --above %d, then every shard", name, st.GetEpoch(), rec.Above, EpochMargin, rec.Above)
		}
		out = append(out, verifiedEpoch{Cluster: name, ClusterID: st.GetClusterId(), Epoch: st.GetEpoch()})
	}
	return out, nil
}

// closeBounded closes c (its sessions' CloseSession calls included)
// within a few seconds, even when ctx has ended.
func closeBounded(ctx context.Context, c *lockclient.Client) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	c.Close(cctx)
}

// probeGrant takes and releases one grant as the workload.
func probeGrant(ctx context.Context, p *profile.Profile, workload, class, key string) (verifiedGrant, error) {
	c, err := lockclient.DialProfile(p, workload)
	if err != nil {
		return verifiedGrant{}, err
	}
	defer closeBounded(ctx, c)
	s, err := c.Session(ctx, class)
	if err != nil {
		return verifiedGrant{}, fmt.Errorf("a session of class %s as %s: %w", class, workload, err)
	}
	// The probe does no work under the hold: a fence has nothing to stop.
	h, err := s.Lock(ctx, key, func(*lockclient.Hold) {})
	if err != nil {
		return verifiedGrant{}, fmt.Errorf("a grant on %s (class %s) as %s: %w", key, class, workload, err)
	}
	g := verifiedGrant{At: time.Now().UTC(), Key: key, Class: class, Epoch: h.Token().Epoch()}
	if err := h.Release(ctx); err != nil {
		return verifiedGrant{}, fmt.Errorf("release %s: %w", key, err)
	}
	return g, nil
}

func (r verifyReport) print(asJSON bool) {
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	fmt.Printf("%-10s %-18s %s\n", "cluster", "id", "epoch")
	for _, c := range r.Clusters {
		fmt.Printf("%-10s %-18s %d (unsealed, above %d)\n", c.Cluster, c.ClusterID, c.Epoch, r.Above)
	}
	fmt.Printf("grant on %s (class %s): epoch %d\n", r.Grant.Key, r.Grant.Class, r.Grant.Epoch)
	when := "this grant"
	if !r.First {
		when = fmt.Sprintf("the first verified grant (%s)", r.FirstGrant.At.Format(time.RFC3339))
	}
	fmt.Printf("RTO %s: from the start of `lockplane up --stack %s` (%s) to %s\n", r.RTO, r.Stack, r.StartedAt.Format(time.RFC3339), when)
}
