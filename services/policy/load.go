package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/pausetest/pauseresult"
	"sigs.k8s.io/yaml"
)

// Problem is one broken rule, located.
type Problem struct {
	File  string `json:"file"`
	Doc   int    `json:"document"` // 1-based within the file
	Kind  string `json:"kind,omitempty"`
	Name  string `json:"name,omitempty"`
	Field string `json:"field"`
	Rule  string `json:"rule"`
	// Line is the field's line in the file, when known.
	Line int `json:"line,omitempty"`
}

func (p Problem) String() string {
	what := fmt.Sprintf("document %d", p.Doc)
	if p.Line > 0 {
		what = fmt.Sprintf("line %d, document %d", p.Line, p.Doc)
	}
	if p.Kind != "" {
		what += " (" + strings.TrimSpace(p.Kind+" "+p.Name) + ")"
	}
	return fmt.Sprintf("%s: %s: %s: %s", p.File, what, p.Field, p.Rule)
}

// Invalid is a set with problems; nothing of it may be used.
type Invalid struct{ Problems []Problem }

func (e *Invalid) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("%d problem(s) in the policy set:\n  %s", len(e.Problems), strings.Join(lines, "\n  "))
}

// Class is a validated class with its parsed settings.
type Class struct {
	class.Class
	Spec ClassSpec
	// WaiverExpires is set for advisory correctness classes.
	WaiverExpires time.Time
	File          string
}

// Grant is a validated grant.
type Grant struct {
	Name     string
	SPIFFEID string
	Prefixes []string
	// Quota is set when this grant sets the identity's quota.
	Quota *Quota
	// Workload is set when this grant registers the identity with SPIRE.
	Workload *Workload
	File     string
}

// Set is a valid policy set.
type Set struct {
	Classes map[string]Class
	Grants  []Grant
	// Regions homes namespaces to regions; a namespace not listed is
	// served by every region's arbiters.
	Regions map[string]string
	// Owners are the namespaces' owners, by namespace; a namespace not
	// listed routes its alerts to the platform's receiver.
	Owners map[string]Owner
	// Files is how many files were read.
	Files int
}

// doc is one YAML document of a file, with its place.
type doc struct {
	file string
	n    int
	// line is the document's first line in its file.
	line int
	raw  []byte
	head struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Metadata   Metadata `json:"metadata"`
	}
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// inFolder reports whether file (the set's directory name, then the path
// below it) lies in a folder named name: the set's own directory (a
// team's CI checking its folder alone) or one below it.
func inFolder(file, name string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(filepath.Dir(file)), "/"), name)
}

// checkOwner checks a namespace's owner: a team name and a webhook
// Alertmanager can post to.
func checkOwner(o Owner) *fieldErr {
	if !nameRule.MatchString(o.Team) {
		return &fieldErr{"spec.owner.team", fmt.Sprintf("%q must be a team name: a DNS label such as payments-sre", o.Team)}
	}
	if o.Team == "platform" {
		return &fieldErr{"spec.owner.team", `"platform" is the platform's own receiver: name the namespace's team`}
	}
	u, err := url.Parse(o.Webhook)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &fieldErr{"spec.owner.webhook", fmt.Sprintf("%q must be an http or https URL with a host", o.Webhook)}
	}
	if u.User != nil {
		return &fieldErr{"spec.owner.webhook", "must not carry a user or password: the policy set is readable by every team and every arbiter"}
	}
	// Alertmanager posts from inside the region: not to itself, its host or
	// a cloud metadata service.
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && (ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()) {
		return &fieldErr{"spec.owner.webhook", fmt.Sprintf("%s is a loopback, link-local or unspecified address: name the team's receiver", u.Hostname())}
	}
	if u.Hostname() == "localhost" {
		return &fieldErr{"spec.owner.webhook", "localhost is the monitoring host itself: name the team's receiver"}
	}
	return nil
}

// Load reads every .yaml and .yml file under dir and validates the set as
// of now. It returns *Invalid listing every problem, or the set.
func Load(dir string, now time.Time) (*Set, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Hidden directories hold copies, not documents: a Kubernetes
		// ConfigMap volume keeps its files in ..<timestamp>/.
		if d.IsDir() && p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("policy: no .yaml files under %s", dir)
	}
	sort.Strings(files)
	var docs []*doc
	var problems []Problem
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		rel, _ := filepath.Rel(dir, f)
		line := 1
		for i, part := range docSep.Split(string(b), -1) {
			first := line
			line += strings.Count(part, "\n") // the next part starts on the separator's line
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			d := &doc{file: filepath.Join(filepath.Base(dir), rel), n: i + 1, line: first, raw: []byte(part)}
			if err := yaml.Unmarshal(d.raw, &d.head); err != nil {
				problems = append(problems, Problem{File: d.file, Doc: d.n, Field: "(document)", Rule: "is not valid YAML: " + err.Error()})
				continue
			}
			docs = append(docs, d)
		}
	}
	set, more := validate(docs, now)
	problems = append(problems, more...)
	if len(problems) > 0 {
		return nil, &Invalid{Problems: problems}
	}
	set.Files = len(files)
	return set, nil
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// strict decodes a document, refusing fields the kind does not have.
func strict(raw []byte, into any) error {
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

var (
	nameRule      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	namespaceRule = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)
)

