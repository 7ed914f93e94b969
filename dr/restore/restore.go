// Package restore makes a member's data directory from a snapshot, as
// `etcdutl snapshot restore` does, for a cluster that is new in every way
// but its data: a new initial-cluster token, so a new cluster ID. The new
// ID is what seals the restored cluster until the operators advance its
// epoch (ADR-03); restoring under the old token would keep the old ID and
// leave only the revision check between the restored cluster and a
// repeated token, so a token is required and must not be the old one.
package restore

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
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
	// Snapshot is the snapshot file (verified against its manifest first).
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
	if c.Token == "" {
		return errors.New("restore: a new initial-cluster token is required: the restored cluster must have a new cluster ID")
	}
	for _, m := range c.Members {
		if m.Name != name {
			continue
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

// All writes every member's data directory.
func (c Cluster) All() error {
	for _, m := range c.Members {
		if err := c.Member(m.Name); err != nil {
			return err
		}
	}
	return nil
}
