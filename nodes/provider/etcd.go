package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdClusterInputs waits for an etcd cluster whose members were just
// started to form: every endpoint answers over TLS with the same cluster
// ID and leader, and the member list has the expected size. Its outputs
// are the cluster's identity.
type EtcdClusterInputs struct {
	Endpoints      []string `json:"endpoints"`
	CACertPem      string   `json:"caCertPem"`
	CertPem        string   `json:"certPem"`
	KeyPem         string   `json:"keyPem"`
	Members        int      `json:"members"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
	// ExpectClusterID, when set, is the ID the cluster must form under:
	// a shard restored in place is not formed until its restarted
	// members agree on the restore's new ID.
	ExpectClusterID string `json:"expectClusterId,omitempty"`
}

// client reaches the cluster with the certificate alone. Status and
// MemberList, all it asks, need no etcd user even with authentication on:
// the certificate's common name is enough.
func (in *EtcdClusterInputs) client() (*clientv3.Client, error) {
	return tlsClient(in.Endpoints, in.CACertPem, in.CertPem, in.KeyPem, "", "")
}

// tlsClient reaches a cluster over TLS with a client certificate of the
// region's etcd CA, signed in as user with password when user is not
// empty. Signing in to a cluster whose authentication is off succeeds, as
// no user: the same client serves before and after EtcdAuth.
func tlsClient(endpoints []string, caPEM, certPEM, keyPEM, user, password string) (*clientv3.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caPEM)) {
		return nil, errors.New("caCertPem: no certificate")
	}
	cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return nil, fmt.Errorf("certPem, keyPem: %v", err)
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		TLS:      &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Username: user, Password: password})
}

// formed reports the cluster's identity once every endpoint agrees.
func (in *EtcdClusterInputs) formed(ctx context.Context, cli *clientv3.Client) (map[string]any, error) {
	var cluster, leader uint64
	for _, ep := range in.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", ep, err)
		}
		if st.Leader == 0 {
			return nil, fmt.Errorf("%s: no leader", ep)
		}
		if cluster != 0 && (st.Header.ClusterId != cluster || st.Leader != leader) {
			return nil, fmt.Errorf("%s: disagrees on the cluster or its leader", ep)
		}
		cluster, leader = st.Header.ClusterId, st.Leader
	}
	if in.ExpectClusterID != "" && epoch.FormatID(cluster) != in.ExpectClusterID {
		return nil, fmt.Errorf("cluster %s, not the %s expected", epoch.FormatID(cluster), in.ExpectClusterID)
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ml, err := cli.MemberList(mctx)
	if err != nil {
		return nil, err
	}
	if len(ml.Members) != in.Members {
		return nil, fmt.Errorf("%d members, expected %d", len(ml.Members), in.Members)
	}
	ids := map[string]any{}
	var names []string
	for _, m := range ml.Members {
		if m.Name == "" {
			return nil, fmt.Errorf("member %s has not started", epoch.FormatID(m.ID))
		}
		ids[m.Name] = epoch.FormatID(m.ID)
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return map[string]any{"clusterId": epoch.FormatID(cluster), "memberIds": ids, "leaderId": epoch.FormatID(leader)}, nil
}

func init() {
	register("EtcdCluster", spec[EtcdClusterInputs]{
		Validate: func(in *EtcdClusterInputs) error {
			if len(in.Endpoints) == 0 {
				return errors.New("endpoints: at least one is required")
			}
			if in.Members < 1 {
				return fmt.Errorf("members: %d must be at least 1", in.Members)
			}
			return nil
		},
		Create: func(ctx context.Context, _ *Env, in *EtcdClusterInputs) (string, map[string]any, error) {
			cli, err := in.client()
			if err != nil {
				return "", nil, err
			}
			defer cli.Close()
			timeout := time.Duration(in.TimeoutSeconds) * time.Second
			if timeout == 0 {
				timeout = 2 * time.Minute
			}
			deadline := time.Now().Add(timeout)
			for {
				out, err := in.formed(ctx, cli)
				if err == nil {
					return out["clusterId"].(string), out, nil
				}
				if time.Now().After(deadline) || ctx.Err() != nil {
					return "", nil, fmt.Errorf("etcd cluster at %v did not form within %s: %v", in.Endpoints, timeout, err)
				}
				time.Sleep(250 * time.Millisecond)
			}
		},
		Read: func(ctx context.Context, _ *Env, _ string, in *EtcdClusterInputs, st map[string]any) (map[string]any, error) {
			cli, err := in.client()
			if err != nil {
				return nil, err
			}
			defer cli.Close()
			out, err := in.formed(ctx, cli)
			if err != nil {
				return st, nil // unhealthy is not gone; the members' services say what is
			}
			for k, v := range out {
				st[k] = v
			}
			return st, nil
		},
		Secrets: []string{"keyPem"},
	})
}
