package components

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/lockplane/lockplane/services/audit/chserver"

	"github.com/lockplane/lockplane/infra/nodes"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// ClickHouseBin is where Debian's clickhouse-server package puts the
// server. The program does not install it: production audit hosts have
// the package installed (`apt-get install clickhouse-server`, 18.16 or
// later); test hosts share this machine's filesystem and use its
// (`make clickhouse`).
const ClickHouseBin = "/usr/sbin/clickhouse-server"

// AuditStore is the region's audit store: one ClickHouse server on the
// audit host, its HTTP interface on the host's address, which every
// arbiter's audit tailers write to and answer `lockctl audit` from. The
// arbiters make the database and its tables themselves (they migrate the
// schema at start), so the store is only the server. Its users are
// chserver's two, writer and reader, with passwords; there is no default
// user.
type AuditStore struct {
	pulumi.ResourceState
	Host topology.Host
	// URL is the HTTP interface's base URL, the arbiters' --audit-store.
	URL string
	// Database is the arbiters' --audit-database.
	Database string
	Service  *nodes.Service
	// WriterPassword and ReaderPassword are the users' passwords, secret:
	// never outputs, only in the arbiters' --audit-credentials files.
	WriterPassword, ReaderPassword pulumi.StringOutput
}

// AuditStoreArgs places the store.
type AuditStoreArgs struct {
	Host topology.Host
	// Clients are the addresses and CIDR prefixes the store lets in, besides
	// the host's loopback: the arbiters.
	Clients []string
}

// ClickHouseFiles are the server's configuration and data on its host.
type ClickHouseFiles struct{ Config, Users, Data, Logs string }

// ClickHouseConfig is the server's configuration: the settings of
// Debian's /etc/clickhouse-server/config.xml one server needs, every path
// on the host. Only the HTTP interface is served, on the host's address
// and its loopback: ClickHouse 18.16 has one listen_host for every port,
// so the native TCP and interserver ports are left out rather than
// exposed (nothing here uses them; clickhouse-client on the host does not
// work, curl to the HTTP interface does).
func ClickHouseConfig(h topology.Host, port int, f ClickHouseFiles) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>information</level>
        <log>%[3]s/server.log</log>
        <errorlog>%[3]s/server.err.log</errorlog>
        <size>100M</size>
        <count>5</count>
    </logger>
    <listen_host>%[4]s</listen_host>
    <listen_host>127.0.0.1</listen_host>
    <http_port>%[5]d</http_port>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>268435456</mark_cache_size>
    <path>%[1]s/</path>
    <tmp_path>%[1]s/tmp/</tmp_path>
    <user_files_path>%[1]s/user_files/</user_files_path>
    <format_schema_path>%[1]s/format_schemas/</format_schema_path>
    <users_config>%[2]s</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
