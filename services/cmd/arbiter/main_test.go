package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/audit/chstore"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"github.com/lockplane/lockplane/services/internal/svidflags"
	"github.com/lockplane/lockplane/services/resourcetest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The production arbiter does not fail open on authorisation by omission.
func TestAnArbiterWithoutAPolicySetRefusesToStart(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		f    flags
		want []string
	}{
		{flags{endpoints: "http://127.0.0.1:1"}, []string{"--policies", "--allow-any-workload"}},
		{flags{endpoints: "http://127.0.0.1:1", policies: "policies", allowAnyWorkload: true}, []string{"choose one"}},
	} {
		err := run(context.Background(), tc.f, log)
		if err == nil {
			t.Fatalf("%+v: started", tc.f)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%+v: %v, want it to name %q", tc.f, err, w)
			}
		}
	}
}

// The same, as an operator meets it: the built binary exits non-zero and
// its log names both ways to start it.
func TestTheArbiterBinaryWithoutAPolicySetExitsNamingBothOptions(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "arbiter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the arbiter: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr strings.Builder
	c := exec.CommandContext(ctx, bin, "--etcd-endpoints", "http://127.0.0.1:1", "--etcd-without-auth",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	c.Stderr = &stderr
	err := c.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the arbiter without --policies or --allow-any-workload: %v, want a non-zero exit\n%s", err, stderr.String())
	}
	for _, w := range []string{"--policies", "--allow-any-workload"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr does not name %s:\n%s", w, stderr.String())
		}
	}
	// A malformed --operator-prefix is refused as the flags are parsed.
	out, err := exec.CommandContext(ctx, bin, "--operator-prefix", "/", "--allow-any-workload").CombinedOutput()
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "-operator-prefix") || !strings.Contains(string(out), "at least one segment") {
		t.Errorf("the arbiter with --operator-prefix /: %v, want exit 2 naming the flag and the rule\n%s", err, out)
	}
}

