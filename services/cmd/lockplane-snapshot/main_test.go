package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/resourcetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopMinIO()
	os.Exit(code)
}

func credentialsFile(t *testing.T, line string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(p, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// signingKeyFile writes a new signing key, mode 0600, and returns its
// path and public key.
func signingKeyFile(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	priv, pub, err := snapshot.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "signing-key.pem")
	if err := os.WriteFile(p, []byte(priv), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := snapshot.ParsePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p, k
}

// Every refusal names its flag and the rule, before anything is reached.
func TestBadFlagsAreRefusedByName(t *testing.T) {
	storeCreds := credentialsFile(t, "vault a:b")
	key, _ := signingKeyFile(t)
	good := []string{"--region", "eu-west", "--cluster", "coord", "--endpoint", "https://10.0.0.5:2379", "--etcd-ca", storeCreds,
		"--store", "https://vault:9000", "--store-credentials", storeCreds, "--signing-key", key, "--etcd-without-auth=true"}
	with := func(kv ...string) []string {
		out := append([]string(nil), good...)
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == "--etcd-without-auth" { // a bool flag: one token
				out[len(out)-1] = "--etcd-without-auth=" + kv[i+1]
				continue
			}
			found := false
			for j := 0; j < len(out); j++ {
				if out[j] == kv[i] {
					out[j+1], found = kv[i+1], true
				}
			}
			if !found {
				out = append(out, kv[i], kv[i+1])
			}
		}
		return out
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{with("--region", "EU_West"), "--region"},
		{with("--cluster", ""), "--cluster"},
		{with("--endpoint", ""), "--endpoint: this host's member's client URL is required"},
		{with("--endpoint", "10.0.0.5:2379"), "--endpoint: want a client URL"},
		{with("--endpoint", "http://10.0.0.5:2379", "--etcd-ca", storeCreds), "--endpoint: an http URL would drop --etcd-ca"},
		{with("--etcd-without-auth", "false", "--etcd-credentials", storeCreds, "--endpoint", "http://10.0.0.5:2379", "--etcd-ca", ""), "password in clear"},
		{with("--dir", ""), "--dir: a directory"},
		{with("--store", ""), "--store: the snapshot store's base URL is required"},
		{with("--signing-key", ""), "--signing-key: the cluster's snapshot signing key file is required"},
		{with("--every", "10s"), "--every: 10s must be between 1m and 168h"},
		{with("--etcd-credentials", storeCreds), "--etcd-credentials and --etcd-without-auth: choose one"},
		{good[: len(good)-1 : len(good)-1], "--etcd-credentials FILE is required"},
	} {
		var stderr bytes.Buffer
		_, err := parse(c.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want it to say %q", c.args, err, c.want)
		}
	}
	if _, err := parse(good, &bytes.Buffer{}); err != nil {
		t.Errorf("good flags: %v", err)
	}
}

// A signing key others may read, or that is no Ed25519 key, is refused by
// name: whoever reads it can sign snapshots a restore would trust.
func TestSigningKeyFileIsCheckedByName(t *testing.T) {
	key, _ := signingKeyFile(t)
	if _, err := readSigningKey(key); err != nil {
		t.Fatalf("a 0600 key: %v", err)
	}
	os.Chmod(key, 0o644)
	if _, err := readSigningKey(key); err == nil || !strings.Contains(err.Error(), "--signing-key") || !strings.Contains(err.Error(), "0600") {
		t.Errorf("a 0644 key: %v, want refused naming --signing-key and 0600", err)
	}
	notKey := credentialsFile(t, "vault a:b")
	if _, err := readSigningKey(notKey); err == nil || !strings.Contains(err.Error(), "PRIVATE KEY") {
		t.Errorf("a file that is no key: %v, want refused naming the PEM block wanted", err)
	}
}

// --once against a cluster with authentication on, as its snapshot user,
// stores one snapshot in the region's snapshot store whose manifest names the
// cluster and its epoch.
func TestOnceStoresASnapshotAsTheSnapshotUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := etcdauth.DefaultSpec("root-pw", map[string]string{etcdauth.Arbiter: "arbiter-pw", etcdauth.Admin: "admin-pw",
		etcdauth.Tailer: "tailer-pw", etcdauth.Snapshotter: "snapshot-pw"})
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
	if _, err := epoch.BootstrapRegion(ctx, root, snapshot.CoordCluster, nil, 4); err != nil {
		t.Fatal(err)
	}
	mio := resourcetest.StartMinIO(t)
	key, pub := signingKeyFile(t)
	v := snapstore.Store{Client: mio.Client(t), Region: "once", Trusted: snapstore.Keys{snapshot.CoordCluster: {pub}}}
	if err := v.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	args := []string{"--region", "once", "--cluster", snapshot.CoordCluster, "--endpoint", c.Endpoints()[0],
		"--store", "http://" + mio.Endpoint, "--store-credentials", credentialsFile(t, "vault "+resourcetest.MinIOUser+":"+resourcetest.MinIOPassword),
		"--signing-key", key, "--dir", t.TempDir(), "--once"}

	// The arbiter's user may not take a snapshot: etcd refuses it.
	arbiter := credentialsFile(t, "snapshot "+etcdauth.Arbiter+":"+spec.Credentials()[etcdauth.Arbiter])
	if err := run(ctx, append(args, "--etcd-credentials", arbiter), &bytes.Buffer{}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(strings.ToLower(err.Error()), "permission denied") {
		t.Fatalf("a snapshot as the arbiter's user: %v, want etcd's permission denied", err)
	}
	rootLine := credentialsFile(t, "snapshot root:root-pw")
	if err := run(ctx, append(args, "--etcd-credentials", rootLine), &bytes.Buffer{}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "names root") {
		t.Fatalf("a snapshot as root: %v, want refused by name", err)
	}
	snap := credentialsFile(t, "snapshot "+etcdauth.Snapshotter+":"+spec.Credentials()[etcdauth.Snapshotter])
	var stdout bytes.Buffer
	if err := run(ctx, append(args, "--etcd-credentials", snap), &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	m, refused, err := v.Latest(ctx, snapshot.CoordCluster)
	if err != nil || len(refused) > 0 {
		t.Fatal(err, refused)
	}
	if m.Signature == nil || m.Epoch == nil || m.Epoch.Epoch != 5 || m.HighestAllocated != 5 || !strings.Contains(stdout.String(), m.Object) {
		t.Fatalf("stored %+v, printed %q: want epoch 5 and the object named", m, stdout.String())
	}
}
