package provider_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/pki"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// tlsEtcd runs a one-member etcd that, like a deployed member
// (infra/components/etcd.go), serves clients over TLS and requires a
// client certificate of its CA. It returns the endpoint, the CA and a
// client certificate with the deployer's common name. opts change the
// member's configuration before it starts.
func tlsEtcd(t *testing.T, opts ...func(*embed.Config)) (endpoint string, ca *pki.CA, certPEM, keyPEM []byte) {
	t.Helper()
	ca, err := pki.NewCA("lockplane-etcd-test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvCert, srvKey, err := ca.Issue(pki.Request{CommonName: "m1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Client: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = ca.Issue(pki.Request{CommonName: "lockplane-deployer", Client: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := resourcetest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ec := embed.NewConfig()
	ec.Name, ec.Dir = "m1", filepath.Join(dir, "m1")
	cu := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = "m1=" + pu.String()
	ec.ClientTLSInfo = transport.TLSInfo{CertFile: write("server.pem", srvCert), KeyFile: write("server-key.pem", srvKey),
		TrustedCAFile: write("ca.pem", ca.CertPEM), ClientCertAuth: true}
	ec.EnableGRPCGateway = false
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	for _, o := range opts {
		o(ec)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready")
	}
	return cu.String(), ca, certPEM, keyPEM
}

func etcdClient(t *testing.T, endpoint string, ca *pki.CA, certPEM, keyPEM []byte, user, password string) (*clientv3.Client, error) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, Username: user, Password: password})
	if err == nil {
		t.Cleanup(func() { cli.Close() })
	}
	return cli, err
}

// EtcdAuth applies the roles to a cluster reached over TLS as root and
// turns authentication on: each user is then held to its role by etcd, a
// certificate alone no longer reads anything, the passwords are secret in
// the state, a second apply is harmless, and a changed password (root's
// too) is set by an update.
func TestEtcdAuthAppliesTheRolesOverTLS(t *testing.T) {
	endpoint, ca, certPEM, keyPEM := tlsEtcd(t)
	inputs := map[string]any{
		"endpoints": []any{endpoint}, "caCertPem": string(ca.CertPEM), "certPem": string(certPEM), "keyPem": string(keyPEM),
		"rootPassword": "root-pw", "arbiterPassword": "arbiter-pw", "adminPassword": "admin-pw", "tailerPassword": "tailer-pw",
	}
	p := provider.New()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Before: the deployer's certificate reads and writes anything.
	cert, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Put(ctx, "/sys/force/x", "x"); err != nil {
		t.Fatalf("before auth, a certificate's put: %v", err)
	}

	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuth", "coord"), Properties: props(t, inputs)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := plugin.UnmarshalProperties(created.GetProperties(), plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rootPassword", "arbiterPassword", "adminPassword", "tailerPassword", "keyPem"} {
		if !st[resource.PropertyKey(k)].IsSecret() {
			t.Errorf("%s is not secret in the state", k)
		}
	}
	if v := st["authEnabled"]; !v.IsBool() || !v.BoolValue() {
		t.Errorf("authEnabled: %v", v)
	}

	arb, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "arbiter", "arbiter-pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arb.Put(ctx, "/l/ns/k", "h"); err != nil {
		t.Errorf("the arbiter's put of a hold: %v", err)
	}
	if _, err := arb.Put(ctx, "/sys/force/y", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the arbiter's put of a force record: %v, want refused", err)
	}
	// The certificate alone is now user "lockplane-deployer", which does
	// not exist: refused.
	if _, err := cert.Get(ctx, "/sys/force/x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("after auth, a certificate's read: %v, want refused", err)
	}

	// Again, unchanged: harmless.
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuth", "coord"), Properties: props(t, inputs)}); err != nil {
		t.Fatalf("a second apply: %v", err)
	}
	// An update with new passwords, root's included.
	news := map[string]any{}
	for k, v := range inputs {
		news[k] = v
	}
	news["rootPassword"], news["arbiterPassword"] = "root-pw-2", "arbiter-pw-2"
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: urn("EtcdAuth", "coord"), Id: created.GetId(),
		Olds: created.GetProperties(), OldInputs: props(t, inputs), News: props(t, news)}); err != nil {
		t.Fatalf("update: %v", err)
	}
	if _, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "arbiter", "arbiter-pw"); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Errorf("the old arbiter password: %v, want refused", err)
	}
	for user, pw := range map[string]string{"arbiter": "arbiter-pw-2", "root": "root-pw-2"} {
		if _, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, user, pw); err != nil {
			t.Errorf("%s's new password: %v", user, err)
		}
	}

	// A missing password is refused before anything is sent.
	bad := map[string]any{}
	for k, v := range inputs {
		bad[k] = v
	}
	delete(bad, "tailerPassword")
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuth", "x"), Properties: props(t, bad)}); err == nil ||
		!strings.Contains(err.Error(), "user tailer: a password is required") {
		t.Errorf("a spec without the tailer's password: %v", err)
	}
}

