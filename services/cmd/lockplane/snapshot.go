package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/infra/program"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/s3client"
	"github.com/lockplane/lockplane/services/internal/tlsfiles"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func snapshotCmd() *cobra.Command {
	c := &cobra.Command{Use: "snapshot", Short: "A region's etcd snapshots in its snapshot store: list them, take one now",
		Long: `The clusters of a region whose stack sets lockplane:snapshots are snapshotted on a
schedule into the snapshot store its store stack runs (docs/dr.md). These commands reach the
snapshot store and the clusters with what the region's stack holds, from where up runs.`}
	c.AddCommand(snapshotListCmd(), snapshotTakeCmd())
	return c
}

// snapshotFlags are a snapshot verb's.
type snapshotFlags struct {
	stackFlags
	cluster string
}

func (f *snapshotFlags) add(c *cobra.Command) {
	f.stackFlags.add(c)
	c.Flags().StringVar(&f.cluster, "cluster", "", "only this cluster (coord, entity-0, ...); every cluster when empty")
}

// access reads the region's snapshotAccess output and writes its TLS
// material into a private directory the caller removes.
func (f *snapshotFlags) access(ctx context.Context) (acc program.SnapshotAccess, dir string, err error) {
	s, _, err := openStack(ctx, &f.stackFlags)
	if err != nil {
		return acc, "", err
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err := s.Outputs(octx)
	cancel()
	if err != nil {
		return acc, "", fmt.Errorf("--stack %s: read its outputs: %w", f.stack, err)
	}
	raw, _ := out["snapshotAccess"].Value.(string)
	if raw == "" {
		return acc, "", fmt.Errorf("--stack %s: no snapshot store: set lockplane:snapshots.storeStack in stacks/Pulumi.%s.yaml and run `lockplane up --stack %s` (docs/dr.md)", f.stack, f.stack, f.stack)
	}
	if err := json.Unmarshal([]byte(raw), &acc); err != nil {
		return acc, "", fmt.Errorf("--stack %s: snapshotAccess: %w", f.stack, err)
	}
	if acc.StoreURL == "" {
		return acc, "", fmt.Errorf("--stack %s: snapshotAccess has no storeUrl: it was written by an older lockplane; run `lockplane up --stack %s` once", f.stack, f.stack)
	}
	if f.cluster != "" {
		if _, ok := acc.Clusters[f.cluster]; !ok {
			return acc, "", fmt.Errorf("--cluster: %q is not a cluster of region %s (%v)", f.cluster, acc.Region, sortedKeys(acc.Clusters))
		}
	}
	if dir, err = os.MkdirTemp("", "lockplane-snapshot-"); err != nil {
		return acc, "", err
	}
	for name, content := range map[string]string{"store-ca.pem": acc.StoreCA, "etcd-ca.pem": acc.EtcdCA, "etcd.pem": acc.EtcdCert, "etcd-key.pem": acc.EtcdKey} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			os.RemoveAll(dir)
			return acc, "", err
		}
	}
	return acc, dir, nil
}

// run is a verb's RunE: act gets the region's access, the private
// directory of its TLS files (removed afterwards) and, by cluster, the
// snapshot store as that cluster's storer.
func (f *snapshotFlags) run(act func(ctx context.Context, acc program.SnapshotAccess, dir string, v clusterStores) error) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error {
		if err := f.check(); err != nil {
			return err
		}
		ctx, cancel := signalContext()
		defer cancel()
		acc, dir, err := f.access(ctx)
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		return act(ctx, acc, dir, clusterStores{acc: acc, dir: dir})
	}
}

// clusterStores open the region's snapshot store as one cluster's storer.
type clusterStores struct {
	acc program.SnapshotAccess
	dir string
}