func validate(docs []*doc, now time.Time) (*Set, []Problem) {
	set := &Set{Classes: map[string]Class{}, Regions: map[string]string{}, Owners: map[string]Owner{}}
	teamHooks := map[string]string{}  // a team's webhook, and the file that set it
	quotaBy := map[string]string{}    // SPIFFE ID -> grant that sets its quota
	workloadBy := map[string]string{} // SPIFFE ID -> grant that registers it
	nsFiles := map[string]string{}
	var problems []Problem
	results := map[string]pauseresult.Result{}
	var classes []*doc
	classDocs := map[string]*doc{}
	grantNames := map[string]string{}
	for _, d := range docs {
		bad := func(field, rule string, a ...any) {
			problems = append(problems, Problem{File: d.file, Doc: d.n, Kind: d.head.Kind, Name: d.head.Metadata.Name, Field: field, Rule: fmt.Sprintf(rule, a...)})
		}
		want := APIVersion
		if d.head.Kind == KindPauseTest {
			want = pauseresult.APIVersion // as the kit writes it
		}
		if d.head.APIVersion != want {
			bad("apiVersion", "must be %s, not %q", want, d.head.APIVersion)
			continue
		}
		if !nameRule.MatchString(d.head.Metadata.Name) {
			bad("metadata.name", "%q must be a DNS label: lower-case letters, digits and '-'", d.head.Metadata.Name)
			continue
		}
		switch d.head.Kind {
		case KindClass:
			classes = append(classes, d)
		case KindGrant:
			var g LockGrant
			if err := strict(d.raw, &g); err != nil {
				bad("(document)", "does not have the LockGrant shape: %v", err)
				continue
			}
			if prev, dup := grantNames[g.Metadata.Name]; dup {
				bad("metadata.name", "is also the name of a LockGrant in %s", prev)
				continue
			}
			grantNames[g.Metadata.Name] = d.file
			if err := checkSPIFFE(g.Spec.SPIFFEID); err != nil {
				bad("spec.spiffeId", "%v", err)
			}
			if len(g.Spec.Prefixes) == 0 {
				bad("spec.prefixes", "at least one key prefix is required")
			}
			for i, p := range g.Spec.Prefixes {
				if err := checkPrefix(p); err != nil {
					bad(fmt.Sprintf("spec.prefixes[%d]", i), "%v", err)
				}
			}
			if q := g.Spec.Quota; q != nil {
				if prev, dup := quotaBy[g.Spec.SPIFFEID]; dup {
					bad("spec.quota", "grant %s already sets the quota of %s: one quota per identity", prev, g.Spec.SPIFFEID)
				}
				quotaBy[g.Spec.SPIFFEID] = g.Metadata.Name
				if q.Sessions < 1 {
					bad("spec.quota.sessions", "%d must be at least 1", q.Sessions)
				}
				if q.Holds < 1 {
					bad("spec.quota.holds", "%d must be at least 1", q.Holds)
				}
			}
			if w := g.Spec.Workload; w != nil {
				if err := CheckWorkloadID(g.Spec.SPIFFEID); err != nil {
					bad("spec.workload", "%v", err)
				}
				if prev, dup := workloadBy[g.Spec.SPIFFEID]; dup {
					bad("spec.workload", "grant %s already registers %s: one workload per identity", prev, g.Spec.SPIFFEID)
				}
				workloadBy[g.Spec.SPIFFEID] = g.Metadata.Name
				if len(w.Selectors) == 0 {
					bad("spec.workload.selectors", "at least one selector is required: an entry without one would match no workload")
				}
				if rootOnly(w.Selectors) && !w.AllowRoot {
					bad("spec.workload.selectors", "%v match every root process on the workload hosts: add unix:path or unix:sha256 of the workload's binary, or set allowRoot: true", w.Selectors)
				}
				seen := map[string]bool{}
				for i, sel := range w.Selectors {
					if err := checkSelector(sel); err != nil {
						bad(fmt.Sprintf("spec.workload.selectors[%d]", i), "%v", err)
					} else if seen[sel] {
						bad(fmt.Sprintf("spec.workload.selectors[%d]", i), "%q is listed twice", sel)
					}
					seen[sel] = true
				}
			}
			set.Grants = append(set.Grants, Grant{Name: g.Metadata.Name, SPIFFEID: g.Spec.SPIFFEID, Prefixes: g.Spec.Prefixes, Quota: g.Spec.Quota,
				Workload: g.Spec.Workload, File: d.file})
		case KindNamespace:
			var n LockNamespace
			if err := strict(d.raw, &n); err != nil {
				bad("(document)", "does not have the LockNamespace shape: %v", err)
				continue
			}
			if prev, dup := nsFiles[n.Metadata.Name]; dup {
				bad("metadata.name", "namespace %s is also homed in %s: a namespace has one home", n.Metadata.Name, prev)
				continue
			}
			nsFiles[n.Metadata.Name] = d.file
			if n.Spec.Region == "" && n.Spec.Owner == nil {
				bad("spec", "names neither region nor owner: a LockNamespace homes a namespace, names its owner, or both")
				continue
			}
			if n.Spec.Region != "" && !nameRule.MatchString(n.Spec.Region) {
				bad("spec.region", "%q must be a region name: a DNS label such as eu-west", n.Spec.Region)
				continue
			}
			if o := n.Spec.Owner; o != nil {
				if err := checkOwner(*o); err != nil {
					bad(err.field, "%s", err.rule)
					continue
				}
				if prev, ok := teamHooks[o.Team]; ok && prev != o.Webhook {
					bad("spec.owner.webhook", "team %s already posts to another webhook: a team has one", o.Team)
					continue
				}
				teamHooks[o.Team] = o.Webhook
				// Who is told of a namespace is the namespace's own say:
				// its document lives in its folder, which its team owns
				// (CODEOWNERS), so another team cannot claim its alerts.
				if !inFolder(d.file, n.Metadata.Name) {
					bad("spec.owner", "a LockNamespace that names an owner must be in the namespace's own folder (%s/...), which its team owns", n.Metadata.Name)
					continue
				}
				set.Owners[n.Metadata.Name] = *o
			}
			if n.Spec.Region != "" {
				set.Regions[n.Metadata.Name] = n.Spec.Region
			}
		case KindPauseTest:
			var r pauseresult.Result
			if err := yaml.Unmarshal(d.raw, &r); err != nil {
				bad("(document)", "does not have the PauseTestResult shape: %v", err)
				continue
			}
			results[r.Metadata.Name] = r
		default:
			bad("kind", "%q is not LockClass, LockGrant, LockNamespace or PauseTestResult", d.head.Kind)
		}
	}
	for _, d := range classes {
		bad := func(field, rule string, a ...any) {
			problems = append(problems, Problem{File: d.file, Doc: d.n, Kind: d.head.Kind, Name: d.head.Metadata.Name, Field: field, Rule: fmt.Sprintf(rule, a...)})
		}
		var c LockClass
		if err := strict(d.raw, &c); err != nil {
			bad("(document)", "does not have the LockClass shape: %v", err)
			continue
		}
		if prev, dup := set.Classes[c.Metadata.Name]; dup {
			bad("metadata.name", "is also the name of a LockClass in %s: class names are unique", prev.File)
			continue
		}
		out, errs := checkClass(c, results, now)
		for _, e := range errs {
			bad(e.field, "%s", e.rule)
		}
		if len(errs) == 0 {
			out.File = d.file
			set.Classes[c.Metadata.Name] = out
			classDocs[c.Metadata.Name] = d
		}
	}
	problems = append(problems, checkTiers(set, classDocs)...)
	return set, problems
}

