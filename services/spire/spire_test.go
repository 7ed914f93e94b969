package spire_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/policy"
	"github.com/lockplane/lockplane/services/spire"
	"github.com/lockplane/lockplane/services/spire/spiretest"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
)

const td = "sync.lockplane.test"

func TestEntriesComeFromGrantsThatNameAWorkload(t *testing.T) {
	grants := []policy.Grant{
		{Name: "ledger", SPIFFEID: "spiffe://" + td + "/ns/pay/sa/ledger", Workload: &policy.Workload{Selectors: []string{"unix:user:ledger", "unix:group:pay"}}},
		{Name: "reader", SPIFFEID: "spiffe://" + td + "/ns/pay/sa/reader"}, // registered elsewhere
	}
	agents := []string{spire.AgentID(td, "app-1"), spire.AgentID(td, "app-2")}
	es, err := spire.FromGrants(grants, agents, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 {
		t.Fatalf("want one entry per agent for the grant with a workload, got %v", es)
	}
	for i, e := range es {
		if e.ParentID != agents[i] || e.SPIFFEID != grants[0].SPIFFEID || strings.Join(e.Selectors, ",") != "unix:group:pay,unix:user:ledger" || e.X509SVIDTTL != time.Hour {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
	for _, c := range []struct {
		id, parent string
		sel        []string
		ttl        time.Duration
		want       string
	}{
		{"spiffe://other.test/w", agents[0], []string{"unix:uid:1"}, time.Hour, "is not in the trust domain of its agent"},
		{"spiffe://" + td + "/w", agents[0], nil, time.Hour, "at least one selector"},
		{"spiffe://" + td + "/w", agents[0], []string{"uid"}, time.Hour, `selector "uid" must be type:value`},
		{"spiffe://" + td + "/w", agents[0], []string{"unix:uid:1"}, 0, "the SVID TTL 0s must be between"},
		{"not-an-id", agents[0], []string{"unix:uid:1"}, time.Hour, `spiffe ID "not-an-id"`},
	} {
		if _, err := spire.NewEntry(c.id, c.parent, c.sel, c.ttl); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewEntry(%s, %v, %s): want an error containing %q, got %v", c.id, c.sel, c.ttl, c.want, err)
		}
	}
}

func TestConfigsRefuseMissingFieldsByName(t *testing.T) {
	_, err := spire.ServerConfig{TrustDomain: td, BindPort: 8081, CATTL: time.Hour, SVIDTTL: time.Minute}.Render()
	if err == nil || !strings.Contains(err.Error(), "required: bind address, data dir, node CA, socket path") {
		t.Fatalf("want the missing fields named, got %v", err)
	}
	_, err = spire.ServerConfig{TrustDomain: td, BindAddress: "127.0.0.1", BindPort: 8081, SocketPath: "/s", DataDir: "/d", NodeCA: "/ca",
		CATTL: time.Hour, SVIDTTL: time.Hour}.Render()
	if err == nil || !strings.Contains(err.Error(), "the CA TTL (1h0m0s) must be at least six times the SVID TTL") {
		t.Fatalf("want the TTL rule, got %v", err)
	}
	conf, err := spire.ServerConfig{TrustDomain: td, BindAddress: "127.0.0.1", BindPort: 8081, SocketPath: "/s", DataDir: `/d"x\y`, NodeCA: "/ca",
		CATTL: 24 * time.Hour, SVIDTTL: time.Hour, Postgres: "postgres://spire@db/spire"}.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data_dir = "/d\"x\\y"`, `database_type = "postgres"`, `connection_string = "postgres://spire@db/spire"`,
		`agent_path_template = "` + spire.AgentPathTemplate + `"`} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("the server's configuration lacks %s:\n%s", want, conf)
		}
	}
	_, err = spire.AgentConfig{TrustDomain: td, ServerAddress: "127.0.0.1", ServerPort: 8081, SocketPath: "/a", DataDir: "/d${x}",
		TrustBundle: "/b", NodeCert: "/c", NodeKey: "/k"}.Render()
	if err == nil || !strings.Contains(err.Error(), "data dir") {
		t.Fatalf("want a template sequence refused, got %v", err)
	}
}

// TestSyncMakesTheAgentsEntriesExactlyTheDeclaredOnes runs against a
// real spire-server.
func TestSyncMakesTheAgentsEntriesExactlyTheDeclaredOnes(t *testing.T) {
	sp := spiretest.StartSPIRE(t, td)
	conn, err := spire.Dial(sp.ServerSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := entryv1.NewEntryClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An operator's entry under another parent: never touched.
	other := spire.AgentID(td, "not-ours")
	if _, err := api.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{{
		SpiffeId: &types.SPIFFEID{TrustDomain: td, Path: "/operator/thing"}, ParentId: &types.SPIFFEID{TrustDomain: td, Path: "/spire/agent/x509pop/not-ours"},
		Selectors: []*types.Selector{{Type: "unix", Value: "uid:7"}}}}}); err != nil {
		t.Fatal(err)
	}
	entry := func(name string, ttl time.Duration, sel ...string) spire.Entry {
		e, err := spire.NewEntry("spiffe://"+td+"/ns/t/sa/"+name, sp.AgentID, sel, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	parents := []string{sp.AgentID}
	a, b := entry("a", time.Hour, "unix:uid:1"), entry("b", time.Hour, "unix:uid:2", "unix:gid:2")
	steps := []struct {
		name                      string
		want                      []spire.Entry
		created, updated, deleted int
		unchanged                 int
	}{
		{"first sync", []spire.Entry{a, b}, 2, 0, 0, 0},
		{"again: nothing to do", []spire.Entry{a, b}, 0, 0, 0, 2},
		{"a TTL changed", []spire.Entry{a, entry("b", 30*time.Minute, "unix:uid:2", "unix:gid:2")}, 0, 1, 0, 1},
		{"a selector changed: a new entry, the old one deleted", []spire.Entry{entry("a", time.Hour, "unix:uid:9"), entry("b", 30*time.Minute, "unix:uid:2", "unix:gid:2")}, 1, 0, 1, 1},
		{"a grant removed", []spire.Entry{entry("b", 30*time.Minute, "unix:uid:2", "unix:gid:2")}, 0, 0, 1, 1},
	}
	for _, st := range steps {
		rep, err := spire.Sync(ctx, api, parents, st.want)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if len(rep.Created) != st.created || len(rep.Updated) != st.updated || len(rep.Deleted) != st.deleted || rep.Unchanged != st.unchanged {
			t.Fatalf("%s: created %d, updated %d, deleted %d, unchanged %d; want %d, %d, %d, %d", st.name,
				len(rep.Created), len(rep.Updated), len(rep.Deleted), rep.Unchanged, st.created, st.updated, st.deleted, st.unchanged)
		}
	}
	resp, err := api.ListEntries(ctx, &entryv1.ListEntriesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range resp.Entries {
		ids = append(ids, e.SpiffeId.Path+" ttl "+time.Duration(time.Duration(e.X509SvidTtl)*time.Second).String())
	}
	if got := strings.Join(ids, "; "); !strings.Contains(got, "/operator/thing") || !strings.Contains(got, "/ns/t/sa/b ttl 30m0s") || len(ids) != 2 {
		t.Fatalf("the server holds %s; want the operator's entry and b's, with b's new TTL", got)
	}
	if _, err := spire.Sync(ctx, api, parents, []spire.Entry{{SPIFFEID: "spiffe://" + td + "/x", ParentID: other, Selectors: []string{"unix:uid:1"}, X509SVIDTTL: time.Hour}}); err == nil ||
		!strings.Contains(err.Error(), "its parent is not one of the agents this sync manages") {
		t.Fatalf("an entry under an agent the sync does not manage: want refused, got %v", err)
	}
}