// open is the snapshot store as cluster's storer (which may write under its own
// prefix only), trusting only cluster's signing keys (the store stack's);
// with its signing key too when sign is set (take).
func (cv clusterStores) open(cluster string, sign bool) (snapstore.Store, error) {
	c := cv.acc.Clusters[cluster]
	if c.StoreUser == "" || c.StorePassword == "" || len(c.TrustedKeys) == 0 {
		return snapstore.Store{}, fmt.Errorf("snapshotAccess.clusters.%s: no snapshot store user or trusted keys: run `lockplane up` of the region, which hands each cluster its own (docs/dr.md)", cluster)
	}
	keys, err := snapstore.ParseKeys(map[string][]string{cluster: c.TrustedKeys})
	if err != nil {
		return snapstore.Store{}, fmt.Errorf("snapshotAccess.clusters.%s.%w", cluster, err)
	}
	cli, err := s3client.Endpoint{URL: cv.acc.StoreURL, URLFlag: "snapshotAccess.storeUrl", CA: filepath.Join(cv.dir, "store-ca.pem"),
		CAFlag: "snapshotAccess.storeCaCertPem", User: credfile.Account{User: c.StoreUser, Password: c.StorePassword}}.Client()
	if err != nil {
		return snapstore.Store{}, err
	}
	v := snapstore.Store{Client: cli, Region: cv.acc.Region, Trusted: keys}
	if sign {
		if v.Signer, err = snapshot.ParsePrivateKey([]byte(c.SigningKey)); err != nil {
			return snapstore.Store{}, fmt.Errorf("snapshotAccess.clusters.%s.signingKey: %w", cluster, err)
		}
	}
	return v, nil
}

// clusters are the clusters asked for, in order: coord first.
func (f *snapshotFlags) clusters(acc program.SnapshotAccess) []string {
	if f.cluster != "" {
		return []string{f.cluster}
	}
	names := sortedKeys(acc.Clusters)
	sort.SliceStable(names, func(i, j int) bool { return names[i] == "coord" && names[j] != "coord" })
	return names
}

func snapshotListCmd() *cobra.Command {
	f := &snapshotFlags{}
	c := &cobra.Command{Use: "list", Short: "List the region's snapshots in its snapshot store, newest last", Args: cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, acc program.SnapshotAccess, dir string, cv clusterStores) error {
			var all []snapshot.Manifest
			var skipped []string
			for _, cl := range f.clusters(acc) {
				v, err := cv.open(cl, false)
				if err != nil {
					return err
				}
				ms, bad, err := v.List(ctx, cl)
				if err != nil {
					return err
				}
				all = append(all, ms...)
				for _, e := range bad {
					skipped = append(skipped, e.Error())
				}
			}
			return printSnapshots(os.Stdout, acc, all, skipped, f.output == "json")
		})}
	f.add(c)
	return c
}

