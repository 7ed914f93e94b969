package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/audit/archive"
	"github.com/lockplane/lockplane/services/audit/archive/minioserver"
	"github.com/lockplane/lockplane/services/audit/chserver"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func devCmd() *cobra.Command {
	var dir, listen, metrics, output string
	var shards int
	var noAudit bool
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run the embedded default: a 3-member etcd cluster, the arbiter and a dev trust domain, on loopback",
		Long: `dev starts, in this process, a real 3-member etcd 3.6 cluster on free loopback
ports (lease checkpointing on), the arbiter over mTLS, and a development
trust domain whose SVIDs and profile are written under --dir. It serves
until interrupted. Each start is fresh: etcd data does not survive it.

With --shards N it also starts N single-member entity shards and adds the
class "entity" (tier entity, 15 s TTL) serving the keys under team-a/entity/,
which the arbiter routes to them by the shard map: bin/lockctl run
team-a/entity/42 -- ... (a key lives on one tier: its class comes from its
prefix; naming another class is refused WRONG_CLASS).

When ClickHouse is installed, it also starts one on loopback under --dir,
fresh each start, and runs the audit tailers into it: operators read the
history with bin/lockctl audit. When MinIO is built too, it starts one and
archives the history there daily (docs/audit.md), its credentials in
--dir/minio/credentials. make audit-deps installs ClickHouse and builds
MinIO. --no-audit leaves both out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output: %q is not text or json", output)
			}
			if shards < 0 || shards > 16 {
				return fmt.Errorf("--shards: %d must be between 0 and 16", shards)
			}
			return runDev(dir, listen, metrics, output == "json", shards, !noAudit)
		},
	}
	c.PersistentFlags().StringVar(&dir, "dir", filepath.Dir(profile.DevPath), "state directory")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "arbiter gRPC address")
	c.Flags().StringVar(&metrics, "metrics-listen", "127.0.0.1:0", "arbiter /metrics address")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json (one JSON line once serving)")
	c.Flags().IntVar(&shards, "shards", 0, "also start this many entity shards and the class \"entity\" routed to them")
	c.Flags().BoolVar(&noAudit, "no-audit", false, "do not start ClickHouse, MinIO, the audit tailers and the archive, even when they are installed")
	c.AddCommand(devOTPCmd(&dir))
	return c
}

func runDev(dir, listen, metrics string, asJSON bool, shards int, withAudit bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	release, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer release()

	say := func(format string, a ...any) {
		if !asJSON {
			fmt.Printf(format+"\n", a...)
		}
	}
	etcdLog, err := fileLogger(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer etcdLog.Sync()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("lockplane dev: starting a 3-member etcd 3.6 cluster (logs: %s)", filepath.Join(dir, "etcd.log"))
	start := time.Now()
	// The dev environment is for trying the service: any of its workloads
	// may lock any key, which the arbiter logs.
	opts := devenv.Options{Dir: dir, Listen: listen, MetricsListen: metrics, Logger: logger, EtcdLogger: etcdLog, AllowAnyWorkload: true}
	for i := range shards {
		opts.Shards = append(opts.Shards, fmt.Sprintf("entity-%d", i))
	}
	if shards > 0 {
		opts.Classes = class.NewStatic(class.Class{Name: "entity", TTL: class.Default.TTL, Tier: class.TierEntity, Prefixes: []string{devEntityPrefix}})
		say("lockplane dev: and %d entity shard(s) %s, serving class entity's keys (%s...)", shards, strings.Join(opts.Shards, ", "), devEntityPrefix)
	}
	auditURL, archiveURL := "", ""
	if !withAudit {
		say("lockplane dev: audit: off (--no-audit)")
	} else if srv, store, reader, off := startAuditStore(ctx, filepath.Join(dir, "clickhouse")); srv == nil {
		say("lockplane dev: audit: off (%s)", off)
	} else {
		defer srv.Stop() // after env.Close: the tailers stop first
		opts.Audit, opts.AuditReader, auditURL = store, reader, srv.URL()
		say("lockplane dev: audit: on (ClickHouse at %s, database %s, in %s)", srv.URL(), devAuditDatabase, srv.Dir())
		if msrv, arch, off := startArchive(ctx, filepath.Join(dir, "minio"), reader, logger); msrv == nil {
			say("lockplane dev: archive: off (%s)", off)
		} else {
			defer msrv.Stop()
			opts.Archive, archiveURL = arch, "http://"+msrv.Endpoint()
			say("lockplane dev: archive: on (MinIO at %s, user %s, buckets %s and %s, in %s)", archiveURL, devArchiveUser,
				devHistoryBucket, devRecordsBucket, msrv.Dir())
		}
	}
	idp, operators, err := startOperators(filepath.Join(dir, "operators"))
	if err != nil {
		return fmt.Errorf("the operators' OpenID provider: %w", err)
	}
	defer idp.Close() // after env.Close
	opts.Operators = operators
	env, err := devenv.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer env.Close()
	if asJSON {
		out := map[string]any{"arbiter": env.Addr, "metrics": env.Profile.Metrics, "profile": env.ProfilePath,
			"etcd": env.Cluster.Endpoints(), "trust_domain": devenv.TrustDomain, "pid": os.Getpid(), "audit": auditURL, "archive": archiveURL,
			"oidc_issuer": idp.Issuer(), "oidc_ca": filepath.Join(dir, "operators", "ca.pem")}
		if shards > 0 {
			byName := map[string][]string{}
			for name, c := range env.ShardClusters {
				byName[name] = c.Endpoints()
			}
			out["entity_shards"] = byName
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	} else {
		say("lockplane dev: ready in %s", time.Since(start).Round(time.Millisecond))
		say("  etcd      %s", strings.Join(env.Cluster.Endpoints(), " "))
		for _, name := range opts.Shards {
			say("  %-9s %s", name, strings.Join(env.ShardClusters[name].Endpoints(), " "))
		}
		say("  arbiter   %s  (%s, mTLS)", env.Addr, env.Profile.ServerID)
		say("  metrics   %s", env.Profile.Metrics)
		say("  profile   %s  (identities: %s; default %s)", env.ProfilePath, strings.Join(env.Profile.Names(), ", "), env.Profile.DefaultIdentity)
		say("  operators %s  (alice, bob: lock-operator; carol: none; in %s)", idp.Issuer(), filepath.Join(dir, "operators", "users.json"))
		say("            sign in for force-release: bin/lockctl login --issuer %s --ca %s", idp.Issuer(), filepath.Join(dir, "operators", "ca.pem"))
		say("            (password in users.json, one-time code: bin/lockplane dev otp alice)")
		say("")
		say("Try it in another shell:")
		say("  bin/lockctl status")
		say("  bin/lockctl run team-a/orders/42 -- sh -c 'echo \"token $LOCKPLANE_TOKEN\"; sleep 2'")
		say("  bin/lockctl acquire team-a/orders/42 --wait 10s")
		say("  bin/lockctl inspect team-a/orders/42")
		say("")
		say("Serving until interrupted (Ctrl-C).")
	}
	<-ctx.Done()
	say("lockplane dev: stopping")
	return nil
}

// auditDepsHint names the one make target that gets both of audit's
// dependencies, whichever is missing.
const auditDepsHint = "run make audit-deps (installs ClickHouse, builds MinIO)"

// devAuditDatabase is the embedded default's ClickHouse database.
const devAuditDatabase = "lockplane"

// startAuditStore starts a fresh ClickHouse under dir, as etcd's data is
// fresh each start, and migrates its audit database: the store as its
// writer user (tailers) and as its reader (queries). Audit is an addition
// to the embedded default, never a condition of it: without ClickHouse, or
// when it does not start, the server is nil and off says why.
func startAuditStore(ctx context.Context, dir string) (_ *chserver.Server, writer, reader *chstore.Store, off string) {
	if !chserver.Installed() {
		return nil, nil, nil, "ClickHouse is not installed; " + auditDepsHint
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, nil, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv, err := chserver.Start(ctx, dir)
	if err != nil {
		return nil, nil, nil, "ClickHouse did not start: " + err.Error()
	}
	store := chstore.New(srv.URL(), devAuditDatabase, chstore.WithCredentials(srv.Writer()))
	if err := store.Migrate(ctx); err != nil {
		srv.Stop()
		return nil, nil, nil, "the audit store's migration failed: " + err.Error()
	}
	return srv, store, chstore.New(srv.URL(), devAuditDatabase, chstore.WithCredentials(srv.Reader())), ""
}

// The embedded default's archive: its MinIO user and buckets. The
// password is made at each start and written beside the data (0600), for
// a developer who wants to look with an S3 client.
const (
	devArchiveUser   = "lockplane"
	devHistoryBucket = "lockplane-history"
	devRecordsBucket = "lockplane-records"
)

// startArchive starts a fresh MinIO (bin/minio, beside this binary) under
// dir and the archive on it, reading the store as reader. Like audit, it is
// an addition: without bin/minio, or when it does not start, the server is
// nil and off says why. Records are kept under governance retention, so a
// developer's data directory can be removed.
func startArchive(ctx context.Context, dir string, reader *chstore.Store, log *slog.Logger) (_ *minioserver.Server, _ *archive.Archive, off string) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err.Error()
	}
	bin := filepath.Join(filepath.Dir(self), "minio")
	if _, err := os.Stat(bin); err != nil {
		return nil, nil, "MinIO is not built; " + auditDepsHint
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err.Error()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err.Error()
	}
	password := rand.Text()
	if err := os.WriteFile(filepath.Join(dir, "credentials"), []byte("archive "+devArchiveUser+":"+password+"\n"), 0o600); err != nil {
		return nil, nil, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv, err := minioserver.Start(ctx, minioserver.Config{Bin: bin, Dir: dir, User: devArchiveUser, Password: password})
	if err != nil {
		return nil, nil, "MinIO did not start: " + err.Error()
	}
	cli, err := minio.New(srv.Endpoint(), &minio.Options{Creds: credentials.NewStaticV4(devArchiveUser, password, "")})
	if err == nil {
		var arch *archive.Archive
		arch, err = archive.New(archive.Config{Store: reader, Client: cli, HistoryBucket: devHistoryBucket, RecordsBucket: devRecordsBucket,
			RecordsMode: minio.Governance, ManageBuckets: true, Logger: log}) // its own MinIO, as root
		if err == nil {
			return srv, arch, ""
		}
	}
	srv.Stop()
	return nil, nil, err.Error()
}

// lockDir makes a second `lockplane dev` on the same directory say so
// instead of failing on a port or a data directory.
func lockDir(dir string) (func(), error) {
	path := filepath.Join(dir, "dev.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		pid := strings.TrimSpace(string(b))
		where := ""
		if p, err := profile.Load(filepath.Join(dir, "profile.json")); err == nil {
			where = " with the arbiter at " + p.Endpoint
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("the embedded default is already running (pid %s)%s; use it, or stop it with Ctrl-C in its terminal (or kill %s) first", pid, where, pid)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	return func() { f.Truncate(0); f.Close() }, nil
}

func fileLogger(path string) (*zap.Logger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(f), zapcore.WarnLevel)), nil
}

// devEntityPrefix is the dev entity class's keys: with shards, the keys
// under it live on the entity shards, every other key on coord.
const devEntityPrefix = "team-a/entity/"