// checkTiers refuses a set in which one key could be reached through two
// classes, which could put it on two clusters at once: a prefix two
// classes declare (naming both), or a class on another tier than the
// default's without prefixes, whose keys would then be every key no prefix
// covers.
func checkTiers(set *Set, docs map[string]*doc) []Problem {
	var problems []Problem
	def := set.Registry()[class.DefaultName]
	declared := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(set.Classes)) {
		c, d := set.Classes[name], docs[name]
		at := func(field, needle, rule string, a ...any) {
			problems = append(problems, Problem{File: d.file, Doc: d.n, Kind: KindClass, Name: name, Field: field,
				Rule: fmt.Sprintf(rule, a...), Line: d.lineOf(needle)})
		}
		if len(c.Prefixes) == 0 && c.Tier != def.Tier {
			at("spec.prefixes", "tier:", "a class on tier %s must name the key prefixes it serves: without them it would serve every key no prefix covers, which live on the default class's tier (%s), so one key could be held on both tiers", c.Tier, def.Tier)
		}
		for i, p := range c.Prefixes {
			norm := strings.TrimSuffix(p, "/") + "/"
			if other, dup := declared[norm]; dup {
				o := docs[other]
				at(fmt.Sprintf("spec.prefixes[%d]", i), p, "%s is also served by class %s (%s, line %d): a key belongs to exactly one class", p, other, o.file, o.lineOf(p))
				continue
			}
			declared[norm] = name
		}
	}
	return problems
}

