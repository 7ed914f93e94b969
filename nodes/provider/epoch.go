package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdEpochInputs bootstrap a new cluster's epoch record: the explicit step
// ADR-03 asks for, since an arbiter never creates one. The coord cluster is
// initialised above Above (0 for a new region) when it has no epoch records;
// every cluster then takes an epoch allocated from the coord cluster. One
// client certificate of the region's etcd CA reaches both clusters.
type EtcdEpochInputs struct {
	Cluster        string   `json:"cluster"`
	CoordEndpoints []string `json:"coordEndpoints"`
	Endpoints      []string `json:"endpoints"`
	CACertPem      string   `json:"caCertPem"`
	CertPem        string   `json:"certPem"`
	KeyPem         string   `json:"keyPem"`
	Above          int      `json:"above,omitempty"`
}

func (in *EtcdEpochInputs) clients() (coord, target *clientv3.Client, err error) {
	c := EtcdClusterInputs{Endpoints: in.CoordEndpoints, CACertPem: in.CACertPem, CertPem: in.CertPem, KeyPem: in.KeyPem}
	cc, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	t := c
	t.Endpoints = in.Endpoints
	tc, err := t.client()
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
		// New certificates or endpoints reach the same cluster: nothing to
		// do, and never a second bootstrap (only a new cluster name is a
		// new resource).
		Update: func(_ context.Context, _ *Env, _ string, _, _ *EtcdEpochInputs, st map[string]any) (map[string]any, error) {
			return st, nil
		},
		Replaces: []string{"cluster"},
		Read: func(ctx context.Context, _ *Env, _ string, in *EtcdEpochInputs, st map[string]any) (map[string]any, error) {
			_, target, err := in.clients()
			if err != nil {
				return nil, err
			}
			defer target.Close()
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if cur, found, err := epoch.Read(ctx, target); err == nil && found {
				st["epoch"] = int(cur.Epoch)
			}
			return st, nil // a missing record is the arbiter's seal to report, not drift to repair
		},
		Secrets: []string{"keyPem"},
	})
}
