package provider

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/lockplane/lockplane/dr/restore"
	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/nodes/remote"
)

// Deadlines of the restore's network calls: a snapshot store call that moves no
// snapshot, a check on the host, and the two that move one (a snapshot
// or a data dir may be gigabytes).
const (
	storeCall    = time.Minute
	hostCall     = time.Minute
	fetchTimeout = 30 * time.Minute
	copyTimeout  = 30 * time.Minute
)

// Latest names the newest snapshot in the snapshot store as a snapshot input.
const Latest = "latest"

// storeRef is a snapshot in a region's snapshot store, and how to reach the snapshot store.
type storeRef struct {
	URL, CACertPem, AccessKey, SecretKey string
	Region, Cluster, Snapshot            string
	// Trusted are the cluster's snapshot signing public keys, text form.
	Trusted []string
}

func (v storeRef) endpoint() s3Endpoint {
	return s3Endpoint{URL: v.URL, CACertPem: v.CACertPem, User: v.AccessKey, Password: v.SecretKey}
}

// check names the first field that is wrong.
func (v storeRef) check() error {
	if err := v.endpoint().check("vaultUrl", "vaultCaCertPem"); err != nil {
		return err
	}
	if v.AccessKey == "" || v.SecretKey == "" {
		return errors.New("vaultAccessKey, vaultSecretKey: are required (a snapshot store user that can read the region's bucket)")
	}
	if err := snapstore.CheckName("region", v.Region); err != nil {
		return err
	}
	if err := snapstore.CheckName("cluster", v.Cluster); err != nil {
		return err
	}
	if _, err := v.trusted(); err != nil {
		return err
	}
	if v.Snapshot == Latest {
		return nil
	}
	_, cluster, err := snapstore.ParseName(v.Snapshot)
	if err != nil {
		return fmt.Errorf("snapshot: want %q or a snapshot's name: %w", Latest, err)
	}
	if cluster != v.Cluster {
		// A coord snapshot restored into a shard (or one shard's into
		// another) would bring back another cluster's keys and epoch.
		return fmt.Errorf("snapshot: %q is a snapshot of cluster %q, not of %q", v.Snapshot, cluster, v.Cluster)
	}
	return nil
}

// trusted are the cluster's keys a snapshot must be signed by: required,
// so a restore given none fails closed instead of trusting any writer.
func (v storeRef) trusted() (snapstore.Keys, error) {
	if len(v.Trusted) == 0 {
		return nil, fmt.Errorf("trustedKeys: cluster %s's snapshot signing public keys (the store stack's storeRegions.%s.clusters.%s.publicKey) are required: "+
			"a restore uses only snapshots signed by them (docs/dr.md)", v.Cluster, v.Region, v.Cluster)
	}
	keys, err := snapstore.ParseKeys(map[string][]string{v.Cluster: v.Trusted})
	if err != nil {
		return nil, fmt.Errorf("trustedKeys: %w", err)
	}
	return keys, nil
}

// open is the region's snapshot store, trusting the cluster's keys only; it does
// not connect.
func (v storeRef) open() (snapstore.Store, error) {
	keys, err := v.trusted()
	if err != nil {
		return snapstore.Store{}, err
	}
	cli, err := v.endpoint().client()
	if err != nil {
		return snapstore.Store{}, fmt.Errorf("storeUrl, storeCaCertPem: %w", err)
	}
	return snapstore.Store{Client: cli, Region: v.Region, OpTimeout: storeCall, Trusted: keys}, nil
}

// resolve reads the manifest of the snapshot named, or of the newest
// signed by a trusted key; refused names the snapshots "latest" left out
// (a forged one newer than the chosen among them). A named snapshot that
// is not signed by a trusted key is refused by name.
func (v storeRef) resolve(ctx context.Context) (vt snapstore.Store, m snapshot.Manifest, refused []error, err error) {
	if vt, err = v.open(); err != nil {
		return vt, m, nil, err
	}
	if v.Snapshot == Latest {
		m, refused, err = vt.Latest(ctx, v.Cluster)
	} else {
		m, err = vt.Find(ctx, v.Snapshot)
	}
	if err != nil {
		return vt, m, refused, fmt.Errorf("snapshot %s of %s/%s: %w", v.Snapshot, v.Region, v.Cluster, err)
	}
	return vt, m, refused, nil
}