</yandex>
`, f.Data, f.Users, f.Logs, h.Address, port)
}

// ClickHouseUsers is the server's users file: the writer and the reader
// with their passwords' hashes, let in from the host's loopback and from
// clients only.
func ClickHouseUsers(clients []string, p chserver.Passwords) string {
	return chserver.Users(p, clients...)
}

// AuditCredentials is an arbiter's --audit-credentials file (the format
// the arbiter's flag states) for the store's two users.
func AuditCredentials(writerPassword, readerPassword string) string {
	return fmt.Sprintf("writer %s:%s\nreader %s:%s\n", chserver.WriterUser, writerPassword, chserver.ReaderUser, readerPassword)
}

// CheckPassword is the rule for a service password the stack's configuration
// gives (key names it): long enough not to be guessed over the network,
// and one line of the credentials file, which trims spaces.
func CheckPassword(key, password string) error {
	if len(password) < 16 {
		return fmt.Errorf("%s: must be at least 16 characters", key)
	}
	if strings.IndexFunc(password, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("%s: must not contain spaces or control characters", key)
	}
	return nil
}

// servicePassword is the configured password (checked) or, without one, a
// random one made once for purpose; secret either way.
func servicePassword(ctx *pulumi.Context, name, purpose, key string, configured pulumi.StringInput, opts ...pulumi.ResourceOption) (pulumi.StringOutput, error) {
	if configured != nil {
		return pulumi.ToSecret(configured.ToStringOutput().ApplyT(func(p string) (string, error) {
			return p, CheckPassword(key, p)
		})).(pulumi.StringOutput), nil
	}
	p, err := nodes.NewPassword(ctx, name, purpose, opts...)
	if err != nil {
		return pulumi.StringOutput{}, err
	}
	return p.Password, nil
}

// putCredentials puts an arbiter's --audit-credentials file on its host
// (mode 0600, secret in the state), returning it and its checksum like
// putConfig.
func (st *AuditStore) putCredentials(ctx *pulumi.Context, conn nodes.Connection, prefix, path string, opts ...pulumi.ResourceOption) ([]pulumi.Resource, pulumi.StringArray, error) {
	return putConfig(ctx, conn, prefix, []configFile{{path, st.credentials(), "0600"}}, opts...)
}

// credentials is the --audit-credentials file's content, secret.
func (st *AuditStore) credentials() pulumi.StringOutput {
	return pulumi.ToSecret(pulumi.All(st.WriterPassword, st.ReaderPassword).ApplyT(func(p []any) string {
		return AuditCredentials(p[0].(string), p[1].(string))
	})).(pulumi.StringOutput)
}

// NewAuditStore installs the server's configuration on the audit host and
// runs it.
func NewAuditStore(ctx *pulumi.Context, env *Env, a AuditStoreArgs, opts ...pulumi.ResourceOption) (*AuditStore, error) {
	s := env.Stack
	h := a.Host
	st := &AuditStore{Host: h, URL: fmt.Sprintf("http://%s:%d", h.Address, s.Audit.HTTPPort), Database: s.Audit.Database}
	name := s.Region + "-audit-" + h.Name
	if err := ctx.RegisterComponentResource("lockplane:infra:AuditStore", name, st, opts...); err != nil {
		return nil, err
	}
	in := pulumi.Parent(st)
	var err error
	if st.WriterPassword, err = servicePassword(ctx, name+"-writer-password", "audit", "lockplane:auditWriterPassword", env.AuditWriterPassword, in); err != nil {
		return nil, err
	}
	if st.ReaderPassword, err = servicePassword(ctx, name+"-reader-password", "audit", "lockplane:auditReaderPassword", env.AuditReaderPassword, in); err != nil {
		return nil, err
	}
	// Hashes only, but kept secret: they are of the passwords.
	users := pulumi.ToSecret(pulumi.All(st.WriterPassword, st.ReaderPassword).ApplyT(func(p []any) string {
		return ClickHouseUsers(a.Clients, chserver.Passwords{WriterSHA256: chserver.PasswordSHA256(p[0].(string)),
			ReaderSHA256: chserver.PasswordSHA256(p[1].(string))})
	})).(pulumi.StringOutput)
	conn := env.Connection(h)
	f := ClickHouseFiles{Config: env.ConfPath(h, "clickhouse/config.xml"), Users: env.ConfPath(h, "clickhouse/users.xml"),
		// Our own directories: the Debian package's service, if left
		// enabled, holds /var/lib/clickhouse.
		Data: h.HostPath("/var/lib/lockplane/clickhouse"), Logs: h.HostPath("/var/log/lockplane/clickhouse")}
	deps, triggers, err := putConfig(ctx, conn, name, []configFile{
		{f.Config, pulumi.String(ClickHouseConfig(h, s.Audit.HTTPPort, f)), "0644"},
		{f.Users, users, "0600"},
	}, in)
	if err != nil {
		return nil, err
	}
	probe, err := probeBinary(ctx, env, h)
	if err != nil {
		return nil, err
	}
	deps = append(deps, probe)
	if st.Service, err = nodes.NewService(ctx, name+"-service", nodes.ServiceArgs{Connection: conn, Name: "clickhouse",
		Mode: s.SSH.ServiceMode, StateDir: env.StateDir(h),
		Command:  pulumi.ToStringArray([]string{ClickHouseBin, "--config-file=" + f.Config}),
		Triggers: triggers, Ready: ClickHouseReady(env, h)}, in, pulumi.DependsOn(deps)); err != nil {
		return nil, err
	}
	return st, ctx.RegisterResourceOutputs(st, pulumi.Map{"host": pulumi.String(h.Name), "address": pulumi.String(h.Address),
		"url": pulumi.String(st.URL), "database": pulumi.String(st.Database)})
}
