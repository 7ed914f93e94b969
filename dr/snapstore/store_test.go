package snapstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// These tests are about what the snapshot store stores and reads, not about etcd:
// their snapshot files are made by hand, with manifests that describe
// them as Take would.

// handMade is a snapshot file holding content and its manifest.
func handMade(t *testing.T, region, content string) (snapshot.Manifest, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	size, sum, err := snapshot.Digest(file)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot.Manifest{Format: snapshot.FormatVersion, Region: region, Cluster: snapshot.CoordCluster, ClusterID: "8e9e05c52164694d",
		Revision: 42, TakenAt: time.Now().UTC(), Size: size, SHA256: sum}, file
}

// storeCtx bounds a test's snapshot store calls.
func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ensured is region's snapshot store on the test MinIO, reached through cli.
func ensured(t *testing.T, ctx context.Context, cli *minio.Client, region string) snapstore.Store {
	t.Helper()
	v := keyed(snapstore.Store{Client: cli, Region: region})
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return v
}

// versionCount is how many versions key has, delete markers aside.
func versionCount(t *testing.T, ctx context.Context, cli *minio.Client, bucket, key string) int {
	t.Helper()
	n := 0
	for obj := range cli.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if obj.Key == key && !obj.IsDeleteMarker {
			n++
		}
	}
	return n
}

// through is a client of the test MinIO by way of a proxy that shows
// each request to hook first; a hook that returns true has answered it.
func through(t *testing.T, mio *resourcetest.MinIO, hook func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool) *minio.Client {
	t.Helper()
	forward := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: mio.Endpoint})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hook(w, r, forward) {
			forward.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := minio.New(srv.Listener.Addr().String(), &minio.Options{Creds: credentials.NewStaticV4(resourcetest.MinIOUser, resourcetest.MinIOPassword, "")})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// isObject is whether r is a plain read or write of the object whose name
// ends in suffix (not a listing, not a multipart step).
func isObject(r *http.Request, method, suffix string) bool {
	return r.Method == method && strings.HasSuffix(r.URL.Path, suffix) && r.URL.RawQuery == ""
}

// listed is whether ms holds object's manifest.
func listed(ms []snapshot.Manifest, object string) bool {
	return slices.ContainsFunc(ms, func(m snapshot.Manifest) bool { return m.Object == object })
}

// named is whether one of skipped names object for reason.
func named(skipped []error, object, reason string) bool {
	for _, e := range skipped {
		if strings.Contains(e.Error(), object) && strings.Contains(e.Error(), reason) {
			return true
		}
	}
	return false
}

// A write whose first attempt landed but whose answer was lost is retried
// by minio-go. The retry must not become a second version, which List
// would refuse as an overwrite, nor fail a snapshot that is stored.
// Without the conditional PUT, the small snapshot came back skipped as
// written twice; when a file of 16 MiB and up went as a multipart upload,
// without the read-back after a lost completion its Put failed with
// NoSuchUpload though its file had landed.
func TestAWriteRetriedAfterItLandedLeavesOneVersion(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	// last is whether r is the request that stores an object: a PUT, or a
	// multipart upload's completion.
	last := func(r *http.Request) bool {
		return isObject(r, http.MethodPut, ".db") || isObject(r, http.MethodPut, ".json") ||
			r.Method == http.MethodPost && strings.HasPrefix(r.URL.RawQuery, "uploadId=")
	}
	for _, tc := range []struct {
		name, region string
		size         int
	}{
		{"a small file", "retried", 1 << 10},
		// minio-go's multipart size.
		{"a file of 16 MiB and up", "retried-parts", 17 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen sync.Map
			var dropped atomic.Int32
			// The first attempt of each reaches MinIO; its answer does not.
			cli := through(t, mio, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
				if !last(r) {
					return false
				}
				if _, again := seen.LoadOrStore(r.URL.Path, true); again {
					return false
				}
				dropped.Add(1)
				forward.ServeHTTP(httptest.NewRecorder(), r)
				panic(http.ErrAbortHandler)
			})
			v := ensured(t, ctx, cli, tc.region)
			m, file := handMade(t, tc.region, strings.Repeat("s", tc.size))
			stored, err := v.Put(ctx, m, file)
			if err != nil {
				t.Fatal(err)
			}
			if dropped.Load() == 0 {
				t.Fatal("no answer was dropped: the test proves nothing")
			}
			base := strings.TrimSuffix(stored.Object, ".db")
			for _, key := range []string{base + ".db", base + ".json"} {
				if n := versionCount(t, ctx, mio.Client(t), snapstore.Bucket(tc.region), key); n != 1 {
					t.Errorf("%s has %d versions after a retried write, want 1", key, n)
				}
			}
			ms, skipped, err := v.List(ctx, snapshot.CoordCluster)
			if err != nil {
				t.Fatal(err)
			}
			if !listed(ms, stored.Object) {
				t.Fatalf("list after a retried write: %d snapshots, skipped %v; want %s listed", len(ms), skipped, stored.Object)
			}
		})
	}
}