// Why a snapshot was refused, as the refused output's reason: only
// RefusedUntrusted says someone other than the cluster's snapshot job
// wrote it (a forgery); the others are the snapshot store's own wear.
const (
	// RefusedUntrusted: its manifest is not signed by a key of its
	// cluster (snapstore.ErrUntrusted).
	RefusedUntrusted = "untrusted"
	// RefusedIncomplete: one of its two objects expired or is missing.
	RefusedIncomplete = "incomplete"
	// RefusedOverwritten: one of its objects was written again since it
	// was stored (snapstore.ErrOverwritten); its first version, kept under
	// object lock, is what a restore reads.
	RefusedOverwritten = "overwritten"
	// RefusedUnreadable: its manifest could not be read or does not
	// describe its own object.
	RefusedUnreadable = "unreadable"
)

// refusals are the refused snapshots as the resource's refused output:
// each one's name, why (a Refused* reason) and the snapshot store's error.
func refusals(refused []error) []any {
	out := []any{}
	for _, e := range refused {
		out = append(out, map[string]any{"name": refusedName(e), "reason": refusalReason(e), "detail": e.Error()})
	}
	return out
}

// refusalReason classifies a snapshot List skipped. Untrusted and
// overwritten are told by the error itself; dr/snapstore has no sentinel for
// a half-expired snapshot yet, so it is told by the message, and one not
// recognised is "unreadable": only ErrUntrusted is called a forgery.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, snapstore.ErrUntrusted):
		return RefusedUntrusted
	case errors.Is(err, snapstore.ErrOverwritten):
		return RefusedOverwritten
	case strings.Contains(err.Error(), "has expired or is missing"):
		return RefusedIncomplete
	default:
		return RefusedUnreadable
	}
}

// refusedName is the snapshot a refusal names (its first word that is a
// snapshot's name, without suffix); "" if none is.
func refusedName(err error) string {
	for _, w := range strings.Fields(err.Error()) {
		if base, _, err := snapstore.ParseName(strings.Trim(w, ":,;()\"'")); err == nil {
			return base
		}
	}
	return ""
}

// fetch resolves the snapshot, refuses one whose digest is not sha256
// (when set: another snapshot put under the chosen one's name), and
// downloads it, checked against its manifest, into a new work directory
// the caller removes.
func (v storeRef) fetch(ctx context.Context, sha256 string) (m snapshot.Manifest, work, file string, err error) {
	vt, m, _, err := v.resolve(ctx)
	if err != nil {
		return m, "", "", err
	}
	if sha256 != "" && m.SHA256 != sha256 {
		return m, "", "", fmt.Errorf("snapshot: %s's manifest says sha256 %s, not the %s chosen (snapshotSha256): refusing another snapshot under its name",
			manifestName(m), m.SHA256, sha256)
	}
	if work, err = os.MkdirTemp("", "lockplane-restore-"); err != nil {
		return m, "", "", err
	}
	file = filepath.Join(work, "snapshot.db")
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	err = vt.Fetch(fctx, m, file)
	cancel()
	if err != nil {
		os.RemoveAll(work)
		return m, "", "", fmt.Errorf("snapshot %s: %w", manifestName(m), err)
	}
	return m, work, file, nil
}

// manifestName is the name a manifest goes by: its object without .db.
func manifestName(m snapshot.Manifest) string { return strings.TrimSuffix(m.Object, ".db") }

