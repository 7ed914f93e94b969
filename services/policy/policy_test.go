package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/policy"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestShippedSetIsValid(t *testing.T) {
	set, err := policy.Load(filepath.Join("..", "..", "policies"), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Classes) != 3 || len(set.Grants) != 3 {
		t.Fatalf("%d classes, %d grants", len(set.Classes), len(set.Grants))
	}
	ledger := set.Classes["payments-ledger"]
	if ledger.TTL != 10*time.Second || ledger.Tier != "entity" || ledger.Spec.Fairness != "durable" {
		t.Fatalf("payments-ledger: %+v", ledger)
	}
	if set.Classes["payments-settlement-leader"].WaiverExpires.Format("2006-01-02") != "2027-03-31" {
		t.Fatal("waiver date not read")
	}
	if set.Regions["payments"] != "eu-west" || set.Regions["search"] != "us-east" {
		t.Fatalf("namespace homes: %v", set.Regions)
	}
	if o := set.Owners["payments"]; o.Team != "payments-sre" || len(set.Owners) != 1 {
		t.Fatalf("owners: %v", set.Owners)
	}
	if u := set.Unowned(); !slices.Equal(u, []string{"search"}) {
		t.Fatalf("unowned namespaces: %v, want [search]", u)
	}
	if q := set.Quotas()["spiffe://prod.example/ns/search/sa/indexer"]; q != (policy.Quota{Sessions: 32, Holds: 512}) {
		t.Fatalf("the indexer's quota: %+v", q)
	}
	r := set.Registry()
	if c, err := r.Lookup("search-reindex"); err != nil || c.TTL != time.Minute {
		t.Fatalf("registry: %+v %v", c, err)
	}
	if c, err := r.Lookup(""); err != nil || c.Name != "default" {
		t.Fatalf("the default class: %+v %v", c, err)
	}
}

const base = `apiVersion: lockplane.io/v1
kind: LockClass
metadata:
  name: c1
spec:
  namespace: team-a
  purpose: correctness
  enforcement: fenced
  ttl: 15s
  tier: coord
  pauseTestResult: r1
---
apiVersion: lockplane.io/v1alpha1
kind: PauseTestResult
metadata:
  name: r1
spec:
  class: c1
status:
  outcome: Passed
  expires: "2027-06-01T00:00:00Z"
`

// Each broken document fails with the file, the document, the field and
// the rule named.
func TestBrokenDocumentsAreRefusedByFieldAndRule(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"ttl below range", strings.Replace(base, "ttl: 15s", "ttl: 2s", 1), "classes.yaml: document 1 (LockClass c1): spec.ttl: 2s is outside the platform range 5s to 5m0s"},
		{"ttl above range", strings.Replace(base, "ttl: 15s", "ttl: 10m", 1), "spec.ttl: 10m0s is outside the platform range"},
		{"advisory below floor", `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: c2}
spec: {namespace: team-a, purpose: efficiency, enforcement: advisory, ttl: 20s, tier: coord}
`, "document 1 (LockClass c2): spec.ttl: 20s is below the advisory floor of 30s"},
		{"advisory correctness without owner", `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: c3}
spec: {namespace: team-a, purpose: correctness, enforcement: advisory, ttl: 30s, tier: coord, waiverExpires: "2027-01-01"}
`, "spec.riskOwner: is required of an advisory correctness class"},
		{"advisory correctness without waiver", `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: c4}
spec: {namespace: team-a, purpose: correctness, enforcement: advisory, ttl: 30s, tier: coord, riskOwner: someone}
`, "spec.waiverExpires: is required of an advisory correctness class"},
		{"fenced without result", strings.Replace(base, "  pauseTestResult: r1\n", "", 1), "spec.pauseTestResult: is required of a fenced class"},
		{"fenced with a missing result", strings.Replace(base, "pauseTestResult: r1", "pauseTestResult: r9", 1), `spec.pauseTestResult: "r9" names no PauseTestResult document`},
		{"fenced with a failed result", strings.Replace(base, "outcome: Passed", "outcome: Failed", 1), `spec.pauseTestResult: "r1" did not pass (outcome Failed)`},
		{"fenced with an expired result", strings.Replace(base, "2027-06-01", "2026-06-01", 1), `spec.pauseTestResult: "r1" expired on 2026-06-01`},
		{"fenced with another class's result", strings.Replace(base, "  class: c1", "  class: other", 1), `"r1" tested class "other", not this one`},
		{"open on quorum loss for correctness", strings.Replace(base, "tier: coord", "tier: coord\n  onQuorumLoss: open", 1), "spec.onQuorumLoss: open is allowed only for efficiency classes"},
		{"unknown tier", strings.Replace(base, "tier: coord", "tier: gold", 1), `spec.tier: "gold" must be one of coord, entity`},
		{"unknown field", strings.Replace(base, "tier: coord", "tier: coord\n  ttlSeconds: 9", 1), `unknown field "ttlSeconds"`},
		{"wrong apiVersion", strings.Replace(base, "apiVersion: lockplane.io/v1\n", "apiVersion: lockplane.io/v2\n", 1), `apiVersion: must be lockplane.io/v1, not "lockplane.io/v2"`},
		{"duplicate class", base + "---\n" + strings.SplitN(base, "---", 2)[0], "metadata.name: is also the name of a LockClass"},
		{"grant with a bad SPIFFE ID", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g1}
