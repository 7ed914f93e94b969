package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	// idToken is the operator's cached ID token file (force.go).
	idToken string
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
	f.StringVar(&g.idToken, "id-token-file", "", "the signed-in operator's ID token cache, as lockctl login writes it, for force-release and epoch advance (default: $"+idTokenEnv+", else the user cache directory's lockplane/operator-token.json)")
}

func (g *globals) json() bool { return g.output == "json" }

func (g *globals) check() error {
	if g.output != "text" && g.output != "json" {
		return fmt.Errorf("--output: %q is not text or json", g.output)
	}
	return nil
}

// target is the arbiter address a command calls and where it came from.
type target struct{ endpoint, from string }

// dial connects as the chosen identity, from flags or a profile, and
// says where the arbiter's address came from.
func (g *globals) dial(ctx context.Context) (*lockclient.Client, target, error) {
	if err := g.check(); err != nil {
		return nil, target{}, err
	}
	if g.endpoint != "" {
		c, err := g.dialEndpoint(ctx)
		return c, target{g.endpoint, "--endpoint"}, err
	}
	path := g.profilePath
	if path == "" {
		var err error
		if path, err = profile.Find(); err != nil {
			return nil, target{}, err
		}
	}
	p, err := profile.Load(path)
	if err != nil {
		return nil, target{}, err
	}
	c, err := lockclient.DialProfile(p, g.identity)
	return c, target{p.Endpoint, "profile " + path}, err
}

func (g *globals) dialEndpoint(ctx context.Context) (*lockclient.Client, error) {
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
	c, t, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return notListening(fn(ctx, c), t)
}

// notListening turns a refused connection into what to do about it: which
// address, from where, and what starts an arbiter there.
func notListening(err error, t target) error {
	if status.Code(err) != codes.Unavailable || reason.Of(err) != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED ||
		!strings.Contains(err.Error(), "connection refused") {
		return err
	}
	hint := "start the embedded default with `make dev` (or `bin/lockplane dev`), or pass --profile for a deployment"
	if t.from == "--endpoint" {
		hint = "check the arbiter is running there"
	}
	return fmt.Errorf("no arbiter is listening at %s (from %s): %s", t.endpoint, t.from, hint)
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
