package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// MinIOFiles are a MinIO server's files on its host.
type MinIOFiles struct{ Bin, Certs, Password, Data string }

// MinIOCommand is a MinIO server's command line: its data directory and
// its S3 API on the host's address, the console on loopback only.
func MinIOCommand(h topology.Host, port int, f MinIOFiles) []string {
	return []string{f.Bin, "server", f.Data, "--address", fmt.Sprintf("%s:%d", h.Address, port),
		"--console-address", "127.0.0.1:0", "--certs-dir", f.Certs, "--quiet"}
}

// minioServerArgs place one MinIO server: the audit archive's or a
// snapshot store's.
type minioServerArgs struct {
	// Name prefixes its resources.
	Name string
	Host topology.Host
	Port int
	// CAName is the common name of its own CA.
	CAName       string
	RootUser     string
	RootPassword pulumi.StringOutput
}

// newMinIOServer installs MinIO (this repo's bin/minio), a certificate of
// a CA of its own and the root password on a host and runs it over TLS.
// Its own CA: a certificate of the etcd or SPIFFE CA would let the host
// pass for an etcd member or a workload.
func newMinIOServer(ctx *pulumi.Context, env *Env, a minioServerArgs, in pulumi.ResourceOption) (*nodes.CA, *nodes.Service, error) {
	h := a.Host
	ca, err := nodes.NewCA(ctx, a.Name+"-ca", a.CAName, 10*365*24, nil, in)
	if err != nil {
		return nil, nil, err
	}
	cert, err := nodes.NewCertificate(ctx, a.Name+"-tls", nodes.CertificateArgs{CA: ca, CommonName: h.Name,
		IPs: []string{h.Address, "127.0.0.1"}, Server: true, ValidityHours: 365 * 24}, in)
	if err != nil {
		return nil, nil, err
	}
	conn := env.Connection(h)
	f := MinIOFiles{Bin: env.BinPath(h, "minio"), Certs: env.ConfPath(h, "minio/certs"),
		Password: env.ConfPath(h, "minio/root-password"), Data: h.HostPath("/var/lib/lockplane/minio")}
	// Its CA beside it, outside the certs directory: for its readiness
	// check to verify it by.
	caFile := env.ConfPath(h, "minio/ca.crt")
	deps, triggers, err := putConfig(ctx, conn, a.Name, []configFile{
		{f.Certs + "/public.crt", cert.CertPem, "0644"}, {f.Certs + "/private.key", cert.KeyPem, "0600"},
		{f.Password, a.RootPassword, "0600"}, {caFile, ca.CertPem, "0644"},
	}, in)
	if err != nil {
		return nil, nil, err
	}
	bin, err := nodes.NewFile(ctx, a.Name+"-bin", nodes.FileArgs{Connection: conn, Path: f.Bin, Source: env.MinIO.Path,
		SourceSha256: env.MinIO.Sha256, Mode: "0755"}, in)
	if err != nil {
		return nil, nil, err
	}
	deps = append(deps, bin)
	triggers = append(triggers, bin.Sha256)
	// Its readiness check runs lockplane-node, which every program that
	// makes a MinIO installs; a program without it (a test's) starts
	// MinIO unchecked.
	var ready *nodes.ReadyCheck
	if env.Node.Path != "" {
		probe, err := probeBinary(ctx, env, h)
		if err != nil {
			return nil, nil, err
		}
		deps, ready = append(deps, probe), MinIOReady(env, h, a.Port, caFile)
	}
	// The password reaches MinIO by file, never on a command line or in a
	// unit's environment.
	svc, err := nodes.NewService(ctx, a.Name+"-service", nodes.ServiceArgs{Connection: conn, Name: "minio",
		Mode: env.Stack.SSH.ServiceMode, StateDir: env.StateDir(h), Command: pulumi.ToStringArray(MinIOCommand(h, a.Port, f)),
		Env:      map[string]string{"MINIO_ROOT_USER": a.RootUser, "MINIO_ROOT_PASSWORD_FILE": f.Password, "MINIO_BROWSER": "off"},
		Triggers: triggers, Ready: ready}, in, pulumi.DependsOn(deps))
	if err != nil {
		return nil, nil, err
	}
	return ca, svc, nil
}