spec: {spiffeId: "team-a-writer", prefixes: [team-a/orders/]}
`, `spec.spiffeId: "team-a-writer" must be a SPIFFE ID`},
		{"grant prefix not at a segment", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g2}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/ord]}
`, `spec.prefixes[0]: "team-a/ord" must end with '/'`},
		{"grant without prefixes", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g3}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w"}
`, "spec.prefixes: at least one key prefix is required"},
		{"unknown kind", "apiVersion: lockplane.io/v1\nkind: LockPolicy\nmetadata: {name: p}\n", `kind: "LockPolicy" is not LockClass, LockGrant, LockNamespace or PauseTestResult`},
		{"quota of zero holds", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g4}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], quota: {sessions: 4, holds: 0}}
`, "document 1 (LockGrant g4): spec.quota.holds: 0 must be at least 1"},
		{"two quotas for one identity", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g5}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], quota: {sessions: 4, holds: 8}}
---
apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g6}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-b/], quota: {sessions: 2, holds: 2}}
`, "document 2 (LockGrant g6): spec.quota: grant g5 already sets the quota of spiffe://x.example/ns/a/sa/w"},
		{"workload without selectors", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g7}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], workload: {selectors: []}}
`, "document 1 (LockGrant g7): spec.workload.selectors: at least one selector is required"},
		{"workload selector without a type", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g8}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], workload: {selectors: ["unix:user:w", "ledger"]}}
`, `spec.workload.selectors[1]: "ledger" must be a SPIRE selector type:value`},
		{"workload selector type not a plugin name", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g9}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], workload: {selectors: ["Unix User:w"]}}
`, `spec.workload.selectors[0]: "Unix User:w": the selector type "Unix User" must be a plugin name`},
		{"a workload registered as the arbiter", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g12}
spec: {spiffeId: "spiffe://x.example/lockplane/arbiter", prefixes: [team-a/], workload: {selectors: ["unix:user:w"]}}
`, "spec.workload: spiffe://x.example/lockplane/arbiter is under /lockplane/, reserved"},
		{"a workload registered as an operator", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g13}
spec: {spiffeId: "spiffe://x.example/operator/alice", prefixes: [team-a/], workload: {selectors: ["unix:user:w"]}}
`, "spec.workload: spiffe://x.example/operator/alice is under /operator/, reserved"},
		{"a workload matched by root alone", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g14}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], workload: {selectors: ["unix:uid:0", "unix:supplementary_group:root"]}}
