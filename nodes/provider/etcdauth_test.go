package provider_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"github.com/lockplane/lockplane/services/pki"
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
// client certificate with the deployer's common name.
func tlsEtcd(t *testing.T) (endpoint string, ca *pki.CA, certPEM, keyPEM []byte) {
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
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
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
