package etcdembed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A client signed in before its cluster was rebuilt empty is answered by
// the new cluster at once. With etcd's default simple tokens it is not: the
// token names the Raft index it was issued at, and the rebuilt members wait
// for their own index to reach it, so every call runs out its deadline.
func TestAClientSignedInBeforeARebuildIsAnsweredAfterIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := etcdauth.Generated()
	c, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1, Auth: &spec})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root, err := clientv3.New(c.ClientConfig(etcdauth.RootUser))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// Raise the index well past where the rebuilt cluster will be, then
	// sign in: the token is issued at the high index.
	for i := range 100 {
		if _, err := root.Put(ctx, fmt.Sprintf("/l/raise/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := clientv3.New(c.ClientConfig(etcdauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Get(ctx, "/l/raise/0"); err != nil {
		t.Fatal(err)
	}

	if err := c.Rebuild(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	defer gcancel()
	get, err := admin.Get(gctx, "/l/raise/0")
	if err != nil {
		t.Fatalf("a client signed in before the rebuild: %v", err)
	}
	if len(get.Kvs) != 0 {
		t.Fatalf("the rebuilt cluster holds %d keys, want none", len(get.Kvs))
	}
}
