// Command lockplane-snapshot is the snapshot job of one etcd cluster
// (dr/snapshot.Job). It runs on every member host of the cluster; the
// instances elect one on the cluster itself, which snapshots its member on
// a schedule into the region's snapshot store (docs/dr.md). It signs in as etcd's
// snapshot user, whose root role a snapshot needs, so it belongs on the
// cluster's own hosts, never on an arbiter's.
//
// With --once it takes one snapshot now, stores it and exits: what an
// operator runs on a member host before a risky change.
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/dr/snapshot"
	"github.com/lockplane/lockplane/dr/snapstore"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/s3client"
	"github.com/lockplane/lockplane/services/internal/tlsfiles"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockplane-snapshot:", err)
		os.Exit(1)
	}
}

// flags are the command line.
type flags struct {
	region, cluster, endpoint, name, dir         string
	etcdCA, etcdCert, etcdKey, etcdCredentials   string
	etcdWithoutAuth                              bool
	storeURL, storeCA, storeCredentials, metrics string
	signingKey                                   string
	every                                        time.Duration
	once                                         bool
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("lockplane-snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.region, "region", "", "the region: the snapshot store bucket is lockplane-snapshots-REGION")
	fs.StringVar(&f.cluster, "cluster", "", "the cluster snapshotted: coord, or the entity shard's name")
	fs.StringVar(&f.endpoint, "endpoint", "", "this host's member's client URL, e.g. https://10.0.0.5:2379: the member snapshotted")
	fs.StringVar(&f.name, "name", host, "this instance's name in the election (this host)")
	fs.StringVar(&f.dir, "dir", "/var/lib/lockplane/snapshots", "where the snapshot file is kept while it is stored")
	fs.StringVar(&f.etcdCA, "etcd-ca", "", "CA bundle that signed etcd's serving certificates (PEM)")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate for etcd (PEM)")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "client key for etcd (PEM)")
	fs.StringVar(&f.etcdCredentials, "etcd-credentials", "", "etcd's snapshot user: "+credfile.Rule("snapshot"))
	fs.BoolVar(&f.etcdWithoutAuth, "etcd-without-auth", false, "the cluster has etcd authentication off (trials and tests only)")
	fs.StringVar(&f.storeURL, "store", "", "the snapshot store's MinIO (S3) base URL, e.g. https://snapshots:9000")
	fs.StringVar(&f.storeCA, "store-ca", "", "CA bundle that signed the snapshot store's serving certificate (PEM), for an https --store")
	fs.StringVar(&f.storeCredentials, "store-credentials", "", "the snapshot store user that puts this region's snapshots: "+credfile.Rule("vault")+" (the access key, then the secret key)")
	fs.StringVar(&f.signingKey, "signing-key", "", "the cluster's snapshot signing key (PEM, PKCS #8 Ed25519, mode 0600): every manifest is signed with it, and a restore trusts no other")
	fs.DurationVar(&f.every, "every", time.Hour, "the schedule: a snapshot every this long (1m to 168h)")
	fs.StringVar(&f.metrics, "metrics", "", "address to serve Prometheus metrics on, e.g. 10.0.0.5:9470 (off when empty)")
	fs.BoolVar(&f.once, "once", false, "take one snapshot now, store it and exit")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case snapstore.CheckName("--region", f.region) != nil:
		return f, snapstore.CheckName("--region", f.region)
	case snapstore.CheckName("--cluster", f.cluster) != nil:
		return f, snapstore.CheckName("--cluster", f.cluster)
	case f.endpoint == "":
		return f, errors.New("--endpoint: this host's member's client URL is required")
	case f.storeURL == "":
		return f, errors.New("--store: the snapshot store's base URL is required")
	case f.storeCredentials == "":
		return f, errors.New("--store-credentials: required: " + credfile.Rule("vault"))
	case f.signingKey == "":
		return f, errors.New("--signing-key: the cluster's snapshot signing key file is required: a restore trusts only signed snapshots")
	case f.etcdCredentials != "" && f.etcdWithoutAuth:
		return f, errors.New("--etcd-credentials and --etcd-without-auth: choose one")
	case f.etcdCredentials == "" && !f.etcdWithoutAuth:
		return f, errors.New("--etcd-credentials FILE is required (" + credfile.Rule("snapshot") + "), or --etcd-without-auth for a cluster with authentication off")
	case f.every < time.Minute || f.every > 168*time.Hour:
		return f, fmt.Errorf("--every: %s must be between 1m and 168h", f.every)
	case f.name == "":
		return f, errors.New("--name: this instance's name is required (the host name could not be read)")
	}
	u, err := url.Parse(f.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return f, fmt.Errorf("--endpoint: want a client URL such as https://10.0.0.5:2379, got %q", f.endpoint)
	}
	// The snapshot user has etcd's root role: its password never crosses
	// a network in clear, and TLS flags are never quietly dropped.
	loopback := false
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		loopback = ip.IsLoopback()
	}
	switch {
	case u.Scheme == "http" && (f.etcdCA != "" || f.etcdCert != "" || f.etcdKey != ""):
		return f, errors.New("--endpoint: an http URL would drop --etcd-ca, --etcd-cert and --etcd-key; use https")
	case u.Scheme == "http" && f.etcdCredentials != "" && !loopback:
		return f, errors.New("--endpoint: an http URL would send the snapshot user's password in clear; use https (http only on loopback)")
	case u.Scheme == "https" && f.etcdCA == "":
		return f, errors.New("--etcd-ca: required with an https --endpoint: the CA that signed the member's certificate")
	case f.dir == "":
		return f, errors.New("--dir: a directory for the snapshot file is required")
	}
	return f, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parse(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	etcdTLS, err := tlsfiles.Files{CA: f.etcdCA, CAFlag: "--etcd-ca", Cert: f.etcdCert, Key: f.etcdKey, CertFlag: "--etcd-cert", KeyFlag: "--etcd-key"}.Client()
	if err != nil {
		return err
	}
	cfg := clientv3.Config{Endpoints: []string{f.endpoint}, TLS: etcdTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if f.etcdCredentials != "" {
		c, err := credfile.Read("--etcd-credentials", f.etcdCredentials, "snapshot")
		if err != nil {
			return err
		}
		cfg.Username, cfg.Password = c["snapshot"].User, c["snapshot"].Password
		if cfg.Username == etcdauth.RootUser {
			return fmt.Errorf("--etcd-credentials: %s: the snapshot line names root; it must name the %s user, whose only use is snapshots (docs/etcd-roles.md)", f.etcdCredentials, etcdauth.Snapshotter)
		}
	}
	v, err := openStore(f)
	if err != nil {
		return err
	}
	m := newMetrics(f.cluster, f.every)
	job := snapshot.Job{Source: snapshot.Source{Region: f.region, Cluster: f.cluster, Config: cfg}, Store: v,
		Name: f.name, Every: f.every, Dir: f.dir, Logger: log, Taken: m.Taken, Recorded: m.Recorded}
	if f.once {
		got, err := job.Once(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stored %s (%s/%s, revision %d, %d bytes) in %s\n", got.Object, got.Region, got.Cluster, got.Revision, got.Size, snapstore.Bucket(f.region))
		return nil
	}
	if f.metrics != "" {
		if err := m.serve(ctx, f.metrics, log); err != nil {
			return err
		}
	}
	etcd, err := etcdauth.New(cfg)
	if err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	defer etcd.Close()
	job.Etcd = etcd
	log.Info("snapshot job started", "region", f.region, "cluster", f.cluster, "every", f.every.String(), "name", f.name)
	return job.Run(ctx)
}

// openStore is the region's snapshot store at --store as --store-credentials' user.
func openStore(f flags) (snapstore.Store, error) {
	c, err := credfile.Read("--store-credentials", f.storeCredentials, "vault")
	if err != nil {
		return snapstore.Store{}, err
	}
	cli, err := s3client.Endpoint{URL: f.storeURL, URLFlag: "--store", CA: f.storeCA, CAFlag: "--store-ca", User: c["vault"]}.Client()
	if err != nil {
		return snapstore.Store{}, err
	}
	key, err := readSigningKey(f.signingKey)
	if err != nil {
		return snapstore.Store{}, err
	}
	return snapstore.Store{Client: cli, Region: f.region, Signer: key}, nil
}

// readSigningKey reads the key at path, refusing one others may read:
// whoever reads it can sign snapshots a restore would trust.
func readSigningKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("--signing-key: %s is mode %04o: it must be readable by its owner only (0600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	key, err := snapshot.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %s: %w", path, err)
	}
	return key, nil
}

// metrics are the job's series (snapshot.Metrics) and their registry.
type metrics struct {
	reg *prometheus.Registry
	*snapshot.Metrics
}

func newMetrics(cluster string, every time.Duration) *metrics {
	reg := prometheus.NewRegistry()
	return &metrics{reg: reg, Metrics: snapshot.NewMetrics(reg, cluster, every)}
}

// serve serves the metrics until ctx ends.
func (m *metrics) serve(ctx context.Context, addr string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics: %w", err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}),
		ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", addr, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	return nil
}