`, "spec.workload.selectors: [unix:uid:0 unix:supplementary_group:root] match every root process on the workload hosts"},
		{"two workloads for one identity", `apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g10}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-a/], workload: {selectors: ["unix:user:w"]}}
---
apiVersion: lockplane.io/v1
kind: LockGrant
metadata: {name: g11}
spec: {spiffeId: "spiffe://x.example/ns/a/sa/w", prefixes: [team-b/], workload: {selectors: ["unix:user:x"]}}
`, "document 2 (LockGrant g11): spec.workload: grant g10 already registers spiffe://x.example/ns/a/sa/w"},
		{"namespace with neither region nor owner", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {region: ""}
`, `document 1 (LockNamespace team-a): spec: names neither region nor owner`},
		{"namespace with a bad region", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {region: "EU West"}
`, `document 1 (LockNamespace team-a): spec.region: "EU West" must be a region name`},
		{"owner with a bad team", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: "Payments SRE", webhook: "https://hooks.example/a"}}
`, `document 1 (LockNamespace team-a): spec.owner.team: "Payments SRE" must be a team name`},
		{"owner with a webhook that is no URL", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: payments, webhook: "hooks.example/a"}}
`, `document 1 (LockNamespace team-a): spec.owner.webhook: "hooks.example/a" must be an http or https URL with a host`},
		{"an owner named outside the namespace's folder", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: squatters, webhook: "https://hooks.example/a"}}
`, `document 1 (LockNamespace team-a): spec.owner: a LockNamespace that names an owner must be in the namespace's own folder (team-a/...)`},
		{"a webhook with a password", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: payments, webhook: "https://bot:secret@hooks.example/a"}}
`, `document 1 (LockNamespace team-a): spec.owner.webhook: must not carry a user or password`},
		{"a webhook on the monitoring host itself", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: payments, webhook: "http://127.0.0.1:9093/api/v2/silences"}}
`, `document 1 (LockNamespace team-a): spec.owner.webhook: 127.0.0.1 is a loopback, link-local or unspecified address`},
		{"a webhook to cloud metadata", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: payments, webhook: "http://169.254.169.254/latest"}}
`, `document 1 (LockNamespace team-a): spec.owner.webhook: 169.254.169.254 is a loopback, link-local or unspecified address`},
		{"one team, two webhooks", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {owner: {team: payments, webhook: "https://hooks.example/a"}}
---
apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-b}
spec: {owner: {team: payments, webhook: "https://hooks.example/b"}}
`, `document 2 (LockNamespace team-b): spec.owner.webhook: team payments already posts to another webhook`},
		{"namespace homed twice", `apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {region: eu-west}
---
apiVersion: lockplane.io/v1
kind: LockNamespace
metadata: {name: team-a}
spec: {region: us-east}
`, "metadata.name: namespace team-a is also homed in"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "policies")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "classes.yaml"), []byte(c.yaml), 0o644)
			set, err := policy.Load(dir, now)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing\n  %s\ngot\n  %v", c.want, err)
			}
			if set != nil {
				t.Fatal("an invalid set was returned: nothing of it may be used")
			}
		})
	}
	// The base itself is valid: each case fails for its own change.
	dir := filepath.Join(t.TempDir(), "policies")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "classes.yaml"), []byte(base), 0o644)
	if _, err := policy.Load(dir, now); err != nil {
		t.Fatalf("the base set: %v", err)
	}
}