// A Put run again while the first one's write is still under way (its
// caller gave up waiting) must not land a second version when the first
// lands. The first one's storing request is held at the proxy until the
// second Put has returned. Before each object was one PUT, minio-go's
// multipart upload (16 MiB and up) sent If-None-Match when it started the
// upload but not when it completed it: both completions landed, and the
// .db had 2 versions.
func TestAPutRunAgainWhileTheFirstIsUnderWayLeavesOneVersion(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	cli := through(t, mio, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
		// The request that stores the .db: a PUT, or a multipart completion.
		stores := isObject(r, http.MethodPut, ".db") ||
			(r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, ".db") && strings.HasPrefix(r.URL.RawQuery, "uploadId="))
		if stores && !first.Swap(true) {
			close(held)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return false
	})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let)
	v := ensured(t, ctx, cli, "twice-at-once")
	m, file := handMade(t, "twice-at-once", strings.Repeat("s", 17<<20))
	firstDone := make(chan error, 1)
	go func() {
		_, err := v.Put(ctx, m, file)
		firstDone <- err
	}()
	receive(t, ctx, held, "the first Put's write")
	stored, err := v.Put(ctx, m, file)
	let()
	if err != nil {
		t.Fatalf("the second Put: %v", err)
	}
	if err := receive(t, ctx, firstDone, "the first Put's end"); err != nil {
		t.Fatalf("the first Put, landing after the second: %v", err)
	}
	base := strings.TrimSuffix(stored.Object, ".db")
	for _, key := range []string{base + ".db", base + ".json"} {
		if n := versionCount(t, ctx, mio.Client(t), snapstore.Bucket("twice-at-once"), key); n != 1 {
			t.Errorf("%s has %d versions after two Puts at once, want 1", key, n)
		}
	}
	if ms, skipped, err := v.List(ctx, snapshot.CoordCluster); err != nil || !listed(ms, stored.Object) {
		t.Fatalf("list after two Puts at once: %d snapshots, skipped %v, %v; want %s listed", len(ms), skipped, err, stored.Object)
	}
}

