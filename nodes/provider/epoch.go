package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdauth"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdEpochInputs bootstrap a new cluster's epoch record: the explicit step
// ADR-03 asks for, since an arbiter never creates one. The coord cluster is
// initialised above Above (0 for a new region) when it has no epoch records;
// every cluster then takes an epoch allocated from the coord cluster. One
// client certificate of the region's etcd CA reaches both clusters.
//
// With RootPassword it signs in to both as etcd's root user: once EtcdAuth
// has turned authentication on, the certificate alone is user
// lockplane-deployer, which does not exist, and is refused every read and
// write. Signing in to a cluster whose authentication is still off
// succeeds as no user, so one set of inputs serves a new region (the
// clusters are bootstrapped before EtcdAuth) and a shard added to a
// running one (the coord cluster's authentication is on).
type EtcdEpochInputs struct {
	Cluster        string   `json:"cluster"`
	CoordEndpoints []string `json:"coordEndpoints"`
	Endpoints      []string `json:"endpoints"`
	CACertPem      string   `json:"caCertPem"`
	CertPem        string   `json:"certPem"`
	KeyPem         string   `json:"keyPem"`
	Above          int      `json:"above,omitempty"`
	RootPassword   string   `json:"rootPassword,omitempty"`
	// Restored clusters (a DR stack's) only adopt the record the snapshot
	// brought back. One without a record (a snapshot from before the
	// bootstrap, or a forged one) is refused, never anchored or
	// bootstrapped here: that would unseal it with no operator.
	Restored bool `json:"restored,omitempty"`
}

func (in *EtcdEpochInputs) client(endpoints []string) (*clientv3.Client, error) {
	user := ""
	if in.RootPassword != "" {
		user = etcdauth.RootUser
	}
	cli, err := tlsClient(endpoints, in.CACertPem, in.CertPem, in.KeyPem, user, in.RootPassword)
	if err != nil {
		return nil, fmt.Errorf("%s: reach %s: %w", in.Cluster, strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

func (in *EtcdEpochInputs) clients() (coord, target *clientv3.Client, err error) {
	cc, err := in.client(in.CoordEndpoints)
	if err != nil {
		return nil, nil, err
	}
	tc, err := in.client(in.Endpoints)
	if err != nil {
		cc.Close()
		return nil, nil, err
	}
	return cc, tc, nil
}

func init() {
	register("EtcdEpoch", spec[EtcdEpochInputs]{
		Validate: func(in *EtcdEpochInputs) error {
			switch {
			case in.Cluster == "":
				return errors.New("cluster: is required")
			case len(in.CoordEndpoints) == 0 || len(in.Endpoints) == 0:
				return errors.New("coordEndpoints, endpoints: at least one each is required")
			case in.Above < 0:
				return fmt.Errorf("above: %d must not be negative", in.Above)
			}
			return nil
		},
		// A cluster that has a record keeps it (a second up, or an adopted
		// cluster); one without gets an epoch allocated from the coord
		// cluster, which cannot repeat a token whatever the cluster held.
		// Only a coord cluster with no epoch records at all is anchored
		// here, above Above: one whose records are another cluster's (a
		// restore) is the operator's to anchor.
		Create: func(ctx context.Context, _ *Env, in *EtcdEpochInputs) (string, map[string]any, error) {
			coord, target, err := in.clients()
			if err != nil {
				return "", nil, err
			}
			defer coord.Close()
			defer target.Close()
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if st, found, err := epoch.Read(ctx, target); err != nil {
				return "", nil, fmt.Errorf("%s: read the epoch record: %w", in.Cluster, err)
			} else if found {
				return in.Cluster, map[string]any{"epoch": int(st.Epoch), "adopted": true}, nil
			} else if in.Restored {
				return "", nil, fmt.Errorf("%s: restored from a snapshot with no epoch record: it stays sealed; two operators advance it "+
					"(lockctl epoch advance --expected 0, and for coord --above the highest epoch the region served)", in.Cluster)
			}
			rec, err := epoch.ReadRecorded(ctx, coord)
			if err != nil {
				return "", nil, fmt.Errorf("read the coord cluster's epoch records: %w", err)
			}
			if !rec.Initialised {
				if _, err := epoch.Anchor(ctx, coord, uint32(in.Above)); err != nil {
					return "", nil, err
				}
			}
			adv, err := epoch.Bootstrap(ctx, coord, target, in.Cluster, 0)
			if err != nil {
				return "", nil, fmt.Errorf("%s: bootstrap the epoch: %w", in.Cluster, err)
			}
			return in.Cluster, map[string]any{"epoch": int(adv.Epoch), "adopted": false}, nil
		},
		// New certificates, endpoints or root password reach the same
		// cluster: nothing to do, and never a second bootstrap (only a new cluster name is a
		// new resource).
		Update: func(_ context.Context, _ *Env, _ string, _, _ *EtcdEpochInputs, st map[string]any) (map[string]any, error) {
			return st, nil
		},
		Replaces: []string{"cluster", "restored"},
		Read: func(ctx context.Context, _ *Env, _ string, in *EtcdEpochInputs, st map[string]any) (map[string]any, error) {
			target, err := in.client(in.Endpoints)
			if err != nil {
				return st, nil // unreachable, or root refused (a password being changed): nothing known to change
			}
			defer target.Close()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if cur, found, err := epoch.Read(ctx, target); err == nil && found {
				st["epoch"] = int(cur.Epoch)
			}
			return st, nil // a missing record is the arbiter's seal to report, not drift to repair
		},
		Secrets: []string{"keyPem", "rootPassword"},
	})
}