// A member runs as the program runs it (infra/components EtcdAuthToken):
// --auth-token jwt keyed by an EtcdAuthTokenKey's private key file. The key's
// private half is a secret in the state; after EtcdAuth, signing in gets
// a signed token (three parts), not a simple one. The epoch bootstrap
// signs in as root: before authentication is on (as no user), and after
// it, when the deployer's certificate alone is refused.
func TestEtcdAuthWithJWTTokensAndTheEpochBootstrapAsRoot(t *testing.T) {
	p := provider.New()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuthTokenKey", "coord"), Properties: props(t, map[string]any{"cluster": "test-coord"})})
	if err != nil {
		t.Fatal(err)
	}
	st, err := plugin.UnmarshalProperties(key.GetProperties(), plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if !st["privateKeyPem"].IsSecret() || st["publicKeyPem"].IsSecret() {
		t.Fatalf("privateKeyPem secret %v, publicKeyPem secret %v; want only the private key secret", st["privateKeyPem"].IsSecret(), st["publicKeyPem"].IsSecret())
	}
	out := outputs(t, key.GetProperties())
	privPEM, pubPEM := out["privateKeyPem"].(string), out["publicKeyPem"].(string)
	priv, pub := parseKeyPair(t, privPEM, pubPEM)
	if priv.Curve != elliptic.P256() || !priv.PublicKey.Equal(pub) {
		t.Fatal("the key pair is not one P-256 key")
	}
	if !strings.HasPrefix(key.GetId(), "test-coord-") {
		t.Fatalf("id %q", key.GetId())
	}
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuthTokenKey", "x"), Properties: props(t, map[string]any{})}); err == nil ||
		!strings.Contains(err.Error(), "cluster: is required") {
		t.Fatalf("a key without a cluster: %v", err)
	}

	dir := t.TempDir()
	privPath, pubPath := filepath.Join(dir, "auth-token.key"), filepath.Join(dir, "auth-token.pub")
	os.WriteFile(privPath, []byte(privPEM), 0o600)
	os.WriteFile(pubPath, []byte(pubPEM), 0o600)
	endpoint, ca, certPEM, keyPEM := tlsEtcd(t, func(ec *embed.Config) {
		ec.AuthToken = etcdauth.AuthTokenFlag(privPath, 10*time.Minute) // as infra/components.EtcdAuthToken
	})
	conn := map[string]any{"endpoints": []any{endpoint}, "caCertPem": string(ca.CertPEM), "certPem": string(certPEM), "keyPem": string(keyPEM)}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range conn {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	epochInputs := with(map[string]any{"cluster": "coord", "coordEndpoints": []any{endpoint}, "rootPassword": "root-pw"})

	// A DR stack's cluster restored from a snapshot with no epoch record
	// is refused, not anchored and bootstrapped: that would unseal it with
	// no operator. (The cluster here is empty, as such a snapshot is.)
	restored := with(map[string]any{"cluster": "coord", "coordEndpoints": []any{endpoint}, "restored": true})
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdEpoch", "coord-restored"), Properties: props(t, restored)}); err == nil ||
		!strings.Contains(err.Error(), "restored from a snapshot with no epoch record") {
		t.Fatalf("a restored cluster without a record: %v; want refused", err)
	}

	// Before authentication: root's sign-in lets the bootstrap in as no user.
	e1, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdEpoch", "coord"), Properties: props(t, epochInputs)})
	if err != nil {
		t.Fatalf("the epoch bootstrap before authentication: %v", err)
	}
	if o := outputs(t, e1.GetProperties()); o["adopted"] != false || o["epoch"].(float64) < 1 {
		t.Fatalf("the bootstrap: %v", o)
	}
	if st, _ := plugin.UnmarshalProperties(e1.GetProperties(), plugin.MarshalOptions{KeepSecrets: true}); !st["rootPassword"].IsSecret() {
		t.Fatal("the epoch's rootPassword is not secret in the state")
	}

	authInputs := props(t, with(map[string]any{
		"rootPassword": "root-pw", "arbiterPassword": "arbiter-pw", "adminPassword": "admin-pw", "tailerPassword": "tailer-pw"}))
	auth, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdAuth", "coord"), Properties: authInputs})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "", "")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Authenticate(ctx, "arbiter", "arbiter-pw")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(resp.Token, ".") != 2 {
		t.Fatalf("token %q is not a JWT", resp.Token)
	}
	arb, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "arbiter", "arbiter-pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := arb.Get(ctx, "/sys/epoch"); err != nil {
		t.Fatalf("the arbiter's read with a signed token: %v", err)
	}

	// After: the bootstrap as root finds the record (a second up); with
	// the certificate alone it is refused.
	e2, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdEpoch", "coord"), Properties: props(t, epochInputs)})
	if err != nil {
		t.Fatalf("the epoch bootstrap as root after authentication: %v", err)
	}
	if o, o1 := outputs(t, e2.GetProperties()), outputs(t, e1.GetProperties()); o["adopted"] != true || o["epoch"] != o1["epoch"] {
		t.Fatalf("the bootstrap after authentication: %v; want the record adopted, epoch %v", o, o1["epoch"])
	}
	noRoot := with(map[string]any{"cluster": "coord", "coordEndpoints": []any{endpoint}})
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("EtcdEpoch", "coord"), Properties: props(t, noRoot)}); !errors.Is(err, rpctypes.ErrPermissionDenied) &&
		(err == nil || !strings.Contains(err.Error(), "permission denied")) {
		t.Fatalf("the epoch bootstrap with the certificate alone after authentication: %v; want refused", err)
	}
	// Refresh reads the record as root; with a wrong root password it
	// changes nothing rather than failing.
	read, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("EtcdEpoch", "coord"), Id: e1.GetId(), Properties: e1.GetProperties(), Inputs: props(t, epochInputs)})
	if err != nil || outputs(t, read.GetProperties())["epoch"] != outputs(t, e1.GetProperties())["epoch"] {
		t.Fatalf("refresh as root: %v, %v", err, read)
	}
	wrong := with(map[string]any{"cluster": "coord", "coordEndpoints": []any{endpoint}, "rootPassword": "not-root-pw"})
	if _, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("EtcdEpoch", "coord"), Id: e1.GetId(), Properties: e1.GetProperties(), Inputs: props(t, wrong)}); err != nil {
		t.Fatalf("refresh with a refused root password: %v", err)
	}

	// Refresh of EtcdAuth: kept while authentication is on, gone once the
	// cluster says it is off (as one rebuilt empty does), so the next up
	// applies the roles again.
	readAuth := func() *pulumirpc.ReadResponse {
		r, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("EtcdAuth", "coord"), Id: auth.GetId(), Properties: auth.GetProperties(), Inputs: authInputs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := readAuth(); r.GetId() == "" || outputs(t, r.GetProperties())["authEnabled"] != true {
		t.Fatalf("refresh with authentication on: %v", r)
	}
	root, err := etcdClient(t, endpoint, ca, certPEM, keyPEM, "root", "root-pw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	if r := readAuth(); r.GetId() != "" || r.GetProperties() != nil {
		t.Fatalf("refresh with authentication off: %v; want the resource gone", r)
	}
}

func parseKeyPair(t *testing.T, privPEM, pubPEM string) (*ecdsa.PrivateKey, *ecdsa.PublicKey) {
	t.Helper()
	b, _ := pem.Decode([]byte(privPEM))
	if b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("private key PEM %q", privPEM)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode([]byte(pubPEM))
	if pb == nil || pb.Type != "PUBLIC KEY" {
		t.Fatalf("public key PEM %q", pubPEM)
	}
	pk, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, ok1 := k.(*ecdsa.PrivateKey)
	pub, ok2 := pk.(*ecdsa.PublicKey)
	if !ok1 || !ok2 {
		t.Fatalf("not ECDSA keys: %T %T", k, pk)
	}
	return priv, pub
}
