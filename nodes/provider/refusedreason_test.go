package provider_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/minio/minio-go/v7"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// A StoreSnapshot's refused output says, per snapshot "latest" left out,
// its name and a machine-readable reason: "untrusted" only for one not
// signed by its cluster's key (a forgery); a snapshot half expired,
// written twice or unreadable is named with its own reason, so `up` does
// not call the snapshot store's wear a forgery.
func TestRefusedSnapshotsCarryTheirReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sv := &signedStore{mio: resourcetest.StartMinIO(t), region: fmt.Sprintf("rr%d", time.Now().UnixNano()%1e9)}
	sv.root = sv.mio.Client(t)
	if err := (snapstore.Store{Client: sv.root, Region: sv.region}).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	coordKey, pub := newKey(t)
	forgerKey, _ := newKey(t)
	bucket := snapstore.Bucket(sv.region)
	at := time.Now().Add(-time.Hour)

	gm, gfile := sv.manifest(t, "genuine", at, 900)
	genuine := strings.TrimSuffix(sv.put(t, ctx, gm, gfile, coordKey).Object, ".db")
	fm, ffile := sv.manifest(t, "forged", at.Add(time.Minute), 1)
	forged := strings.TrimSuffix(sv.put(t, ctx, fm, ffile, forgerKey).Object, ".db")
	// Half expired: its snapshot object is gone, its manifest stays.
	hm, hfile := sv.manifest(t, "half expired", at.Add(2*time.Minute), 900)
	half := strings.TrimSuffix(sv.put(t, ctx, hm, hfile, coordKey).Object, ".db")
	if err := sv.root.RemoveObject(ctx, bucket, half+".db", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// Written again: its manifest has a second version (older than the
	// genuine one, whose first version would otherwise be the latest).
	om, ofile := sv.manifest(t, "overwritten", at.Add(-time.Minute), 900)
	over := strings.TrimSuffix(sv.put(t, ctx, om, ofile, coordKey).Object, ".db")
	doc, err := sv.root.GetObject(ctx, bucket, over+".json", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(doc); err != nil {
		t.Fatal(err)
	}
	if _, err := sv.root.PutObject(ctx, bucket, over+".json", bytes.NewReader(b.Bytes()), int64(b.Len()), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	p := provider.New()
	in := props(t, sv.inputs(provider.Latest, pub))
	resp, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("VaultSnapshot", "latest"), Properties: in})
	if err != nil {
		t.Fatal(err)
	}
	out := outputs(t, resp.Properties)
	if out["manifest"] != genuine {
		t.Fatalf("latest chose %v, want the genuine %s", out["manifest"], genuine)
	}
	got := map[string]string{}
	list, _ := out["refused"].([]any)
	for _, r := range list {
		m, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("refused entry %v: want {name, reason, detail}", r)
		}
		name, _ := m["name"].(string)
		got[name], _ = m["reason"].(string)
		if d, _ := m["detail"].(string); !strings.Contains(d, name) {
			t.Errorf("refused %s: detail %q does not name it", name, d)
		}
	}
	want := map[string]string{forged: "untrusted", half: "incomplete", over: "overwritten"}
	for name, reason := range want {
		if got[name] != reason {
			t.Errorf("refused %s: reason %q, want %q (all: %v)", name, got[name], reason, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("refused %v, want exactly %v", got, want)
	}
}
