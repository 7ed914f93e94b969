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
	if ar.CA, ar.Service, err = newMinIOServer(ctx, env, minioServerArgs{Name: name, Host: h, Port: s.Archive.Port,
		CAName: "Lockplane " + s.Region + " archive CA", RootUser: ArchiveUser, RootPassword: ar.RootPassword}, in); err != nil {
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
