package snapshot

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// tombstoneLen is a deletion's revision key: main, '_', sub, then 't'.
const tombstoneLen = 8 + 1 + 8 + 1

// ReadKeys reads, from a snapshot file, the value each key that match
// accepts had at the snapshot's revision: what a restore of it holds. A
// key deleted by then is absent. The file is opened read-only and scanned
// once (etcd keeps every key's revisions in one bucket, in revision
// order), so the time grows with the snapshot's size.
func ReadKeys(path string, match func(key string) bool) (map[string]*mvccpb.KeyValue, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	defer db.Close()
	out := map[string]*mvccpb.KeyValue{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Key.Name())
		if b == nil {
			return errors.New("it has no key bucket: not an etcd v3 backend")
		}
		return b.ForEach(func(rev, raw []byte) error {
			var kv mvccpb.KeyValue
			if err := kv.Unmarshal(raw); err != nil {
				return fmt.Errorf("revision %v: %w", mvcc.BytesToRev(rev), err)
			}
			if !match(string(kv.Key)) {
				return nil
			}
			// A tombstone (the revision marked 't') ends the key; the
			// bucket is in revision order, so the last entry wins.
			if len(rev) == tombstoneLen && rev[len(rev)-1] == 't' {
				delete(out, string(kv.Key))
				return nil
			}
			out[string(kv.Key)] = &kv
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	return out, nil
}