// Audit never takes the lock service down: with an audit store that does
// not answer, the arbiter starts, serves locks, and says the store did not
// answer to an operator's audit query.
func TestAnUnreachableAuditStoreDoesNotStopLockServing(t *testing.T) {
	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	f := arbiterFlags(t, env, dir)
	f.auditStore, f.auditDatabase = "http://127.0.0.1:1", "lockplane"
	addr := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := *env.Profile
	p.Endpoint = addr
	dial := func(name string) *lockclient.Client {
		c, err := lockclient.DialProfile(&p, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	s := devenvtest.Session(t, dial("demo"), "")
	h, err := s.Lock(ctx, "team-a/orders/42", func(*lockclient.Hold) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = adminv1.NewAdminServiceClient(dial("alice").Conn()).Audit(ctx, &adminv1.AuditRequest{Key: "team-a/orders/42"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("audit query with the store down: %v, want UNAVAILABLE", err)
	}
}

// arbiterFlags are the flags of a production arbiter on env's coord
// cluster, signed in to etcd as its three users, with open authorisation
// and no operator sign-in.
func arbiterFlags(t *testing.T, env *devenv.Env, dir string) flags {
	t.Helper()
	port, err := resourcetest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pw := env.EtcdAuth.Credentials()
	creds := fmt.Sprintf("arbiter %s:%s\nadmin %s:%s\ntailer %s:%s\n", etcdauth.Arbiter, pw[etcdauth.Arbiter],
		etcdauth.Admin, pw[etcdauth.Admin], etcdauth.Tailer, pw[etcdauth.Tailer])
	pki := filepath.Join(dir, "pki")
	return flags{
		listen: addr, metricsListen: "127.0.0.1:0", endpoints: strings.Join(env.Cluster.Endpoints(), ","),
		etcdCredentials: writeCredentials(t, creds, 0o600),
		svid: svidflags.Flags{Cert: filepath.Join(pki, "arbiter", "svid.pem"), Key: filepath.Join(pki, "arbiter", "key.pem"),
			Bundle: filepath.Join(pki, "bundle.pem"), Domain: devenv.TrustDomain},
		cluster: "embedded", operatorPrefix: "/operator/",
		opTimeout: 2 * time.Second, allowAnyWorkload: true, policyReload: time.Minute, actionTTL: time.Hour,
	}
}

// serve runs the arbiter of f until the test ends and returns once it
// listens.
func serve(t *testing.T, f flags) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- run(sctx, f, slog.New(slog.DiscardHandler)) }()
	// After the clients close (cleanups run last first): a graceful stop
	// waits for their streams.
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("arbiter stopped with %v", err)
		}
	})
	for {
		c, err := net.Dial("tcp", f.listen)
		if err == nil {
			c.Close()
			return f.listen
		}
		select {
		case err := <-served:
			t.Fatalf("the arbiter did not start: %v", err)
		case <-ctx.Done():
			t.Fatalf("the arbiter did not listen on %s: %v", f.listen, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// The production arbiter signs in to etcd as a user (or is told
// explicitly not to), and without operator sign-in refuses the one-person
// epoch advance unless told it is a trial.
func TestTheProductionArbitersEtcdUsersAndOnePersonAdvance(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		f    flags
		want []string
	}{
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true}, []string{"--etcd-credentials", "--etcd-without-auth"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdWithoutAuth: true, etcdCredentials: "x"}, []string{"choose one"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdCredentials: writeCredentials(t, "arbiter a:b\n", 0o600)}, []string{"--etcd-credentials", "no admin line"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdCredentials: writeCredentials(t, "arbiter a:b\nadmin c:d\ntailer a:e\n", 0o600)}, []string{"--etcd-credentials", "the arbiter and tailer lines name one user"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdCredentials: writeCredentials(t, "arbiter a:b\nadmin root:d\ntailer c:e\n", 0o600)}, []string{"--etcd-credentials", "the admin line names root"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdCredentials: writeCredentials(t, "arbiter snapshot:b\nadmin a:d\ntailer c:e\n", 0o600)}, []string{"--etcd-credentials", "the arbiter line names snapshot, a user of etcd's root role"}},
		{flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, etcdWithoutAuth: true, actionTTL: time.Second}, []string{"--action-ttl", "between 1m and 168h"}},
	} {
		err := run(context.Background(), tc.f, log)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("%+v: %v, want a refusal naming %q", tc.f, err, w)
			}
		}
	}

	dir := t.TempDir()
	env := devenvtest.Start(t, devenv.Options{Dir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Users given, but the cluster has authentication off: refused, not
	// run as no user with the gauge saying auth is on.
	open, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Members: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	f := arbiterFlags(t, env, dir)
	f.endpoints = strings.Join(open.Endpoints(), ",")
	if err := run(ctx, f, log); err == nil || !strings.Contains(err.Error(), "authentication off") {
		t.Fatalf("--etcd-credentials against a cluster with auth off: %v, want a refusal", err)
	}

	for _, onePerson := range []bool{false, true} {
		f := arbiterFlags(t, env, dir)
		f.onePersonEpochAdvance = onePerson
		p := *env.Profile
		p.Endpoint = serve(t, f)
		alice, err := lockclient.DialProfile(&p, "alice")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { alice.Close(context.Background()) })
		admin := adminv1.NewAdminServiceClient(alice.Conn())
		st, err := admin.Status(ctx, &adminv1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "test"})
		switch {
		case !onePerson && (status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "--allow-one-person-epoch-advance")):
			t.Fatalf("one-person advance without --allow-one-person-epoch-advance: %v, want FAILED_PRECONDITION naming the flag", err)
		case onePerson && err != nil:
			t.Fatalf("one-person advance with --allow-one-person-epoch-advance: %v", err)
		}
	}
}

// A malformed --audit-store is a configuration error, refused at start.
func TestAMalformedAuditStoreIsRefused(t *testing.T) {
	f := flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, auditStore: "clickhouse:8123", auditDatabase: "lockplane"}
	if err := run(context.Background(), f, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--audit-store") {
		t.Fatalf("run: %v, want a refusal naming --audit-store", err)
	}
}