// lineOf is the line in d's file of the first line of d containing needle,
// or d's first line.
func (d *doc) lineOf(needle string) int {
	for i, l := range strings.Split(string(d.raw), "\n") {
		if strings.Contains(l, needle) && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			return d.line + i
		}
	}
	return d.line
}

type fieldErr struct{ field, rule string }

// checkClass applies every class rule (ADR-01, 04, 11, 14, 17).
func checkClass(c LockClass, results map[string]pauseresult.Result, now time.Time) (Class, []fieldErr) {
	s := c.Spec
	var errs []fieldErr
	bad := func(field, rule string, a ...any) { errs = append(errs, fieldErr{field, fmt.Sprintf(rule, a...)}) }
	if !namespaceRule.MatchString(s.Namespace) {
		bad("spec.namespace", "%q must be a key namespace: letters, digits, '.', '_' or '-'", s.Namespace)
	}
	oneOf := func(field, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		bad(field, "%q must be one of %s", v, strings.Join(allowed, ", "))
	}
	oneOf("spec.purpose", s.Purpose, PurposeCorrectness, PurposeEfficiency)
	oneOf("spec.enforcement", s.Enforcement, EnforcementFenced, EnforcementAdvisor)
	oneOf("spec.tier", s.Tier, string(class.TierCoord), string(class.TierEntity))
	if s.Fairness == "" {
		s.Fairness = FairnessMemory
	}
	oneOf("spec.fairness", s.Fairness, FairnessMemory, FairnessDurable)
	if s.OnQuorumLoss == "" {
		s.OnQuorumLoss = QuorumLossClosed
	}
	oneOf("spec.onQuorumLoss", s.OnQuorumLoss, QuorumLossClosed, QuorumLossOpen)
	if s.OnQuorumLoss == QuorumLossOpen && s.Purpose != PurposeEfficiency {
		bad("spec.onQuorumLoss", "open is allowed only for efficiency classes: a correctness class fails closed (ADR-04)")
	}

	ttl := DefaultTTL
	if s.TTL != "" {
		d, err := time.ParseDuration(s.TTL)
		if err != nil {
			bad("spec.ttl", "%q is not a duration such as 15s", s.TTL)
		}
		ttl = d
	}
	switch {
	case ttl < MinTTL || ttl > MaxTTL:
		bad("spec.ttl", "%s is outside the platform range %s to %s (ADR-11)", ttl, MinTTL, MaxTTL)
	case s.Enforcement == EnforcementAdvisor && ttl < AdvisoryFloor:
		bad("spec.ttl", "%s is below the advisory floor of %s: a false expiry on an unfenced resource can let two writers in (ADR-11)", ttl, AdvisoryFloor)
	}

	for i, p := range s.Prefixes {
		if err := checkPrefix(p); err != nil {
			bad(fmt.Sprintf("spec.prefixes[%d]", i), "%v", err)
		} else if lockkey.Namespace(strings.TrimSuffix(p, "/")+"/x") != s.Namespace {
			bad(fmt.Sprintf("spec.prefixes[%d]", i), "%s is outside the class's namespace %s: a class serves its own namespace's keys", p, s.Namespace)
		}
	}
	out := Class{Class: class.Class{Name: c.Metadata.Name, TTL: ttl, Tier: class.Tier(s.Tier), Namespace: s.Namespace, Fairness: class.Fairness(s.Fairness),
		Prefixes: s.Prefixes}}
	if s.Enforcement == EnforcementAdvisor && s.Purpose == PurposeCorrectness {
		if strings.TrimSpace(s.RiskOwner) == "" {
			bad("spec.riskOwner", "is required of an advisory correctness class: who accepts the risk of two writers (ADR-01)")
		}
		if s.WaiverExpires == "" {
			bad("spec.waiverExpires", "is required of an advisory correctness class: the date the waiver ends (ADR-01)")
		} else if t, err := parseDate(s.WaiverExpires); err != nil {
			bad("spec.waiverExpires", "%q must be a date such as 2027-03-31", s.WaiverExpires)
		} else {
			out.WaiverExpires = t
		}
	} else if s.RiskOwner != "" || s.WaiverExpires != "" {
		bad("spec.riskOwner", "riskOwner and waiverExpires belong to advisory correctness classes only")
	}
	if s.Enforcement == EnforcementFenced {
		switch r, ok := results[s.PauseTestResult]; {
		case s.PauseTestResult == "":
			bad("spec.pauseTestResult", "is required of a fenced class: the name of the PauseTestResult that proves the fence (ADR-17)")
		case !ok:
			bad("spec.pauseTestResult", "%q names no PauseTestResult document in the set", s.PauseTestResult)
		case r.Spec.Class != c.Metadata.Name:
			bad("spec.pauseTestResult", "%q tested class %q, not this one", s.PauseTestResult, r.Spec.Class)
		case !r.Passed():
			bad("spec.pauseTestResult", "%q did not pass (outcome %s): the class cannot be declared fenced", s.PauseTestResult, r.Status.Outcome)
		case !r.Status.Expires.After(now):
			bad("spec.pauseTestResult", "%q expired on %s: run the pause test again", s.PauseTestResult, r.Status.Expires.Format("2006-01-02"))
		}
	} else if s.PauseTestResult != "" {
		bad("spec.pauseTestResult", "belongs to fenced classes only")
	}
	s.TTL = ttl.String()
	out.Spec = s
	return out, errs
}

