package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/identity"
	"github.com/lockplane/lockplane/services/lockclient"
	"github.com/lockplane/lockplane/services/profile"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// globals are the connection and output flags every command shares.
type globals struct {
	output      string
	profilePath string
	identity    string
	endpoint    string
	serverID    string
	trustDomain string
	tlsCert     string
	tlsKey      string
	tlsBundle   string
	spiffeSock  string
	timeout     time.Duration
}

func (g *globals) register(c *cobra.Command) {
	f := c.PersistentFlags()
	f.StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&g.profilePath, "profile", "", "profile file (default: $LOCKPLANE_PROFILE, else .lockplane/dev/profile.json here or above)")
	f.StringVar(&g.identity, "identity", "", "identity in the profile to call as (default: the profile's default)")
	f.StringVar(&g.endpoint, "endpoint", "", "arbiter address host:port (instead of a profile)")
	f.StringVar(&g.serverID, "server-id", "", "the arbiter's SPIFFE ID, required with --endpoint")
	f.StringVar(&g.trustDomain, "trust-domain", "", "trust domain of --tls-* files")
	f.StringVar(&g.tlsCert, "tls-cert", "", "SVID certificate (PEM) to call as")
	f.StringVar(&g.tlsKey, "tls-key", "", "SVID private key (PEM)")
	f.StringVar(&g.tlsBundle, "tls-bundle", "", "trust bundle (PEM)")
	f.StringVar(&g.spiffeSock, "spiffe-socket", "", "SPIRE Workload API socket, e.g. unix:///run/spire/agent.sock (instead of --tls-*)")
	f.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on each call to the arbiter")
}

func (g *globals) json() bool { return g.output == "json" }

func (g *globals) check() error {
	if g.output != "text" && g.output != "json" {
		return fmt.Errorf("--output: %q is not text or json", g.output)
	}
	return nil
}

// dial connects as the chosen identity, from flags or a profile.
func (g *globals) dial(ctx context.Context) (*lockclient.Client, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	if g.endpoint != "" {
		if g.serverID == "" {
			return nil, fmt.Errorf("--server-id: required with --endpoint (the arbiter's SPIFFE ID)")
		}
		var src identity.Source
		var err error
		switch {
		case g.spiffeSock != "":
			src, err = identity.FromWorkloadAPI(ctx, g.spiffeSock)
		case g.tlsCert != "" && g.tlsKey != "" && g.tlsBundle != "" && g.trustDomain != "":
			src, err = identity.FromFiles(identity.Files{Cert: g.tlsCert, Key: g.tlsKey, Bundle: g.tlsBundle, TrustDomain: g.trustDomain})
		default:
			return nil, fmt.Errorf("--endpoint needs an identity: --spiffe-socket, or all of --tls-cert, --tls-key, --tls-bundle and --trust-domain")
		}
		if err != nil {
			return nil, err
		}
		return lockclient.Dial(lockclient.Config{Target: g.endpoint, Identity: src, ServerID: g.serverID})
	}
	path := g.profilePath
	if path == "" {
		var err error
		if path, err = profile.Find(); err != nil {
			return nil, err
		}
	}
	p, err := profile.Load(path)
	if err != nil {
		return nil, err
	}
	return lockclient.DialProfile(p, g.identity)
}

// call runs fn with a connected client, bounded by --timeout.
func (g *globals) call(fn func(ctx context.Context, c *lockclient.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	return g.with(ctx, fn)
}

// until runs fn with a connected client until SIGINT or SIGTERM.
func (g *globals) until(fn func(ctx context.Context, c *lockclient.Client) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return g.with(ctx, fn)
}

func (g *globals) with(ctx context.Context, fn func(ctx context.Context, c *lockclient.Client) error) error {
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return fn(ctx, c)
}

func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func printProto(m proto.Message) {
	b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	fmt.Println(string(b))
}

func ago(t time.Time) string {
	return time.Since(t).Round(time.Second).String()
}