// writeCredentials writes an --audit-credentials file with mode perm.
func writeCredentials(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "audit-credentials")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// A malformed, unreadable or world-readable credentials file is refused
// at start with the flag, the file and the rule, and never the password.
func TestAuditCredentialsAreRefusedWhenMalformed(t *testing.T) {
	const secret = "s3cret-Pa55"
	for _, tc := range []struct {
		name, content string
		perm          os.FileMode
		want          string
	}{
		{"no reader", "writer lockplane:" + secret + "\n", 0o600, "no reader line"},
		{"no writer", "reader r:" + secret + "\n", 0o600, "no writer line"},
		{"unknown role", "admin lockplane:" + secret + "\nreader r:" + secret + "\n", 0o600, "line 1: starts with none of writer, reader"},
		{"no colon", "writer lockplane " + secret + "\nreader r:" + secret + "\n", 0o600, "line 1: the writer is not USER:PASSWORD"},
		{"empty password", "writer lockplane:\nreader r:" + secret + "\n", 0o600, "line 1: the writer is not USER:PASSWORD"},
		{"twice", "writer w:" + secret + "\nreader r:x\nreader r:" + secret + "\n", 0o600, "line 3: a second reader line"},
		{"same user", "writer w:" + secret + "\nreader w:" + secret + "\n", 0o600, "the same user w"},
		{"readable by others", "writer w:" + secret + "\nreader r:" + secret + "\n", 0o644, "mode 0644 lets others read it"},
	} {
		f := flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, auditStore: "http://127.0.0.1:1", auditDatabase: "lockplane",
			auditCredentials: writeCredentials(t, tc.content, tc.perm)}
		err := run(context.Background(), f, slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "--audit-credentials: "+f.auditCredentials) ||
			!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "writer USER:PASSWORD") {
			t.Errorf("%s: %v; want a refusal naming the flag, the file, %q and the rule", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error carries the password: %v", tc.name, err)
		}
	}
	f := flags{endpoints: "http://127.0.0.1:1", allowAnyWorkload: true, auditStore: "http://127.0.0.1:1", auditDatabase: "lockplane",
		auditCredentials: filepath.Join(t.TempDir(), "missing")}
	if err := run(context.Background(), f, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--audit-credentials") ||
		!strings.Contains(err.Error(), "cannot read it") {
		t.Errorf("a missing file: %v; want a refusal naming --audit-credentials", err)
	}
}

// Credentials go in the file, never on the command line; the file is for
// a store.
func TestAuditCredentialsOnTheCommandLineAreRefused(t *testing.T) {
	for _, f := range []flags{
		{auditStore: "http://lockplane:s3cret@127.0.0.1:1", auditDatabase: "lockplane"},
		{auditCredentials: "/etc/lockplane/arbiter/audit-credentials"},
	} {
		f.endpoints, f.allowAnyWorkload = "http://127.0.0.1:1", true
		err := run(context.Background(), f, slog.New(slog.DiscardHandler))
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%+v: %v; want a refusal without the password", f, err)
		}
	}
}

// The arbiter's two stores are the file's users against the real store:
// the writer migrates and inserts, the reader answers queries and cannot
// write.
func TestAuditCredentialsMakeAWriterAndAReader(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wu, wp := ch.Writer()
	ru, rp := ch.Reader()
	f := flags{auditStore: ch.URL() + "/", auditDatabase: "arbiter_creds",
		auditCredentials: writeCredentials(t, "# the audit store's users\nwriter "+wu+":"+wp+"\n\nreader "+ru+":"+rp+"\n", 0o600)}
	writer, reader, err := f.audit()
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Migrate(ctx); err != nil {
		t.Fatalf("the writer migrates: %v", err)
	}
	evs := audittest.EveryKind(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	if err := writer.Insert(ctx, evs); err != nil {
		t.Fatalf("the writer inserts: %v", err)
	}
	if got, err := reader.ByKey(ctx, evs[1].Key, time.Time{}, 100); err != nil || len(got) == 0 {
		t.Fatalf("the reader's ByKey: %d events, %v", len(got), err)
	}
	var chErr *chstore.Error
	if err := reader.Insert(ctx, evs); !errors.As(err, &chErr) || !strings.Contains(chErr.Message, "readonly") {
		t.Fatalf("the reader's Insert: %v; want ClickHouse's readonly refusal", err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

// The file the region program writes (components.AuditCredentials) is the
// one this flag reads, with chserver's users.
func TestTheProgramsCredentialsFileIsReadable(t *testing.T) {
	c, err := credfile.Read("--audit-credentials", writeCredentials(t, components.AuditCredentials("w-0123456789abcdef", "r-0123456789abcdef"), 0o600), auditRoles...)
	if err != nil {
		t.Fatal(err)
	}
	if c["writer"] != (credfile.Account{User: chserver.WriterUser, Password: "w-0123456789abcdef"}) || c["reader"] != (credfile.Account{User: chserver.ReaderUser, Password: "r-0123456789abcdef"}) || len(c) != 2 {
		t.Fatalf("read %+v", c)
	}
}
