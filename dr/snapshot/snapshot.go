// Package snapshot takes a snapshot of one etcd cluster of a region and
// describes it in a manifest: which cluster (name and ID), the revision it
// holds, the epoch record in force at that revision, and, for the coord
// cluster, the highest epoch the region had allocated. The manifest is what
// an operator restores from and what the unseal's floor is read from
// (docs/dr.md).
//
// A snapshot is etcd's own (the Maintenance API, which etcd grants only to
// a user with the root role): a consistent copy of one member's backend.
package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnap "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// FormatVersion is the manifest format this package writes and reads.
const FormatVersion = 1

// CoordCluster is the coord cluster's name in manifests; entity shards go
// by their shard names.
const CoordCluster = "coord"

// Manifest describes one snapshot.
type Manifest struct {
	Format int `json:"format"`
	// Region and Cluster name what was snapshotted: the coord cluster or
	// an entity shard of the region.
	Region  string `json:"region"`
	Cluster string `json:"cluster"`
	// ClusterID is the etcd cluster ID (hex) of the cluster snapshotted. A
	// restore makes a new one, which is what seals the restored cluster.
	ClusterID string `json:"cluster_id"`
	// Endpoint is the member the snapshot was read from.
	Endpoint string `json:"endpoint"`
	// Revision is the revision the snapshot holds.
	Revision int64 `json:"revision"`
	// Epoch is the cluster's epoch record at Revision; nil if it had none
	// (an unbootstrapped or wiped cluster).
	Epoch *epoch.Record `json:"epoch,omitempty"`
	// HighestAllocated is, on the coord cluster, the highest epoch the
	// region had allocated or recorded at Revision: a floor for the
	// operators' anchor after a coord restore (epochs allocated after the
	// snapshot are not in it; see docs/dr.md).
	HighestAllocated uint32 `json:"highest_allocated,omitempty"`
	// TakenAt is when the snapshot was read.
	TakenAt time.Time `json:"taken_at"`
	// Size and SHA256 are the snapshot file's.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// EtcdVersion is the version of the member that wrote it.
	EtcdVersion string `json:"etcd_version"`
	// Object is the snapshot's object name in the snapshot store; set by the snapshot store.
	Object string `json:"object,omitempty"`
	// ObjectVersion is the version of Object the snapshot store found written once
	// when it listed this snapshot (or wrote it); the snapshot store's Fetch reads
	// that version, so a write landing after the listing is not what is
	// restored. It is never stored in the manifest (json:"-"): a manifest
	// decoded from JSON or built by hand has none, and Fetch then looks
	// the version up itself.
	ObjectVersion string `json:"-"`
	// Signature is by the cluster's snapshot signing key (Sign): a
	// restore trusts no manifest without it.
	Signature *Signature `json:"signature,omitempty"`
}

// Source is where a snapshot is taken from: one member's client URL, with
// the TLS and credentials of a user with the root role (etcd serves a
// snapshot to no one else).
type Source struct {
	Region, Cluster string
	// Config is the client configuration; its first endpoint is read.
	Config clientv3.Config
	// Timeout bounds the whole take (the snapshot stream and the reads);
	// 5 minutes when zero.
	Timeout time.Duration
}

// Take saves a snapshot of src's cluster to path and returns its manifest.
func Take(ctx context.Context, src Source, path string) (Manifest, error) {
	if src.Region == "" || src.Cluster == "" {
		return Manifest{}, errors.New("snapshot: region and cluster are required")
	}
	if len(src.Config.Endpoints) == 0 {
		return Manifest{}, errors.New("snapshot: an endpoint is required")
	}
	timeout := src.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg := src.Config
	cfg.Endpoints = cfg.Endpoints[:1]
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	// The cluster ID is read first, from the member snapshotted: a
	// snapshot carries no cluster ID of its own.
	cli, err := clientv3.New(cfg)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s/%s: %w", src.Region, src.Cluster, err)
	}
	defer cli.Close()
	status, err := cli.Status(ctx, cfg.Endpoints[0])
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s/%s: status of %s: %w", src.Region, src.Cluster, cfg.Endpoints[0], err)
	}
	taken := time.Now().UTC()
	version, err := clientsnap.SaveWithVersion(ctx, cfg.Logger, cfg, path)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s/%s from %s: %w", src.Region, src.Cluster, cfg.Endpoints[0], err)
	}
	st, err := snapshot.NewV3(cfg.Logger).Status(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s/%s: read the file's status: %w", src.Region, src.Cluster, err)
	}
	m := Manifest{Format: FormatVersion, Region: src.Region, Cluster: src.Cluster, ClusterID: epoch.FormatID(status.Header.ClusterId),
		Endpoint: cfg.Endpoints[0], Revision: st.Revision, TakenAt: taken, EtcdVersion: version}
	if m.Size, m.SHA256, err = Digest(path); err != nil {
		return Manifest{}, err
	}
	if err := describe(path, status.Header.ClusterId, &m); err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s/%s: %w", src.Region, src.Cluster, err)
	}
	return m, nil
}

// describe reads the epoch records from the snapshot file itself: what a
// restore of it holds, whatever the live cluster compacted or wrote since.
func describe(path string, clusterID uint64, m *Manifest) error {
	kvs, err := ReadKeys(path, func(k string) bool {
		return k == lockkey.EpochKey || k == epoch.AllocKey || strings.HasPrefix(k, epoch.HighestPrefix)
	})
	if err != nil {
		return err
	}
	own := kvs[lockkey.EpochKey]
	if own != nil {
		st, err := epoch.Decode(own.Value, own.ModRevision)
		if err != nil {
			return err
		}
		m.Epoch = &st.Record
	}
	if m.Cluster == CoordCluster {
		var highest []*mvccpb.KeyValue
		for k, kv := range kvs {
			if strings.HasPrefix(k, epoch.HighestPrefix) {
				highest = append(highest, kv)
			}
		}
		rec, err := epoch.RecordedFrom(clusterID, m.Revision, kvs[epoch.AllocKey], highest, own)
		if err != nil {
			return err
		}
		m.HighestAllocated = rec.Highest
	}
	return nil
}

// Digest is a file's size and SHA-256 (hex).
func Digest(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	n, sum, err := Sum(f)
	if err != nil {
		return 0, "", fmt.Errorf("snapshot: digest %s: %w", path, err)
	}
	return n, sum, nil
}

// Sum is the size and SHA-256 (hex) of what r holds, read to its end:
// the same measure as Digest, of a stream (an object read back).
func Sum(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Verify checks that path is the snapshot m describes.
func (m Manifest) Verify(path string) error {
	size, sum, err := Digest(path)
	if err != nil {
		return err
	}
	if size != m.Size || sum != m.SHA256 {
		return fmt.Errorf("snapshot: %s is not the snapshot of %s/%s at revision %d: size %d sha256 %s, the manifest says size %d sha256 %s",
			path, m.Region, m.Cluster, m.Revision, size, sum, m.Size, m.SHA256)
	}
	return nil
}
