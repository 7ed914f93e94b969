package spire

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// CallTimeout bounds each call to the SPIRE server's API.
const CallTimeout = 15 * time.Second

// batch is how many entries one Batch call carries.
const batch = 50

// Dial connects to a SPIRE server's API on its admin socket (the
// server's socket_path): a local unix socket, authenticated by being on
// the server's host.
func Dial(socket string) (*grpc.ClientConn, error) {
	abs, err := filepath.Abs(strings.TrimPrefix(socket, "unix://"))
	if err != nil {
		return nil, err
	}
	return grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Report is what a sync changed.
type Report struct {
	Created   []Entry `json:"created"`
	Updated   []Entry `json:"updated"`
	Deleted   []Entry `json:"deleted"`
	Unchanged int     `json:"unchanged"`
}

// Sync makes the entries parented to the agents in parents exactly want:
// it creates the missing ones, updates a changed one in place (its TTL,
// or any field Lockplane never sets, such as admin or downstream, reset),
// and deletes the ones want does not hold. Entries under other parents
// are not touched, so a sync never removes what an operator registered
// for hosts Lockplane did not provision. Every entry of want must have its
// parent in parents.
func Sync(ctx context.Context, api entryv1.EntryClient, parents []string, want []Entry) (Report, error) {
	c, err := plan(ctx, api, parents, want)
	if err != nil {
		return Report{}, err
	}
	return c.apply(ctx, api)
}

// Drift is what Sync would change, without changing it: empty when the
// server holds exactly want under parents.
func Drift(ctx context.Context, api entryv1.EntryClient, parents []string, want []Entry) (Report, error) {
	c, err := plan(ctx, api, parents, want)
	if err != nil {
		return Report{}, err
	}
	return c.report(), nil
}

// Changed reports whether the report holds a change.
func (r Report) Changed() bool { return len(r.Created)+len(r.Updated)+len(r.Deleted) > 0 }

// changes are a sync's plan.
type changes struct {
	create    []Entry
	update    []*types.Entry // the entry as it must be, by ID
	updated   []Entry
	stale     []*types.Entry
	unchanged int
}

func (c *changes) report() Report {
	r := Report{Created: c.create, Updated: c.updated, Unchanged: c.unchanged}
	for _, te := range c.stale {
		r.Deleted = append(r.Deleted, fromAPI(te))
	}
	return r
}

func plan(ctx context.Context, api entryv1.EntryClient, parents []string, want []Entry) (*changes, error) {
	managed := map[string]bool{}
	for _, p := range parents {
		managed[p] = true
	}
	wanted := map[string]Entry{}
	for _, e := range want {
		if !managed[e.ParentID] {
			return nil, fmt.Errorf("entry %s: its parent is not one of the agents this sync manages", e)
		}
		if _, dup := wanted[e.key()]; dup {
			return nil, fmt.Errorf("entry %s is declared twice", e)
		}
		wanted[e.key()] = e
	}
	c := &changes{}
	have := map[string]*types.Entry{}
	for _, p := range parents {
		entries, err := list(ctx, api, p)
		if err != nil {
			return nil, err
		}
		for _, te := range entries {
			k := fromAPI(te).key()
			if _, ok := wanted[k]; !ok || have[k] != nil {
				c.stale = append(c.stale, te) // undeclared, or a duplicate of one kept
				continue
			}
			have[k] = te
		}
	}
	for _, k := range sortedKeys(wanted) {
		e := wanted[k]
		te, ok := have[k]
		switch {
		case !ok:
			c.create = append(c.create, e)
		case !conforms(te, e):
			up := toAPI(e)
			up.Id = te.Id
			c.update = append(c.update, up)
			c.updated = append(c.updated, e)
		default:
			c.unchanged++
		}
	}
	return c, nil
}

// conforms reports whether te is e: its TTL, and every field Lockplane
// never sets at its zero value (an entry made admin or downstream out of
// band could manage entries or mint a CA).
func conforms(te *types.Entry, e Entry) bool {
	return time.Duration(te.X509SvidTtl)*time.Second == e.X509SVIDTTL && !te.Admin && !te.Downstream && te.ExpiresAt == 0 &&
		len(te.DnsNames) == 0 && len(te.FederatesWith) == 0 && !te.StoreSvid && te.Hint == "" && te.JwtSvidTtl == 0
}

// fullMask updates every field conforms checks.
var fullMask = &types.EntryMask{X509SvidTtl: true, Admin: true, Downstream: true, ExpiresAt: true, DnsNames: true,
	FederatesWith: true, StoreSvid: true, Hint: true, JwtSvidTtl: true}

// apply makes the plan's changes: creates and updates before deletes, so
// an identity that moves between selectors has its new entry before its
// old one goes.
func (c *changes) apply(ctx context.Context, api entryv1.EntryClient) (Report, error) {
	var rep Report
	rep.Unchanged = c.unchanged
	for chunk := range slices.Chunk(c.create, batch) {
		var req entryv1.BatchCreateEntryRequest
		for _, e := range chunk {
			req.Entries = append(req.Entries, toAPI(e))
		}
		resp, err := call(ctx, func(ctx context.Context) (*entryv1.BatchCreateEntryResponse, error) {
			return api.BatchCreateEntry(ctx, &req)
		})
		if err == nil && len(resp.Results) != len(chunk) {
			err = fmt.Errorf("%d results for %d entries", len(resp.Results), len(chunk))
		}
		if err != nil {
			return rep, fmt.Errorf("spire: create entries: %w", err)
		}
		for i, r := range resp.Results {
			if err := result(r.Status); err != nil {
				return rep, fmt.Errorf("spire: create entry %s: %w", chunk[i], err)
			}
			rep.Created = append(rep.Created, chunk[i])
		}
	}
	for i := 0; i < len(c.update); i += batch {
		chunk, named := c.update[i:min(i+batch, len(c.update))], c.updated[i:min(i+batch, len(c.update))]
		req := entryv1.BatchUpdateEntryRequest{Entries: chunk, InputMask: fullMask}
		resp, err := call(ctx, func(ctx context.Context) (*entryv1.BatchUpdateEntryResponse, error) {
			return api.BatchUpdateEntry(ctx, &req)
		})
		if err == nil && len(resp.Results) != len(chunk) {
			err = fmt.Errorf("%d results for %d entries", len(resp.Results), len(chunk))
		}
		if err != nil {
			return rep, fmt.Errorf("spire: update entries: %w", err)
		}
		for j, r := range resp.Results {
			if err := result(r.Status); err != nil {
				return rep, fmt.Errorf("spire: update entry %s: %w", named[j], err)
			}
			rep.Updated = append(rep.Updated, named[j])
		}
	}
	for chunk := range slices.Chunk(c.stale, batch) {
		req := entryv1.BatchDeleteEntryRequest{}
		for _, te := range chunk {
			req.Ids = append(req.Ids, te.Id)
		}
		resp, err := call(ctx, func(ctx context.Context) (*entryv1.BatchDeleteEntryResponse, error) {
			return api.BatchDeleteEntry(ctx, &req)
		})
		if err == nil && len(resp.Results) != len(chunk) {
			err = fmt.Errorf("%d results for %d entries", len(resp.Results), len(chunk))
		}
		if err != nil {
			return rep, fmt.Errorf("spire: delete entries: %w", err)
		}
		for i, r := range resp.Results {
			if err := result(r.Status); err != nil && status(r.Status) != codes.NotFound {
				return rep, fmt.Errorf("spire: delete entry %s: %w", fromAPI(chunk[i]), err)
			}
			rep.Deleted = append(rep.Deleted, fromAPI(chunk[i]))
		}
	}
	return rep, nil
}

// list is every entry parented to parent, page by page.
func list(ctx context.Context, api entryv1.EntryClient, parent string) ([]*types.Entry, error) {
	pid, err := spiffeid.FromString(parent)
	if err != nil {
		return nil, fmt.Errorf("parent ID %q: %w", parent, err)
	}
	req := entryv1.ListEntriesRequest{PageSize: 500, Filter: &entryv1.ListEntriesRequest_Filter{
		ByParentId: &types.SPIFFEID{TrustDomain: pid.TrustDomain().Name(), Path: pid.Path()}}}
	var out []*types.Entry
	for {
		resp, err := call(ctx, func(ctx context.Context) (*entryv1.ListEntriesResponse, error) { return api.ListEntries(ctx, &req) })
		if err != nil {
			return nil, fmt.Errorf("spire: list the entries of %s: %w", parent, err)
		}
		out = append(out, resp.Entries...)
		if resp.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// call runs one API call under its own deadline.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	return f(ctx)
}

func status(s *types.Status) codes.Code {
	if s == nil {
		return codes.Unknown
	}
	return codes.Code(s.Code)
}

func result(s *types.Status) error {
	if c := status(s); c != codes.OK {
		msg := "no status"
		if s != nil {
			msg = s.Message
		}
		return errors.New(c.String() + ": " + msg)
	}
	return nil
}

func toAPI(e Entry) *types.Entry {
	te := &types.Entry{SpiffeId: apiID(e.SPIFFEID), ParentId: apiID(e.ParentID), X509SvidTtl: int32(e.X509SVIDTTL / time.Second)}
	for _, s := range e.Selectors {
		typ, value, _ := strings.Cut(s, ":")
		te.Selectors = append(te.Selectors, &types.Selector{Type: typ, Value: value})
	}
	return te
}

func fromAPI(te *types.Entry) Entry {
	e := Entry{SPIFFEID: idString(te.SpiffeId), ParentID: idString(te.ParentId), X509SVIDTTL: time.Duration(te.X509SvidTtl) * time.Second}
	for _, s := range te.Selectors {
		e.Selectors = append(e.Selectors, s.Type+":"+s.Value)
	}
	slices.Sort(e.Selectors)
	return e
}

func apiID(id string) *types.SPIFFEID {
	sid := spiffeid.RequireFromString(id) // checked by NewEntry
	return &types.SPIFFEID{TrustDomain: sid.TrustDomain().Name(), Path: sid.Path()}
}

func idString(id *types.SPIFFEID) string {
	if id == nil {
		return ""
	}
	return "spiffe://" + id.TrustDomain + id.Path
}

func sortedKeys(m map[string]Entry) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