// described are the outputs that say which snapshot was chosen.
func described(m snapshot.Manifest) map[string]any {
	out := map[string]any{"manifest": manifestName(m), "revision": m.Revision, "sourceClusterId": m.ClusterID,
		"sha256": m.SHA256, "size": m.Size, "takenAt": m.TakenAt.UTC().Format(time.RFC3339Nano), "epoch": 0, "epochClusterId": ""}
	if m.Epoch != nil {
		out["epoch"], out["epochClusterId"] = int(m.Epoch.Epoch), m.Epoch.ClusterID
	}
	if m.HighestAllocated > 0 {
		out["highestAllocated"] = int(m.HighestAllocated)
	}
	// Which key vouched for it: the unseal floor says where it came from.
	if m.Signature != nil {
		out["keyId"] = m.Signature.KeyID
	}
	return out
}

// StoreSnapshotInputs choose one snapshot of a cluster in the region's
// snapshot store, by name or "latest", and record it. "latest" is resolved once,
// when the resource is made, and never again: refresh and update keep
// the choice, so every member's EtcdRestore fed its outputs restores the
// same snapshot, however many snapshots the snapshot store gains between them (an
// up that fails half way and is run again included). Only a change of
// region, cluster or snapshot chooses again (a replace).
type StoreSnapshotInputs struct {
	StoreSnapshotRef
}

// StoreSnapshotRef is the snapshot store of a region, how to reach it, and one
// snapshot of one of its clusters, by name (or "latest" where the kind
// allows it): the inputs of every kind that reads a snapshot.
type StoreSnapshotRef struct {
	StoreURL       string `json:"vaultUrl"`
	StoreCACertPem string `json:"vaultCaCertPem,omitempty"`
	StoreAccessKey string `json:"vaultAccessKey"`
	StoreSecretKey string `json:"vaultSecretKey"`
	Region         string `json:"region"`
	Cluster        string `json:"cluster"`
	Snapshot       string `json:"snapshot"`
	// TrustedKeys are the cluster's snapshot signing public keys (text
	// form, the store stack's outputs): a snapshot not signed by one is
	// refused. Required.
	TrustedKeys []string `json:"trustedKeys"`
}

func (in *StoreSnapshotRef) ref() storeRef {
	return storeRef{URL: in.StoreURL, CACertPem: in.StoreCACertPem, AccessKey: in.StoreAccessKey, SecretKey: in.StoreSecretKey,
		Region: in.Region, Cluster: in.Cluster, Snapshot: in.Snapshot, Trusted: in.TrustedKeys}
}

