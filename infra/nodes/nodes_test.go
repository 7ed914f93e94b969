package nodes_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

type mocks struct {
	mu     sync.Mutex
	inputs map[string]resource.PropertyMap
}

func (m *mocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	m.inputs[args.TypeToken] = args.Inputs
	m.mu.Unlock()
	return args.Name + "-id", args.Inputs, nil
}

func (m *mocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) { return args.Args, nil }

// deployer is an etcd CA and the deployer's client certificate of it.
func deployer(ctx *pulumi.Context) (*nodes.CA, *nodes.Certificate, error) {
	ca, err := nodes.NewCA(ctx, "ca", "etcd", 24, nil)
	if err != nil {
		return nil, nil, err
	}
	cert, err := nodes.NewCertificate(ctx, "deployer", nodes.CertificateArgs{CA: ca, CommonName: "lockplane-deployer", Client: true, ValidityHours: 24})
	return ca, cert, err
}

// NewEtcdAuth registers an EtcdAuth with every password a secret input,
// whether or not the program made it one.
func TestNewEtcdAuthPassesThePasswordsAsSecrets(t *testing.T) {
	m := &mocks{inputs: map[string]resource.PropertyMap{}}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		ca, cert, err := deployer(ctx)
		if err != nil {
			return err
		}
		_, err = nodes.NewEtcdAuth(ctx, "coord-auth", nodes.EtcdAuthArgs{Endpoints: []string{"https://10.0.0.1:2379"}, CA: ca, Client: cert,
			Root: pulumi.String("r"), Arbiter: pulumi.String("a"), Admin: pulumi.String("d"), Tailer: pulumi.String("t")})
		return err
	}, pulumi.WithMocks("lockplane", "test", m))
	if err != nil {
		t.Fatal(err)
	}
	in := m.inputs["lockplane:nodes:EtcdAuth"]
	if in == nil {
		t.Fatalf("no EtcdAuth registered: %v", m.inputs)
	}
	for _, k := range []resource.PropertyKey{"rootPassword", "arbiterPassword", "adminPassword", "tailerPassword"} {
		if v, ok := in[k]; !ok || !v.ContainsSecrets() {
			t.Errorf("%s: %v, want a secret input", k, v)
		}
	}
	if eps := in["endpoints"]; !eps.IsArray() || len(eps.ArrayValue()) != 1 {
		t.Errorf("endpoints: %v", eps)
	}
}

// NewEtcdEpoch passes a root password as a secret, and none when the
// program gives none; NewEtcdAuthTokenKey names its cluster.
func TestNewEtcdEpochPassesRootsPasswordAsASecret(t *testing.T) {
	for _, root := range []pulumi.StringInput{pulumi.String("r"), nil} {
		m := &mocks{inputs: map[string]resource.PropertyMap{}}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			ca, cert, err := deployer(ctx)
			if err != nil {
				return err
			}
			if _, err := nodes.NewEtcdAuthTokenKey(ctx, "coord-key", "r-coord"); err != nil {
				return err
			}
			_, err = nodes.NewEtcdEpoch(ctx, "coord-epoch", nodes.EtcdEpochArgs{Cluster: "coord", CoordEndpoints: []string{"https://10.0.0.1:2379"},
				Endpoints: []string{"https://10.0.0.1:2379"}, CA: ca, Client: cert, Root: root})
			return err
		}, pulumi.WithMocks("lockplane", "test", m))
		if err != nil {
			t.Fatal(err)
		}
		in := m.inputs["lockplane:nodes:EtcdEpoch"]
		if v, ok := in["rootPassword"]; (root != nil) != ok || (ok && !v.ContainsSecrets()) {
			t.Errorf("root %v: rootPassword %v", root, v)
		}
		if k := m.inputs["lockplane:nodes:EtcdAuthTokenKey"]; k["cluster"].StringValue() != "r-coord" {
			t.Errorf("EtcdAuthTokenKey inputs %v", k)
		}
	}
}

// Two Services with one name on one host would share a pid file, each
// start stopping the other: the program refuses the second, naming both.
func TestTwoServicesWithOneNameOnOneHostAreRefused(t *testing.T) {
	m := &mocks{inputs: map[string]resource.PropertyMap{}}
	conn := func(host string) nodes.Connection {
		var c nodes.Connection
		c.Host, c.User = host, "root"
		return c
	}
	svc := func(ctx *pulumi.Context, resource, host, name string) error {
		_, err := nodes.NewService(ctx, resource, nodes.ServiceArgs{Connection: conn(host), Name: name, Mode: "supervised",
			Command: pulumi.ToStringArray([]string{"/bin/sleep", "600"}), StateDir: "/run/x"})
		return err
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		for _, s := range [][3]string{{"a", "10.0.0.1", "minio"}, {"b", "10.0.0.2", "minio"}, {"c", "10.0.0.1", "etcd-coord"}} {
			if err := svc(ctx, s[0], s[1], s[2]); err != nil {
				t.Errorf("%v: %v", s, err)
			}
		}
		return svc(ctx, "snapshots", "10.0.0.1", "minio")
	}, pulumi.WithMocks("lockplane", "test", m))
	if err == nil || !strings.Contains(err.Error(), `service "minio" on 10.0.0.1: both a and snapshots run it`) {
		t.Fatalf("a second minio on one host: %v", err)
	}
}

// A readiness check reaches the provider whole: its update command and
// the addresses the service must hold are inputs, as a preview shows.
func TestAReadyCheckIsPassedWhole(t *testing.T) {
	m := &mocks{inputs: map[string]resource.PropertyMap{}}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var c nodes.Connection
		c.Host, c.User = "10.0.0.1", "root"
		_, err := nodes.NewService(ctx, "etcd", nodes.ServiceArgs{Connection: c, Name: "etcd-coord", Mode: "supervised",
			Command: pulumi.ToStringArray([]string{"/bin/etcd"}), StateDir: "/run/x",
			Ready: &nodes.ReadyCheck{Command: []string{"/bin/probe", "tcp"}, UpdateCommand: []string{"/bin/probe", "http"},
				Listens: []string{"10.0.0.1:2380", "10.0.0.1:2381"}, TimeoutSeconds: 30}})
		return err
	}, pulumi.WithMocks("lockplane", "test", m))
	if err != nil {
		t.Fatal(err)
	}
	ready := m.inputs["lockplane:nodes:Service"]["ready"]
	if !ready.IsObject() {
		t.Fatalf("ready: %v", ready)
	}
	r := ready.ObjectValue()
	for k, want := range map[resource.PropertyKey]int{"command": 2, "updateCommand": 2, "listens": 2} {
		if v := r[k]; !v.IsArray() || len(v.ArrayValue()) != want {
			t.Errorf("ready.%s: %v", k, v)
		}
	}
	if v := r["timeoutSeconds"]; !v.IsNumber() || v.NumberValue() != 30 {
		t.Errorf("ready.timeoutSeconds: %v", v)
	}
}
