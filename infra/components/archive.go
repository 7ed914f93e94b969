package components

import (
	"fmt"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ArchiveUser is the archive's MinIO root user; its password is the
// secure stack configuration lockplane:archivePassword or, without it, a
// secret the program makes once (nodes.Password). It is given to MinIO on
// the archive host (a 0600 file) and to the ArchiveBuckets resource at
// deploy time, never to an arbiter.
const ArchiveUser = "lockplane"

// ArchiverUser is the MinIO user the arbiters archive as: it may add and
// read history and records, never delete one, shorten a retention or
// change a bucket's rules (nodes/provider ArchiverPolicy). Its password
// is lockplane:archiverPassword or, without it, made once.
const ArchiverUser = "lockplane-archiver"

// The archive's buckets: the arbiters' --archive-history-bucket and
// --archive-records-bucket.
const (
	ArchiveHistoryBucket = "lockplane-history"
	ArchiveRecordsBucket = "lockplane-records"
)

// Archive is the region's audit archive: one MinIO server on the archive
// host, serving S3 over TLS with a certificate of the archive's own CA.
// Its buckets (history with a lifecycle rule, records under object lock)
// and the archiver user are set up at deploy time with the root user
// (nodes.ArchiveBuckets); the elected arbiter, as the archiver, checks
// the buckets and copies the audit store's history there every day.
type Archive struct {
	pulumi.ResourceState
	Host topology.Host
	// URL is the S3 base URL, the arbiters' --archive.
	URL string
	// CA signed the server's certificate: the arbiters' --archive-ca.
	CA *nodes.CA
	// RootPassword is the root user's password, ArchiverPassword the
	// archiver's (secret outputs).
	RootPassword, ArchiverPassword pulumi.StringOutput
	Service                        *nodes.Service
	// Buckets made the buckets and the archiver: the arbiters start
	// after it.
	Buckets *nodes.ArchiveBuckets
}

// ArchiveArgs places the archive.
type ArchiveArgs struct {
	Host topology.Host
}

// ArchiveFiles are the server's files on its host.
type ArchiveFiles struct{ Bin, Certs, Password, Data string }

// ArchiveCommand is the server's command line: its data directory and its
// S3 API on the host's address, the console on loopback only.
func ArchiveCommand(h topology.Host, port int, f ArchiveFiles) []string {
	return []string{f.Bin, "server", f.Data, "--address", fmt.Sprintf("%s:%d", h.Address, port),
		"--console-address", "127.0.0.1:0", "--certs-dir", f.Certs, "--quiet"}
}

// NewArchive installs MinIO, its certificate and root password on the
// archive host and runs it.
func NewArchive(ctx *pulumi.Context, env *Env, a ArchiveArgs, opts ...pulumi.ResourceOption) (*Archive, error) {
	s := env.Stack
	h := a.Host
	ar := &Archive{Host: h, URL: fmt.Sprintf("https://%s:%d", h.Address, s.Archive.Port)}
	name := s.Region + "-archive-" + h.Name
	if err := ctx.RegisterComponentResource("lockplane:infra:Archive", name, ar, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(ar)
	var err error
	// Its own CA: a certificate of the etcd or SPIFFE CA would let the
	// archive host pass for an etcd member or a workload.
	if ar.CA, err = nodes.NewCA(ctx, name+"-ca", "Lockplane "+s.Region+" archive CA", 10*365*24, nil, in); err != nil {
		return nil, err
	}
	cert, err := nodes.NewCertificate(ctx, name+"-tls", nodes.CertificateArgs{CA: ar.CA, CommonName: h.Name,
		IPs: []string{h.Address, "127.0.0.1"}, Server: true, ValidityHours: 365 * 24}, in)
	if err != nil {
		return nil, err
	}
	password, err := servicePassword(ctx, name+"-root-password", "archive", "lockplane:archivePassword", env.ArchivePassword, in)
	if err != nil {
		return nil, err
	}
	// Marked again so that every value made of it is a secret too,
	// whatever the provider reports.
	ar.RootPassword = pulumi.ToSecret(password).(pulumi.StringOutput)
	archiver, err := servicePassword(ctx, name+"-archiver-password", "archiver", "lockplane:archiverPassword", env.ArchiverPassword, in)
	if err != nil {
		return nil, err
	}
	ar.ArchiverPassword = pulumi.ToSecret(archiver).(pulumi.StringOutput) // the arbiters' files are made of it
	conn := env.Connection(h)
	f := ArchiveFiles{Bin: env.BinPath(h, "minio"), Certs: env.ConfPath(h, "minio/certs"),
		Password: env.ConfPath(h, "minio/root-password"), Data: h.HostPath("/var/lib/lockplane/minio")}
	deps, triggers, err := putConfig(ctx, conn, name, []configFile{
		{f.Certs + "/public.crt", cert.CertPem, "0644"}, {f.Certs + "/private.key", cert.KeyPem, "0600"},
		{f.Password, ar.RootPassword, "0600"},
	}, in)
	if err != nil {
		return nil, err
	}
	bin, err := nodes.NewFile(ctx, name+"-bin", nodes.FileArgs{Connection: conn, Path: f.Bin, Source: env.MinIO.Path,
		SourceSha256: env.MinIO.Sha256, Mode: "0755"}, in)
	if err != nil {
		return nil, err
	}
	deps = append(deps, bin)
	triggers = append(triggers, bin.Sha256)
	// The password reaches MinIO by file, never on a command line or in a
	// unit's environment.
	if ar.Service, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "minio",
		Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h), Command: pulumi.ToStringArray(ArchiveCommand(h, s.Archive.Port, f)),
		Env:      map[string]string{"MINIO_ROOT_USER": ArchiveUser, "MINIO_ROOT_PASSWORD_FILE": f.Password, "MINIO_BROWSER": "off"},
		Triggers: triggers}, in, pulumi.DependsOn(deps)); err != nil {
		return nil, err
	}
	// The buckets and the archiver, made by root from where the program
	// runs, once MinIO answers.
	if ar.Buckets, err = nodes.NewArchiveBuckets(ctx, name+"-buckets", nodes.ArchiveBucketsArgs{URL: ar.URL, CA: ar.CA,
		RootUser: ArchiveUser, RootPassword: ar.RootPassword, HistoryBucket: ArchiveHistoryBucket, RecordsBucket: ArchiveRecordsBucket,
		HistoryDays: s.Archive.HistoryDays, RecordsYears: s.Archive.RecordsYears, RecordsMode: s.Archive.RecordsMode,
		User: ArchiverUser, Password: ar.ArchiverPassword}, in, pulumi.DependsOn([]pulumi.Resource{ar.Service})); err != nil {
		return nil, err
	}
	return ar, ctx.RegisterResourceOutputs(ar, pulumi.Map{"host": pulumi.String(h.Name), "url": pulumi.String(ar.URL),
		"caCertPem": ar.CA.CertPem})
}