// A Put that finds its names taken succeeds only when what is there is
// what it meant to write, and then adds no version; otherwise it fails,
// naming the object, and writes nothing. Without the conditional PUT, the
// second Put made second versions and the Put over other content
// overwrote it.
func TestAPutOverAnExistingNameChecksWhatIsThere(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	root := mio.Client(t)
	v := ensured(t, ctx, root, "taken")
	bucket := snapstore.Bucket("taken")
	count := func(key string) int { return versionCount(t, ctx, root, bucket, key) }

	t.Run("the same snapshot again", func(t *testing.T) {
		m, file := handMade(t, "taken", "stored twice")
		first, err := v.Put(ctx, m, file)
		if err != nil {
			t.Fatal(err)
		}
		again, err := v.Put(ctx, m, file)
		if err != nil {
			t.Fatalf("a second Put of the same snapshot: %v", err)
		}
		base := strings.TrimSuffix(first.Object, ".db")
		if again.Object != first.Object || count(base+".db") != 1 || count(base+".json") != 1 {
			t.Fatalf("after two Puts of %s: %s, %d and %d versions; want one of each", first.Object, again.Object, count(base+".db"), count(base+".json"))
		}
		if got, err := v.Find(ctx, base); err != nil || got.SHA256 != m.SHA256 {
			t.Fatalf("find after two Puts: %v", err)
		}
	})

	t.Run("another file under the snapshot's name", func(t *testing.T) {
		m, file := handMade(t, "taken", "the snapshot")
		name := snapshotName(m)
		other := "someone else's, longer"
		if _, err := root.PutObject(ctx, bucket, name+".db", strings.NewReader(other), int64(len(other)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := v.Put(ctx, m, file)
		if err == nil || !strings.Contains(err.Error(), name+".db") {
			t.Fatalf("a Put over other content: %v, want an error naming %s.db", err, name)
		}
		t.Logf("refused: %v", err)
		// Whoever looks into it goes by the digests named: each must be one
		// of the two objects', not a part's.
		_, otherSum, _ := snapshot.Sum(strings.NewReader(other))
		for _, sum := range regexp.MustCompile(`[0-9a-f]{64}`).FindAllString(err.Error(), -1) {
			if sum != m.SHA256 && sum != otherSum {
				t.Errorf("the refusal names sha256 %s, neither this snapshot's nor the object's in the snapshot store (%s)", sum, otherSum)
			}
		}
		if count(name+".db") != 1 || count(name+".json") != 0 {
			t.Fatalf("after the refused Put: %d versions of the .db, %d of the .json; want 1 and 0", count(name+".db"), count(name+".json"))
		}
	})

	t.Run("another manifest beside the snapshot", func(t *testing.T) {
		m, file := handMade(t, "taken", "the snapshot, its manifest forged")
		name := snapshotName(m)
		if _, err := root.FPutObject(ctx, bucket, name+".db", file, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		forged := m
		forged.Object, forged.Revision = name+".db", 7
		doc, _ := json.MarshalIndent(forged, "", "  ")
		if _, err := root.PutObject(ctx, bucket, name+".json", bytes.NewReader(doc), int64(len(doc)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := v.Put(ctx, m, file)
		if err == nil || !strings.Contains(err.Error(), name+".json") {
			t.Fatalf("a Put beside another manifest: %v, want an error naming %s.json", err, name)
		}
		t.Logf("refused: %v", err)
		if count(name+".db") != 1 || count(name+".json") != 1 {
			t.Fatalf("after the refused Put: %d versions of the .db, %d of the .json; want 1 each", count(name+".db"), count(name+".json"))
		}
	})
}

// snapshotName is where Put stores m, without the suffix: by the rule
// docs/dr.md gives (time, revision, the digest's first 12 digits).
func snapshotName(m snapshot.Manifest) string {
	return fmt.Sprintf("%s/%s-r%d-%s", m.Cluster, m.TakenAt.UTC().Format("20060102T150405.000Z"), m.Revision, m.SHA256[:12])
}

// A write that lands between List and the read does not change what is
// read: the manifest and the snapshot are read at the versions listed.
// Without the pinning, List returned a manifest written after it listed,
// and Fetch downloaded the overwrite (and refused it).
func TestReadsAreOfTheVersionsListed(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	root := mio.Client(t)
	bucket := snapstore.Bucket("pinned")

	t.Run("a manifest overwritten after the listing", func(t *testing.T) {
		var forgedOnce atomic.Bool
		var forge atomic.Pointer[func()]
		cli := through(t, mio, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
			// A read of the manifest, of whichever version.
			if f := forge.Load(); f != nil && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, ".json") && !forgedOnce.Swap(true) {
				(*f)()
			}
			return false
		})
		v := ensured(t, ctx, cli, "pinned")
		m, file := handMade(t, "pinned", "a manifest overwritten after the listing")
		stored, err := v.Put(ctx, m, file)
		if err != nil {
			t.Fatal(err)
		}
		forged := stored
		forged.Revision = stored.Revision + 1000
		doc, _ := json.MarshalIndent(forged, "", "  ")
		manifest := strings.TrimSuffix(stored.Object, ".db") + ".json"
		overwrite := func() {
			if _, err := root.PutObject(ctx, bucket, manifest, bytes.NewReader(doc), int64(len(doc)), minio.PutObjectOptions{}); err != nil {
				t.Error(err)
			}
		}
		forge.Store(&overwrite)
		got, err := v.Find(ctx, stored.Object)
		if !forgedOnce.Load() {
			t.Fatal("the manifest was never read through the proxy")
		}
		if err != nil || got.Revision != stored.Revision {
			t.Fatalf("find read revision %d (%v), want %d, the manifest listed", got.Revision, err, stored.Revision)
		}
	})

	t.Run("a snapshot overwritten after the listing", func(t *testing.T) {
		v := ensured(t, ctx, root, "pinned")
		m, file := handMade(t, "pinned", "a snapshot overwritten after the listing")
		stored, err := v.Put(ctx, m, file)
		if err != nil {
			t.Fatal(err)
		}
		found, err := v.Find(ctx, stored.Object)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.PutObject(ctx, bucket, stored.Object, strings.NewReader("overwritten"), 11, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := v.Fetch(ctx, found, filepath.Join(t.TempDir(), "out.db")); err != nil {
			t.Errorf("fetch of the snapshot found before the overwrite: %v, want the version found", err)
		}
		// A manifest made by hand names no version: Fetch reads the
		// object's first version, the one Put wrote, not the overwrite.
		hand := stored
		hand.ObjectVersion = ""
		out := filepath.Join(t.TempDir(), "hand.db")
		if err := v.Fetch(ctx, hand, out); err != nil {
			t.Fatalf("fetch by a hand-made manifest of an overwritten snapshot: %v, want its first version", err)
		}
		if err := stored.Verify(out); err != nil {
			t.Fatalf("fetch by a hand-made manifest read the overwrite: %v", err)
		}
	})
}

// When expiry (or a hand) has removed one object of a pair, the other is
// not a snapshot: List leaves it out and says why, and Latest falls back
// to the newest whole one. Without the check, Latest returned a snapshot
// whose file was gone.
func TestASnapshotMissingHalfOfItsPairIsSkipped(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	root := mio.Client(t)
	v := ensured(t, ctx, root, "half-expired")
	bucket := snapstore.Bucket("half-expired")
	var stored []snapshot.Manifest
	for i := range 3 {
		m, file := handMade(t, "half-expired", fmt.Sprintf("snapshot %d", i))
		m.TakenAt = m.TakenAt.Add(time.Duration(i) * time.Second)
		s, err := v.Put(ctx, m, file)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, s)
	}
	whole, noFile, noManifest := stored[0], stored[2], stored[1]
	// A plain delete on a versioned bucket adds a delete marker, as the
	// expiry rule does.
	if err := root.RemoveObject(ctx, bucket, noFile.Object, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := root.RemoveObject(ctx, bucket, strings.TrimSuffix(noManifest.Object, ".db")+".json", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, skipped, err := v.List(ctx, snapshot.CoordCluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range skipped {
		t.Logf("skipped: %v", e)
	}
	if len(ms) != 1 || ms[0].Object != whole.Object {
		t.Errorf("list offers %d snapshots, want %s alone", len(ms), whole.Object)
	}
	if !named(skipped, noFile.Object, "expired or is missing") {
		t.Errorf("list skipped %v; want %s named as expired or missing", skipped, noFile.Object)
	}
	if !named(skipped, strings.TrimSuffix(noManifest.Object, ".db"), "manifest") {
		t.Errorf("list skipped %v; want %s named for its missing manifest", skipped, noManifest.Object)
	}
	if got, _, err := v.Latest(ctx, snapshot.CoordCluster); err != nil || got.Object != whole.Object {
		t.Errorf("latest is %s (%v), want %s: the newer ones are half gone", got.Object, err, whole.Object)
	}
	if _, err := v.Find(ctx, noFile.Object); err == nil || !strings.Contains(err.Error(), "expired or is missing") {
		t.Errorf("find of a snapshot whose file is gone: %v", err)
	}
}

// A snapshot store that stalls holds a Put or a Fetch for TransferTimeout, not for
// as long as the caller's context allows.
func TestAStalledTransferEndsAtTheTransferTimeout(t *testing.T) {
	ctx := storeCtx(t)
	mio := resourcetest.StartMinIO(t)
	var stall atomic.Bool
	done := make(chan struct{})
	cli := through(t, mio, func(w http.ResponseWriter, r *http.Request, forward http.Handler) bool {
		if !stall.Load() || !strings.HasSuffix(r.URL.Path, ".db") {
			return false
		}
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-done:
		}
		return true
	})
	t.Cleanup(func() { close(done) })
	v := ensured(t, ctx, cli, "stalled")
	m, file := handMade(t, "stalled", "stored before the stall")
	stored, err := v.Put(ctx, m, file)
	if err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	// Only the transfer timeout can end a call before the caller's context
	// does: the other calls' is longer. Which deadline ended it is asked,
	// not how long it took.
	v.TransferTimeout, v.OpTimeout = time.Second, 10*time.Minute
	other, otherFile := handMade(t, "stalled", "put during the stall")
	if _, err := v.Put(ctx, other, otherFile); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("put to a stalled store: %v (the caller's context: %v), want it ended by the transfer timeout", err, ctx.Err())
	}
	if err := v.Fetch(ctx, stored, filepath.Join(t.TempDir(), "out.db")); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("fetch from a stalled store: %v (the caller's context: %v), want it ended by the transfer timeout", err, ctx.Err())
	}
}