func TestGrantsAreLongestPrefixOverWholeSegments(t *testing.T) {
	g := policy.Compile([]policy.Grant{
		{Name: "orders", SPIFFEID: "spiffe://x.example/w", Prefixes: []string{"team-a/orders/"}},
		{Name: "orders-close", SPIFFEID: "spiffe://x.example/w", Prefixes: []string{"team-a/orders/close/"}},
		{Name: "all-b", SPIFFEID: "spiffe://x.example/b", Prefixes: []string{"team-b"}},
	})
	for _, c := range []struct{ id, key, want string }{
		{"spiffe://x.example/w", "team-a/orders/42", "orders"},
		{"spiffe://x.example/w", "team-a/orders/close/7", "orders-close"},
		{"spiffe://x.example/w", "team-a/orders", ""},     // the prefix itself is not below it
		{"spiffe://x.example/w", "team-a/ordersX/1", ""},  // segments, not bytes
		{"spiffe://x.example/w", "team-a/invoices/1", ""}, // another prefix
		{"spiffe://x.example/b", "team-b/anything/at/all", "all-b"},
		{"spiffe://x.example/b", "team-a/orders/42", ""}, // another identity's prefix
		{"spiffe://x.example/nobody", "team-b/x", ""},
	} {
		if got := g.Match(c.id, c.key); got != c.want {
			t.Errorf("%s on %s: matched %q, want %q", c.id, c.key, got, c.want)
		}
	}
	if !g.MayLock(spiffeid.RequireFromString("spiffe://x.example/b"), "team-b/k") {
		t.Fatal("MayLock disagrees with Match")
	}
}

// One key must not be reachable through two classes of two tiers: it
// would be granted on two clusters at once. The refusal names both
// documents and their lines.
func TestAKeyReachableThroughTwoTiersIsRefused(t *testing.T) {
	const entityClass = `apiVersion: lockplane.io/v1
kind: LockClass
metadata: {name: %s}
spec:
  namespace: team-a
  purpose: efficiency
  enforcement: advisory
  ttl: 30s
  tier: %s
  prefixes: [%s]
`
	cases := []struct {
		name, ledger, settle, want string
	}{
		{"one prefix, two classes", fmt.Sprintf(entityClass, "ledger", "entity", "team-a/ledger/"), fmt.Sprintf(entityClass, "settle", "coord", "team-a/ledger/"),
			"b.yaml: line 10, document 1 (LockClass settle): spec.prefixes[0]: team-a/ledger/ is also served by class ledger (policies/a.yaml, line 10)"},
		{"an entity class without prefixes", strings.Replace(fmt.Sprintf(entityClass, "ledger", "entity", ""), "  prefixes: []\n", "", 1), fmt.Sprintf(entityClass, "settle", "coord", "team-a/settle/"),
			"a.yaml: line 9, document 1 (LockClass ledger): spec.prefixes: a class on tier entity must name the key prefixes it serves"},
		{"a prefix outside the namespace", fmt.Sprintf(entityClass, "ledger", "entity", "team-b/ledger/"), fmt.Sprintf(entityClass, "settle", "coord", "team-a/settle/"),
			"spec.prefixes[0]: team-b/ledger/ is outside the class's namespace team-a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "policies")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(c.ledger), 0o644)
			os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(c.settle), 0o644)
			_, err := policy.Load(dir, now)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
	// Nested prefixes of two tiers are fine: the longest decides, so each
	// key still has one class.
	dir := filepath.Join(t.TempDir(), "policies")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(fmt.Sprintf(entityClass, "ledger", "entity", "team-a/ledger/")), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(fmt.Sprintf(entityClass, "close", "coord", "team-a/ledger/close/")), 0o644)
	set, err := policy.Load(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	r := set.Registry()
	for key, want := range map[string]string{"team-a/ledger/1": "ledger", "team-a/ledger/close/1": "close"} {
		if c, err := r.ForKey(key, ""); err != nil || c.Name != want {
			t.Fatalf("%s: class %s (%v), want %s", key, c.Name, err, want)
		}
	}
	if _, err := r.ForKey("team-a/ledger/close/1", "ledger"); err == nil || !strings.Contains(err.Error(), "served by class close") {
		t.Fatalf("the ledger class for a close key: %v, want it refused naming class close", err)
	}
}
