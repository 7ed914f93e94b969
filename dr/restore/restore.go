// Package restore makes etcd members' data directories from a snapshot.
//
// It does what `etcdutl snapshot restore` does, for a cluster that is new
// in every way but its data: a new initial-cluster token, so a new
// cluster ID. The new
// ID is what seals the restored cluster until the operators advance its
// epoch (ADR-03). etcd derives the cluster ID from the token and the
// members' peer URLs alone, so restoring under the old token and URLs
// would bring back the old ID and an unsealed cluster: a restore whose ID
// would be the one the snapshot's epoch record is bound to is refused.
package restore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	dsnap "github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.uber.org/zap"
)

// Member is one member of the restored cluster.
type Member struct {
	Name string
	// DataDir must not exist or be empty.
	DataDir string
	// PeerURL is the member's advertised peer URL.
	PeerURL string
}

// Cluster is a restore of one snapshot into every member of a cluster.
type Cluster struct {
	// Snapshot is the snapshot file (snapstore.Fetch verifies it against its
	// manifest).
	Snapshot string
	Members  []Member
	// Token is the new cluster's initial-cluster token; it must be new.
	Token string
	// RevisionBump, when not zero, starts the restored revisions that far
	// above the snapshot's and marks the revisions below compacted, so a
	// watcher resuming from a revision the old cluster reached is told it
	// is compacted instead of silently missing events.
	RevisionBump uint64
	// Logger receives etcdutl's logs; discarded when nil.
	Logger *zap.Logger
}

// InitialCluster is the --initial-cluster value of c's members.
func (c Cluster) InitialCluster() string {
	parts := make([]string, len(c.Members))
	for i, m := range c.Members {
		parts[i] = m.Name + "=" + m.PeerURL
	}
	return strings.Join(parts, ",")
}

// Member writes member name's data directory.
func (c Cluster) Member(name string) error {
	if err := c.check(); err != nil {
		return err
	}
	for _, m := range c.Members {
		if m.Name != name {
			continue
		}
		if m.DataDir == "" {
			return fmt.Errorf("restore: member %s: a data dir is required", name)
		}
		if entries, err := os.ReadDir(m.DataDir); err == nil && len(entries) > 0 {
			return fmt.Errorf("restore: data dir %s of member %s is not empty; a restore writes only a new one", m.DataDir, name)
		}
		lg := c.Logger
		if lg == nil {
			lg = zap.NewNop()
		}
		err := snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
			SnapshotPath: c.Snapshot, Name: m.Name, OutputDataDir: m.DataDir,
			PeerURLs: []string{m.PeerURL}, InitialCluster: c.InitialCluster(), InitialClusterToken: c.Token,
			RevisionBump: c.RevisionBump, MarkCompacted: c.RevisionBump > 0,
		})
		if err != nil {
			return fmt.Errorf("restore: member %s from %s: %w", name, c.Snapshot, err)
		}
		return nil
	}
	return fmt.Errorf("restore: no member %s in the cluster", name)
}

// ClusterID is the cluster ID the restored cluster will have (etcd's
// derivation from the token and the members' peer URLs).
func (c Cluster) ClusterID() (string, error) {
	urls, err := types.NewURLsMap(c.InitialCluster())
	if err != nil {
		return "", fmt.Errorf("restore: members: %w", err)
	}
	rc, err := membership.NewClusterFromURLsMap(zap.NewNop(), c.Token, urls)
	if err != nil {
		return "", fmt.Errorf("restore: members: %w", err)
	}
	return epoch.FormatID(uint64(rc.ID())), nil
}

// check refuses a restore that would not seal: no token, or a token and
// members that give back the cluster ID the snapshot's epoch record is
// bound to.
func (c Cluster) check() error {
	if c.Token == "" {
		return errors.New("restore: token: a new initial-cluster token is required: the restored cluster must have a new cluster ID")
	}
	id, err := c.ClusterID()
	if err != nil {
		return err
	}
	kvs, err := dsnap.ReadKeys(c.Snapshot, func(k string) bool { return k == lockkey.EpochKey })
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if kv := kvs[lockkey.EpochKey]; kv != nil {
		st, err := epoch.Decode(kv.Value, kv.ModRevision)
		if err == nil && st.ClusterID == id {
			return fmt.Errorf("restore: token: with this token and these peer URLs the restored cluster would have cluster ID %s, "+
				"the one the snapshot's epoch record is bound to, and would serve unsealed: use a new token", id)
		}
	}
	return nil
}

// All writes every member's data directory.
func (c Cluster) All() error {
	for _, m := range c.Members {
		if err := c.Member(m.Name); err != nil {
			return err
		}
	}
	return nil
}