// takeFromAMember snapshots cluster cl into file from the first of its
// members that gives one, as its snapshot user.
func takeFromAMember(ctx context.Context, progress io.Writer, acc program.SnapshotAccess, cl string, tlsCfg *tls.Config, file string) (snapshot.Manifest, error) {
	var errs []error
	for _, ep := range acc.Clusters[cl].Endpoints {
		fmt.Fprintf(progress, "%s: snapshot of %s ...\n", cl, ep)
		m, err := snapshot.Take(ctx, snapshot.Source{Region: acc.Region, Cluster: cl, Config: clientv3.Config{Endpoints: []string{ep},
			TLS: tlsCfg, Username: etcdauth.Snapshotter, Password: acc.Clusters[cl].Password, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}}, file)
		if err == nil {
			return m, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
		fmt.Fprintf(progress, "%s: %s failed: %v\n", cl, ep, err)
	}
	return snapshot.Manifest{}, fmt.Errorf("%s: no member gave a snapshot: %w", cl, errors.Join(errs...))
}

// snapshotList is list's JSON.
type snapshotList struct {
	Region    string              `json:"region"`
	Store     string              `json:"store"`
	Bucket    string              `json:"bucket"`
	Snapshots []snapshot.Manifest `json:"snapshots"`
	// Skipped are objects that are not whole, verified snapshots signed
	// by their cluster's key: a restore refuses them (named, with why).
	Skipped []string `json:"skipped,omitempty"`
}

func printSnapshots(w io.Writer, acc program.SnapshotAccess, ms []snapshot.Manifest, skipped []string, asJSON bool) error {
	if asJSON {
		if ms == nil {
			ms = []snapshot.Manifest{}
		}
		return json.NewEncoder(w).Encode(snapshotList{Region: acc.Region, Store: acc.StoreStack, Bucket: snapstore.Bucket(acc.Region), Snapshots: ms, Skipped: skipped})
	}
	fmt.Fprintf(w, "region %s, snapshot store %s (%s, bucket %s)\n", acc.Region, acc.StoreStack, acc.StoreURL, snapstore.Bucket(acc.Region))
	if len(ms) == 0 {
		fmt.Fprintln(w, "no snapshots yet")
	} else {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLUSTER\tTAKEN\tREVISION\tEPOCH\tSIZE\tKEY\tOBJECT")
		for _, m := range ms {
			ep := "-"
			if m.Epoch != nil {
				ep = strconv.FormatUint(uint64(m.Epoch.Epoch), 10)
			}
			key := "-"
			if m.Signature != nil {
				key = m.Signature.KeyID
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\n", m.Cluster, m.TakenAt.UTC().Format(time.RFC3339), m.Revision, ep, m.Size, key, m.Object)
		}
		tw.Flush()
	}
	for _, s := range skipped {
		// A refused snapshot is never restored; one not signed by its
		// cluster's key was written by someone who is not its snapshot job.
		fmt.Fprintln(w, "REFUSED (a restore will not use it):", s)
	}
	return nil
}

func snapshotTakeCmd() *cobra.Command {
	f := &snapshotFlags{}
	c := &cobra.Command{Use: "take", Short: "Take a snapshot of the region's clusters now and store it in the snapshot store", Args: cobra.NoArgs,
		Long: `take snapshots each cluster (or --cluster) from the first of its members that
answers, as etcd's snapshot user, verifies it and stores it in the snapshot store beside
the scheduled ones. Run it before a risky change.`,
		RunE: f.run(func(ctx context.Context, acc program.SnapshotAccess, dir string, cv clusterStores) error {
			tlsCfg, err := tlsfiles.Files{CA: filepath.Join(dir, "etcd-ca.pem"), CAFlag: "snapshotAccess.etcdCaCertPem",
				Cert: filepath.Join(dir, "etcd.pem"), Key: filepath.Join(dir, "etcd-key.pem"), CertFlag: "snapshotAccess.etcdCertPem", KeyFlag: "snapshotAccess.etcdKeyPem"}.Client()
			if err != nil {
				return err
			}
			var taken []snapshot.Manifest
			for _, cl := range f.clusters(acc) {
				// As the cluster's own storer, signed with its own key.
				v, err := cv.open(cl, true)
				if err != nil {
					return err
				}
				m, err := takeFromAMember(ctx, f.progress(), acc, cl, tlsCfg, filepath.Join(dir, cl+".db"))
				if err != nil {
					return err
				}
				// A snapshot store that refuses is no member's fault: stop, do not
				// snapshot the next member into the same refusal.
				pctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
				m, err = v.Put(pctx, m, filepath.Join(dir, cl+".db"))
				cancel()
				os.Remove(filepath.Join(dir, cl+".db"))
				if err != nil {
					return fmt.Errorf("%s: store the snapshot in snapshot store %s: %w", cl, acc.StoreStack, err)
				}
				fmt.Fprintf(f.progress(), "%s: stored %s (revision %d, %d bytes)\n", cl, m.Object, m.Revision, m.Size)
				taken = append(taken, m)
			}
			if f.output == "json" {
				return json.NewEncoder(os.Stdout).Encode(snapshotList{Region: acc.Region, Store: acc.StoreStack, Bucket: snapstore.Bucket(acc.Region), Snapshots: taken})
			}
			fmt.Printf("took %d snapshots of region %s into snapshot store %s\n", len(taken), acc.Region, acc.StoreStack)
			return nil
		})}
	f.add(c)
	return c
}