func checkSPIFFE(id string) error {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	td, path, _ := strings.Cut(rest, "/")
	if !ok || td == "" || path == "" || strings.ContainsAny(id, " ?#") {
		return fmt.Errorf("%q must be a SPIFFE ID spiffe://<trust-domain>/<path>", id)
	}
	return nil
}

// ReservedPaths are SPIFFE ID paths no grant may register a workload
// under: the services' own identities (the arbiter, the fan-in proxy),
// operators' and SPIRE's. A grant that did would have SPIRE issue, say,
// the arbiter's server identity to any process its selectors match.
var ReservedPaths = []string{"/lockplane/", "/operator/", "/spire/"}

// CheckWorkloadID refuses a SPIFFE ID under a reserved path as a grant's
// registered workload.
func CheckWorkloadID(id string) error {
	rest, _ := strings.CutPrefix(id, "spiffe://")
	_, p, _ := strings.Cut(rest, "/")
	for _, r := range ReservedPaths {
		if strings.HasPrefix("/"+p+"/", r) {
			return fmt.Errorf("%s is under %s, reserved for Lockplane's services, operators and SPIRE: a grant may not have SPIRE issue it to a workload", id, r)
		}
	}
	return nil
}

// rootOnly reports whether selectors narrow a workload by the root user
// or group only.
func rootOnly(selectors []string) bool {
	if len(selectors) == 0 {
		return false
	}
	for _, s := range selectors {
		switch s {
		case "unix:uid:0", "unix:user:root", "unix:gid:0", "unix:group:root", "unix:supplementary_gid:0", "unix:supplementary_group:root":
		default:
			return false
		}
	}
	return true
}

// checkSelector accepts a SPIRE selector, "type:value": the type a
// plugin's name, the value anything printable (it may hold colons, as
// "unix:path:/usr/bin/x" and "k8s:ns:payments" do).
func checkSelector(sel string) error {
	typ, value, ok := strings.Cut(sel, ":")
	if !ok || typ == "" || value == "" {
		return fmt.Errorf("%q must be a SPIRE selector type:value, e.g. unix:user:ledger", sel)
	}
	for _, r := range typ {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%q: the selector type %q must be a plugin name (a-z, 0-9, _ and -)", sel, typ)
		}
	}
	for _, r := range value {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%q: the selector value must be printable", sel)
		}
	}
	return nil
}

// checkPrefix accepts a namespace ("team-a") or a key prefix ending at a
// segment boundary ("team-a/orders/").
func checkPrefix(p string) error {
	if p == "" || strings.HasPrefix(p, "/") {
		return errors.New("must be a namespace or a key prefix such as team-a/orders/")
	}
	trimmed := strings.TrimSuffix(p, "/")
	probe := trimmed + "/x"
	if err := lockkey.Validate(probe); err != nil {
		return fmt.Errorf("%q: %v", p, err)
	}
	if !strings.HasSuffix(p, "/") && strings.Contains(p, "/") {
		return fmt.Errorf("%q must end with '/': a grant covers whole segments, so team-a/ord does not grant team-a/orders", p)
	}
	return nil
}

// parseDate reads a date, written plain or (as unquoted YAML dates become)
// as an RFC 3339 time.
func parseDate(s string) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
}
