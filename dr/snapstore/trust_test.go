package snapstore_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
)

// forge puts a snapshot pair under coord's prefix as anyone who may write
// the bucket can (root here, a stolen storer in the finding): the file
// and a manifest written as is, dated after every genuine one. sign, if
// set, signs the manifest first.
func forge(t *testing.T, v snapstore.Store, m snapshot.Manifest, file string, sign func(*snapshot.Manifest)) string {
	t.Helper()
	ctx := storeCtx(t)
	m.TakenAt = time.Now().UTC().Add(time.Hour)
	base := fmt.Sprintf("%s/%s-r%d-%s", m.Cluster, m.TakenAt.Format("20060102T150405.000Z"), m.Revision, m.SHA256[:12])
	m.Object, m.Signature = base+".db", nil
	if sign != nil {
		sign(&m)
	}
	doc, _ := json.Marshal(m)
	bucket := snapstore.Bucket(v.Region)
	if _, err := v.Client.FPutObject(ctx, bucket, m.Object, file, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Client.PutObject(ctx, bucket, base+".json", bytes.NewReader(doc), int64(len(doc)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return base
}

// A snapshot put by anyone but its cluster's signing key (unsigned, signed
// by a shard's key, or a genuine manifest edited to lower the unseal's
// floor) is never the latest, never found, never fetched; each is named.
func TestAForgedNewerSnapshotIsRefusedByName(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	v := ensured(t, ctx, mio.Client(t), "forged")
	m, file := handMade(t, "forged", "the genuine coord snapshot")
	m.HighestAllocated = 900
	genuine, err := v.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	low := m
	low.HighestAllocated = 1
	forged := map[string]string{
		forge(t, v, low, file, nil): "not signed",
		forge(t, v, low, file, func(f *snapshot.Manifest) {
			if err := f.Sign(testKeys["entity-0"]); err != nil {
				t.Fatal(err)
			}
		}): "not by a signing key of its cluster",
		forge(t, v, m, file, func(f *snapshot.Manifest) {
			// Signed as coord's job signs (floor 900), then lowered.
			if err := f.Sign(testKeys[snapshot.CoordCluster]); err != nil {
				t.Fatal(err)
			}
			f.HighestAllocated = 1
		}): "not by a signing key of its cluster",
		forge(t, v, low, file, func(f *snapshot.Manifest) {
			// Signed with coord's own key (a coord host's), dated ahead.
			if err := f.Sign(testKeys[snapshot.CoordCluster]); err != nil {
				t.Fatal(err)
			}
		}): "after the snapshot store stored it",
	}
	latest, refused, err := v.Latest(ctx, snapshot.CoordCluster)
	if err != nil {
		t.Fatal(err)
	}
	if latest.Object != genuine.Object || latest.HighestAllocated != 900 {
		t.Errorf("latest is %s (highest allocated %d), want the genuine %s (900)", latest.Object, latest.HighestAllocated, genuine.Object)
	}
	for base, why := range forged {
		if !named(refused, base, why) {
			t.Errorf("forged %s: not named in %v as %q", base, refused, why)
		}
		if _, err := v.Find(ctx, base); !errors.Is(err, snapstore.ErrUntrusted) || !strings.Contains(err.Error(), base) {
			t.Errorf("find %s: %v, want ErrUntrusted naming it", base, err)
		}
	}
	// A hand-built manifest of a forged one is refused before a download.
	hand := low
	hand.Object = ""
	for base := range forged {
		hand.Object = base + ".db"
		if err := v.Fetch(ctx, hand, filepath.Join(t.TempDir(), "out.db")); !errors.Is(err, snapstore.ErrUntrusted) {
			t.Errorf("fetch %s by hand: %v, want ErrUntrusted", base, err)
		}
	}
	// Without a key to check by, nothing is read at all.
	blind := v
	blind.Trusted = nil
	if _, _, err := blind.Latest(ctx, snapshot.CoordCluster); err == nil || !strings.Contains(err.Error(), "no trusted snapshot signing key for cluster coord") {
		t.Errorf("latest with no trusted key: %v, want refused naming the cluster", err)
	}
	// Trusting another key for coord, every coord snapshot is refused
	// by its signature: the key must be the cluster's own.
	other := v
	other.Trusted = snapstore.Keys{snapshot.CoordCluster: {testKeys["s0"].Public().(ed25519.PublicKey)}}
	if got, refused, err := other.Latest(ctx, snapshot.CoordCluster); !errors.Is(err, snapstore.ErrNone) || len(refused) != len(forged)+1 {
		t.Errorf("latest of coord trusting s0's key: %s, %d refused, %v; want none, all %d refused", got.Object, len(refused), err, len(forged)+1)
	}
}
