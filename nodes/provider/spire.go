package provider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/lockplane/lockplane/services/spire"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"golang.org/x/crypto/ssh"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// SpireEntriesInputs are the registration entries of a region's SPIRE
// agents, kept on its server through the server's admin socket, which
// listens on the server's host only and is reached over SSH. Every entry
// under Parents that Entries does not list is deleted (spire.Sync);
// entries under other agents are an operator's and stay.
type SpireEntriesInputs struct {
	Connection remote.Target `json:"connection"`
	// Socket is the server's admin socket on its host.
	Socket  string       `json:"socket"`
	Parents []string     `json:"parents"`
	Entries []SpireEntry `json:"entries"`
}

// SpireEntry is one registration entry (spire.Entry).
type SpireEntry struct {
	SPIFFEID  string   `json:"spiffeId"`
	ParentID  string   `json:"parentId"`
	Selectors []string `json:"selectors"`
	// TTL is the X.509 SVIDs' lifetime in seconds.
	TTL int `json:"x509SvidTtl"`
}

// spireReady is how long a server just (re)started has to answer.
const spireReady = 2 * time.Minute

func (in *SpireEntriesInputs) entries() ([]spire.Entry, error) {
	managed := map[string]bool{}
	for i, p := range in.Parents {
		if _, err := spiffeid.FromString(p); err != nil {
			return nil, fmt.Errorf("parents[%d]: %q: %w", i, p, err)
		}
		managed[p] = true
	}
	var out []spire.Entry
	for i, e := range in.Entries {
		se, err := spire.NewEntry(e.SPIFFEID, e.ParentID, e.Selectors, time.Duration(e.TTL)*time.Second)
		if err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		if !managed[se.ParentID] {
			return nil, fmt.Errorf("entries[%d]: parent %s is not one of parents", i, se.ParentID)
		}
		out = append(out, se)
	}
	return out, nil
}

// api runs f with the server's entry API, once the server answers.
func (in *SpireEntriesInputs) api(ctx context.Context, env *Env, ready time.Duration, f func(entryv1.EntryClient) error) error {
	c, err := env.Pool.Dial(ctx, in.Connection)
	if err != nil {
		return err
	}
	// Probe once, so that a missing socket or an sshd refusing to forward
	// it says so at once instead of as a timeout.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	probe, probeErr := c.DialUnix(pctx, in.Socket)
	cancel()
	if probeErr == nil {
		probe.Close()
	} else if oc := (*ssh.OpenChannelError)(nil); ready == 0 || errors.As(probeErr, &oc) && oc.Reason == ssh.Prohibited {
		return probeErr // nothing to wait for, or sshd refuses to forward it
	}
	conn, err := grpc.NewClient("passthrough:///spire-server", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return c.DialUnix(ctx, in.Socket) }),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 10 * time.Second}))
	if err != nil {
		return err
	}
	defer conn.Close()
	api := entryv1.NewEntryClient(conn)
	// A server just (re)started may take a while to open its socket.
	rctx, cancel := context.WithTimeout(ctx, max(ready, spire.CallTimeout))
	defer cancel()
	if _, err := api.CountEntries(rctx, &entryv1.CountEntriesRequest{}, grpc.WaitForReady(true)); err != nil {
		if probeErr != nil {
			err = fmt.Errorf("%w; its socket first: %v", err, probeErr)
		}
		return fmt.Errorf("%s: the SPIRE server at %s did not answer: %w", in.Connection.Host, in.Socket, err)
	}
	return f(api)
}

// sync makes the server's entries under in.Parents want.
func (in *SpireEntriesInputs) sync(ctx context.Context, env *Env, want []spire.Entry) (rep spire.Report, err error) {
	err = in.api(ctx, env, spireReady, func(api entryv1.EntryClient) error {
		rep, err = spire.Sync(ctx, api, in.Parents, want)
		return err
	})
	if err != nil {
		return rep, fmt.Errorf("%s: %w", in.Connection.Host, err)
	}
	return rep, nil
}

func spireOutputs(rep spire.Report, n int) map[string]any {
	return map[string]any{"entryCount": n, "created": len(rep.Created), "updated": len(rep.Updated), "deleted": len(rep.Deleted)}
}

func init() {
	register("SpireEntries", spec[SpireEntriesInputs]{
		Validate: func(in *SpireEntriesInputs) error {
			if err := in.Connection.Validate(); err != nil {
				return err
			}
			if err := validatePath("socket", in.Socket); err != nil {
				return err
			}
			if len(in.Parents) == 0 {
				return fmt.Errorf("parents: at least one agent is required")
			}
			_, err := in.entries()
			return err
		},
		Create: func(ctx context.Context, env *Env, in *SpireEntriesInputs) (string, map[string]any, error) {
			want, err := in.entries()
			if err != nil {
				return "", nil, err
			}
			rep, err := in.sync(ctx, env, want)
			if err != nil {
				return "", nil, err
			}
			return in.Connection.Host + ":" + in.Socket, spireOutputs(rep, len(want)), nil
		},
		// Read reports the entries gone when the server's differ from the
		// declared ones (edited out of band, or a datastore lost), so a
		// refresh followed by up makes them again. An unreachable server
		// changes nothing known.
		Read: func(ctx context.Context, env *Env, _ string, in *SpireEntriesInputs, st map[string]any) (map[string]any, error) {
			want, err := in.entries()
			if err != nil {
				return st, nil
			}
			var drift spire.Report
			if err := in.api(ctx, env, 0, func(api entryv1.EntryClient) error {
				drift, err = spire.Drift(ctx, api, in.Parents, want)
				return err
			}); err != nil {
				return st, nil
			}
			if drift.Changed() {
				return nil, nil
			}
			return st, nil
		},
		Update: func(ctx context.Context, env *Env, _ string, olds, news *SpireEntriesInputs, _ map[string]any) (map[string]any, error) {
			want, err := news.entries()
			if err != nil {
				return nil, err
			}
			// Agents no longer listed lose their entries too.
			parents := append([]string{}, news.Parents...)
			for _, p := range olds.Parents {
				if !contains(parents, p) {
					parents = append(parents, p)
				}
			}
			in := *news
			in.Parents = parents
			rep, err := in.sync(ctx, env, want)
			if err != nil {
				return nil, err
			}
			return spireOutputs(rep, len(want)), nil
		},
		Delete: func(ctx context.Context, env *Env, _ string, in *SpireEntriesInputs, _ map[string]any) error {
			if _, err := in.sync(ctx, env, nil); err != nil {
				return fmt.Errorf("%w (a server that is gone for good took its entries with it: `pulumi state delete` this resource)", err)
			}
			return nil
		},
		// Nothing replaces: a new connection or socket is the same server's
		// entries, synced through it, never deleted first.
		Replaces: []string{},
	})
}