// EtcdRestoreInputs make one etcd member's data directory on its host
// from a snapshot in the region's snapshot store, before the member first starts:
// the snapshot's keys, as a member of a new cluster (Members, Token), so
// with a new cluster ID, which seals it until the operators advance its
// epoch (ADR-03). It writes only a data dir that is absent or empty, and
// never over a member's data. The snapshot is the one named (Snapshot;
// a StoreSnapshot's manifest, so every member restores the same one),
// checked against SnapshotSha256 when set and against its manifest's
// digest always. Delete leaves the data dir: the member's data belongs
// to the member, which its own service's deletion owns.
type EtcdRestoreInputs struct {
	Connection remote.Target `json:"connection"`
	// DataDir is the member's --data-dir on the host. Not a mount point.
	DataDir string `json:"dataDir"`
	// Snapshot is a snapshot's name, or "latest" for a one-member cluster
	// only: members that each resolved "latest" could restore different
	// snapshots into one cluster.
	StoreSnapshotRef
	SnapshotSha256 string `json:"snapshotSha256,omitempty"`
	// MemberName is this member; Members every member of the restored
	// cluster, name to advertised peer URL, the same on every member's
	// resource.
	MemberName   string            `json:"memberName"`
	Members      map[string]string `json:"members"`
	Token        string            `json:"token"`
	RevisionBump int64             `json:"revisionBump,omitempty"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (in *EtcdRestoreInputs) validate() error {
	if err := in.Connection.Validate(); err != nil {
		return err
	}
	if err := validatePath("dataDir", in.DataDir); err != nil {
		return err
	}
	if in.DataDir == "/" {
		return errors.New("dataDir: must not be /")
	}
	if err := in.ref().check(); err != nil {
		return err
	}
	if in.SnapshotSha256 != "" && !sha256Hex.MatchString(in.SnapshotSha256) {
		return fmt.Errorf("snapshotSha256: %q must be 64 lower-case hex digits (a manifest's sha256)", in.SnapshotSha256)
	}
	if len(in.Members) == 0 {
		return errors.New("members: every member of the restored cluster, name to peer URL, is required")
	}
	if in.Snapshot == Latest && len(in.Members) > 1 {
		return fmt.Errorf("snapshot: %q would be resolved by each of the %d members on its own, and they could restore different snapshots: "+
			"resolve it once with a StoreSnapshot and give every member its manifest", Latest, len(in.Members))
	}
	urls := map[string]string{}
	for name, peer := range in.Members {
		if name == "" || strings.ContainsAny(name, ",= \t\n") {
			return fmt.Errorf("members: member name %q must be non-empty, without ',', '=' or spaces", name)
		}
		u, err := url.Parse(peer)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
			return fmt.Errorf("members: %s's peer URL %q must be http(s)://HOST:PORT, as its --initial-advertise-peer-urls", name, peer)
		}
		if other, dup := urls[peer]; dup {
			return fmt.Errorf("members: %s and %s have the same peer URL %s", other, name, peer)
		}
		urls[peer] = name
	}
	if _, ok := in.Members[in.MemberName]; !ok {
		return fmt.Errorf("memberName: %q is not one of members", in.MemberName)
	}
	if in.Token == "" {
		return errors.New("token: a new initial-cluster token is required: the restored cluster must have a new cluster ID")
	}
	if in.RevisionBump < 0 {
		return fmt.Errorf("revisionBump: %d must not be negative", in.RevisionBump)
	}
	return nil
}

// plan is the restore of the snapshot at file into the cluster's members,
// this member's data dir at dir (on this machine).
func (in *EtcdRestoreInputs) plan(file, dir string) restore.Cluster {
	names := make([]string, 0, len(in.Members))
	for name := range in.Members {
		names = append(names, name)
	}
	sort.Strings(names)
	rc := restore.Cluster{Snapshot: file, Token: in.Token, RevisionBump: uint64(in.RevisionBump)}
	for _, name := range names {
		m := restore.Member{Name: name, PeerURL: in.Members[name]}
		if name == in.MemberName {
			m.DataDir = dir
		}
		rc.Members = append(rc.Members, m)
	}
	return rc
}

// empty refuses a data dir on the host that holds anything: it may be a
// member's data. (PutDir's rename refuses it again, atomically, should
// one appear meanwhile.)
func (in *EtcdRestoreInputs) empty(ctx context.Context, c *remote.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, hostCall)
	defer cancel()
	st, err := c.Dir(ctx, in.DataDir)
	if err != nil {
		return err
	}
	switch st {
	case remote.DirNotEmpty:
		return fmt.Errorf("dataDir: %s on %s is not empty: a restore writes only a new member's data dir, never over a member's data; "+
			"remove it first if that member is gone for good", in.DataDir, in.Connection.Host)
	case remote.DirNotADir:
		return fmt.Errorf("dataDir: %s on %s is not a directory", in.DataDir, in.Connection.Host)
	}
	return nil
}

// restored reports whether the host holds a member's data dir at DataDir.
// Only its presence is checked: once etcd runs, it changes the content.
func (in *EtcdRestoreInputs) restored(ctx context.Context, c *remote.Conn) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, hostCall)
	defer cancel()
	out, err := c.Run(ctx, fmt.Sprintf("if [ -d %s ]; then echo present; fi", remote.Quote(path.Join(in.DataDir, "member"))))
	return strings.TrimSpace(out) == "present", err
}

func (in *EtcdRestoreInputs) create(ctx context.Context, env *Env) (map[string]any, error) {
	c, err := env.Pool.Dial(ctx, in.Connection)
	if err != nil {
		return nil, err
	}
	// Checked first, before gigabytes move, and again by the rename.
	if err := in.empty(ctx, c); err != nil {
		return nil, err
	}
	m, work, file, err := in.ref().fetch(ctx, in.SnapshotSha256)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	rc := in.plan(file, filepath.Join(work, "data"))
	id, err := rc.ClusterID()
	if err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	if err := rc.Member(in.MemberName); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, copyTimeout)
	defer cancel()
	if err := c.PutDir(cctx, filepath.Join(work, "data"), in.DataDir); err != nil {
		if errors.Is(err, remote.ErrNotEmpty) {
			return nil, fmt.Errorf("dataDir: %w", err)
		}
		return nil, err
	}
	out := described(m)
	out["clusterId"] = id
	out["restoredAt"] = time.Now().UTC().Format(time.RFC3339)
	return out, nil
}

func init() {
	register("VaultSnapshot", spec[StoreSnapshotInputs]{
		Validate: func(in *StoreSnapshotInputs) error { return in.ref().check() },
		Create: func(ctx context.Context, _ *Env, in *StoreSnapshotInputs) (string, map[string]any, error) {
			_, m, refused, err := in.ref().resolve(ctx)
			if err != nil {
				return "", nil, err
			}
			out := described(m)
			out["refused"] = refusals(refused)
			return manifestName(m), out, nil
		},
		// The choice is never read again: a snapshot newer than the one
		// chosen must not reach a member restored after another. One
		// expired since is no drift either: restores already made keep
		// their data, and one yet to be made is refused by name.
		Read: nil,
		// A new URL, CA or user reaches the same snapshot store: the choice stands.
		Update: func(_ context.Context, _ *Env, _ string, _, _ *StoreSnapshotInputs, st map[string]any) (map[string]any, error) {
			return st, nil
		},
		Replaces: []string{"region", "cluster", "snapshot"},
		Secrets:  []string{"vaultSecretKey"},
	})

	register("EtcdRestore", spec[EtcdRestoreInputs]{
		Validate: func(in *EtcdRestoreInputs) error { return in.validate() },
		Create: func(ctx context.Context, env *Env, in *EtcdRestoreInputs) (string, map[string]any, error) {
			out, err := in.create(ctx, env)
			if err != nil {
				return "", nil, err
			}
			return in.Connection.Host + ":" + in.DataDir, out, nil
		},
		// Gone only when the data dir is: then the next up restores it
		// again from the same snapshot, token and members (a member that
		// lost its data; see docs/dr.md). Its content is not compared:
		// the running member changes it.
		Read: func(ctx context.Context, env *Env, _ string, in *EtcdRestoreInputs, st map[string]any) (map[string]any, error) {
			c, err := env.Pool.Dial(ctx, in.Connection)
			if err != nil {
				return nil, err
			}
			ok, err := in.restored(ctx, c)
			if err != nil || !ok {
				return nil, err
			}
			return st, nil
		},
		// Nothing an update may change alters the restore: the snapshot store's
		// address or user, or the connection to the same host (a rotated
		// key, a new address), which must still find the data dir there.
		Update: func(ctx context.Context, env *Env, _ string, olds, news *EtcdRestoreInputs, st map[string]any) (map[string]any, error) {
			if olds.Connection == news.Connection {
				return st, nil
			}
			c, err := env.Pool.Dial(ctx, news.Connection)
			if err != nil {
				return nil, err
			}
			ok, err := news.restored(ctx, c)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("connection: %s holds no restored data dir at %s: a restore onto another host is a new restore (replace the resource)",
					news.Connection.Host, news.DataDir)
			}
			return st, nil
		},
		Replaces: []string{"dataDir", "region", "cluster", "snapshot", "snapshotSha256", "memberName", "members", "token", "revisionBump"},
		// The data dir stays: see EtcdRestoreInputs.
		Delete:  nil,
		Secrets: []string{"vaultSecretKey", "token"},
	})
}
