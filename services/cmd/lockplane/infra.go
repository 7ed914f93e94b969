package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/infra/components"
	"github.com/lockplane/lockplane/infra/program"
	"github.com/lockplane/lockplane/infra/topology"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/fanin"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/spf13/cobra"
)

// LocalPassphrase encrypts the local stacks' secrets (local, and local-*
// such as its snapshot store) when no passphrase is set: they live on this machine
// only, and one passphrase lets a region read its store stack's secret
// outputs. Every other stack needs PULUMI_CONFIG_PASSPHRASE (or _FILE).
const LocalPassphrase = "lockplane-local-stack"

// localStack reports whether stack is one of this machine's test stacks.
func localStack(stack string) bool { return stack == "local" || strings.HasPrefix(stack, "local-") }

type stackFlags struct {
	stack, backend, output string
	// began is when the verb started: a restore's RTO counts from it.
	began time.Time
}

func (f *stackFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.stack, "stack", "", "stack (region) to act on: a stacks/Pulumi.<stack>.yaml (required)")
	c.Flags().StringVar(&f.backend, "backend", "", "Pulumi state backend URL (default file://.lockplane/state)")
	c.Flags().StringVarP(&f.output, "output", "o", "text", "output: text, or json (progress then goes to stderr)")
	c.MarkFlagRequired("stack")
}

func (f *stackFlags) check() error {
	if f.output != "text" && f.output != "json" {
		return fmt.Errorf("--output: %q is not text or json", f.output)
	}
	return nil
}

// progress is where Pulumi's live progress goes.
func (f *stackFlags) progress() io.Writer {
	if f.output == "json" {
		return os.Stderr
	}
	return os.Stdout
}

// projectRoot is the directory holding Pulumi.yaml, from the working
// directory up.
func projectRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "Pulumi.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no Pulumi.yaml here or above: run lockplane from the repository")
		}
		dir = parent
	}
}

// openStack selects (creating if new) the stack, with the program inline,
// the repository's Pulumi CLI and provider plugin, and a file backend.
// The program reads the store stacks it names from the same backend.
func openStack(ctx context.Context, f *stackFlags) (auto.Stack, string, error) {
	root, opts, err := workspaceOptions(f)
	if err != nil {
		return auto.Stack{}, "", err
	}
	s, err := auto.UpsertStackInlineSource(ctx, f.stack, "lockplane", program.New(storeReader(opts)), opts...)
	return s, root, err
}

// workspaceOptions are the Automation API's options for the stack: the
// repository's root as the working directory, its Pulumi CLI, the
// backend, and the passphrase that encrypts the stack's secrets.
func workspaceOptions(f *stackFlags) (string, []auto.LocalWorkspaceOption, error) {
	root, err := projectRoot()
	if err != nil {
		return "", nil, err
	}
	// The program resolves the stack's relative paths from here.
	if err := os.Chdir(root); err != nil {
		return "", nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "stacks", "Pulumi."+f.stack+".yaml")); err != nil {
		return "", nil, fmt.Errorf("--stack: no stacks/Pulumi.%s.yaml", f.stack)
	}
	for _, bin := range []string{"pulumi", "pulumi-resource-lockplane"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			return "", nil, fmt.Errorf("bin/%s is missing: run `make infra-tools`", bin)
		}
	}
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: root, SkipVersionCheck: true})
	if err != nil {
		return "", nil, err
	}
	backend := f.backend
	if backend == "" {
		state := filepath.Join(root, ".lockplane", "state")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return "", nil, err
		}
		backend = "file://" + state
	}
	env := map[string]string{
		"PULUMI_BACKEND_URL":       backend,
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_HOME":              filepath.Join(root, ".lockplane", "pulumi-home"),
		"PATH":                     filepath.Join(root, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	if os.Getenv("PULUMI_CONFIG_PASSPHRASE") == "" && os.Getenv("PULUMI_CONFIG_PASSPHRASE_FILE") == "" {
		if !localStack(f.stack) {
			return "", nil, fmt.Errorf("stack %s: set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE): it encrypts the stack's secrets (keys, certificates)", f.stack)
		}
		env["PULUMI_CONFIG_PASSPHRASE"] = LocalPassphrase
	}
	return root, []auto.LocalWorkspaceOption{auto.WorkDir(root), auto.Pulumi(cmd), auto.EnvVars(env), auto.SecretsProvider("passphrase")}, nil
}

// storeReadTimeout bounds one read of a store stack's outputs (two
// pulumi commands on the backend), so a stuck backend fails the up.
const storeReadTimeout = time.Minute

// storeReader reads a store stack's outputs from the region's backend,
// with the region's workspace options, for the program to keep its own
// region's users: a stack reference would copy every region's users
// into the region's state.
func storeReader(opts []auto.LocalWorkspaceOption) program.StoreReader {
	return func(ctx context.Context, stack string) (program.StoreOutputs, error) {
		ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
		defer cancel()
		// Read by name, not selected: selecting would change the
		// workspace's current stack under the region's running update.
		ws, err := auto.NewLocalWorkspace(ctx, opts...)
		if err != nil {
			return program.StoreOutputs{}, fmt.Errorf("open the workspace: %w", err)
		}
		out, err := ws.StackOutputs(ctx, stack)
		if err != nil && noSuchStack.MatchString(err.Error()) {
			return program.StoreOutputs{}, fmt.Errorf("no such stack in the backend: run `lockplane up --stack %s` first", stack)
		}
		if err != nil {
			return program.StoreOutputs{}, fmt.Errorf("read its outputs: %s", withoutOutput(err))
		}
		return storeOutputs(out)
	}
}

// withoutOutput is a Pulumi CLI error without the command's stdout, which
// for `stack output --show-secrets` holds every region's snapshot store users.
func withoutOutput(err error) string {
	msg, rest, _ := strings.Cut(err.Error(), "\nstdout:")
	if _, stderr, ok := strings.Cut(rest, "\nstderr:"); ok {
		msg += ": " + lastLines(stderr, 1)
	}
	return msg
}

// noSuchStack is the Pulumi CLI's answer for a stack the backend lacks.
var noSuchStack = regexp.MustCompile(`no stack named .* found`)

// storeOutputs decodes a store stack's outputs (secrets shown) into the
// program's StoreOutputs, whose JSON tags are the exported keys.
func storeOutputs(out auto.OutputMap) (program.StoreOutputs, error) {
	plain := map[string]any{}
	for k, v := range out {
		plain[k] = v.Value
	}
	for old, now := range program.OldStoreOutputKeys {
		if _, ok := plain[now]; !ok && plain[old] != nil {
			plain[now] = plain[old]
		}
	}
	var v program.StoreOutputs
	b, err := json.Marshal(plain)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		return program.StoreOutputs{}, fmt.Errorf("its outputs are not a snapshot store's: %w", err)
	}
	return v, nil
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// summary is what every verb prints as JSON.
type summary struct {
	Stack   string         `json:"stack"`
	Verb    string         `json:"verb"`
	Result  string         `json:"result"`
	Changes map[string]int `json:"changes"`
	Elapsed string         `json:"elapsed"`
	Outputs map[string]any `json:"outputs,omitempty"`
	Profile string         `json:"profile,omitempty"`
	// FanInProfile is the profile's copy whose endpoint is the fan-in
	// tier (xds:///lockplane), and FanInBootstrap the demo identity's xDS
	// bootstrap to name in GRPC_XDS_BOOTSTRAP with it (docs/fan-in.md).
	FanInProfile   string `json:"fan_in_profile,omitempty"`
	FanInBootstrap string `json:"fan_in_bootstrap,omitempty"`
	// Promotion is promote's record.
	Promotion *promotion `json:"promotion,omitempty"`
	// Unseal, after a DR stack's up, is what the operators run next.
	Unseal []string `json:"unseal,omitempty"`
	// Verify, after the unseal, checks the region and prints the RTO.
	Verify string `json:"verify,omitempty"`
	// Refused, after a DR stack's or an in-place restore's up, are the
	// snapshots the restore left out, each "cluster: why"; RefusedReasons
	// the same with each one's name and reason ("untrusted" is a forgery;
	// "incomplete", "overwritten", "unreadable" the snapshot store's wear).
	Refused        []string  `json:"refused,omitempty"`
	RefusedReasons []refusal `json:"refused_reasons,omitempty"`
	// Answered, after up, is what answered each service's readiness
	// check (answered.go).
	Answered []answer `json:"answered,omitempty"`
}

func (s summary) print(asJSON bool) {
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(s)
		return
	}
	printAnswers(os.Stdout, s.Answered)
	var parts []string
	for _, k := range sortedKeys(s.Changes) {
		parts = append(parts, fmt.Sprintf("%d %s", s.Changes[k], k))
	}
	fmt.Printf("\nlockplane %s --stack %s: %s in %s (%s)\n", s.Verb, s.Stack, s.Result, s.Elapsed, strings.Join(parts, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// stackVerb is one verb on a stack: flags, the stack opened, the verb
// timed, its failure's cause kept, its summary printed.
func stackVerb(use, short, long string, act func(ctx context.Context, s auto.Stack, root string, f *stackFlags) (summary, error)) *cobra.Command {
	f := &stackFlags{}
	c := &cobra.Command{
		Use: use, Short: short, Long: long, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			f.began = time.Now()
			s, root, err := openStack(ctx, f)
			if err != nil {
				return err
			}
			out, err := act(ctx, s, root, f)
			if err != nil {
				return fmt.Errorf("%s --stack %s failed: %w", use, f.stack, errors.New(lastLines(err.Error(), 30)))
			}
			out.Stack, out.Verb, out.Elapsed = f.stack, use, time.Since(f.began).Round(time.Second).String()
			out.print(f.output == "json")
			return nil
		},
	}
	f.add(c)
	return c
}

func upCmd() *cobra.Command {
	var expectNoChanges bool
	c := stackVerb("up", "Create or update a region's stack: hosts, Tang, LUKS, etcd tiers, the arbiter",
		`up runs the region program (infra/) for --stack with the Pulumi CLI built in bin/,
printing live progress. A stack whose hosts cannot carry the topology is
refused before anything is created. Afterwards it writes a lockctl profile
for the deployed arbiter to .lockplane/<stack>/profile.json.`,
		func(ctx context.Context, s auto.Stack, root string, f *stackFlags) (summary, error) {
			// A restore is timed from the first up that tried it, even one
			// that failed or was interrupted.
			if _, err := s.GetConfig(ctx, program.Namespace+":restore"); err == nil {
				if err := beginRestore(root, f.stack, f.began); err != nil {
					fmt.Fprintf(os.Stderr, "warning: the restore's start is not recorded, so dr verify cannot time it: %v\n", err)
				}
			}
			opts := []optup.Option{optup.ProgressStreams(f.progress())}
			if expectNoChanges {
				opts = append(opts, optup.ExpectNoChanges())
			}
			res, err := s.Up(ctx, opts...)
			if err != nil {
				return summary{}, err
			}
			out := summary{Result: res.Summary.Result, Changes: changes(res.Summary.ResourceChanges), Outputs: map[string]any{}}
			if out.Answered, err = answers(ctx, s); err != nil {
				fmt.Fprintf(os.Stderr, "warning: %v\n", err)
			}
			for k, v := range res.Outputs {
				if !v.Secret {
					out.Outputs[k] = v.Value
				}
			}
			if out.Profile, out.FanInProfile, out.FanInBootstrap, err = writeProfiles(root, f.stack, res.Outputs); err != nil {
				return summary{}, err
			}
			if restored, ok := res.Outputs["restored"].Value.(map[string]any); ok {
				var floor int64
				if out.Unseal, floor, err = unsealCommands(out.Profile, operatorPeople(res.Outputs), restored, typedFloor(res.Outputs)); err != nil {
					return summary{}, err
				}
				if cs, err := restoredClusters(restored); err == nil {
					out.Refused, out.RefusedReasons = refusedSnapshots(cs), refusals(cs)
				}
				if err := recordRestore(root, f.stack, f.began, floor, restored); err != nil {
					fmt.Fprintf(os.Stderr, "warning: the restore is not recorded, so dr verify cannot check it: %v\n", err)
				}
				out.Verify = verifyCommand(f.stack)
			}
			if restored, ok := res.Outputs["restoredInPlace"].Value.(map[string]any); ok {
				w := io.Discard
				if f.output == "text" {
					w = os.Stdout
				}
				var recorded map[string]string
				if rec, err := readRestoreRecord(restoreRecordPath(root, f.stack)); err == nil && rec.InPlace {
					recorded = rec.Clusters
				}
				cmds, done, err := inPlaceUnseal(w, f.stack, out.Profile, operatorPeople(res.Outputs), restored, f.began, recorded)
				if err != nil {
					return summary{}, err
				}
				out.Unseal = append(out.Unseal, cmds...)
				out.Refused, out.RefusedReasons = append(out.Refused, refusedSnapshots(done)...), append(out.RefusedReasons, refusals(done)...)
				if len(done) > 0 {
					if err := recordInPlace(root, f.stack, f.began, done); err != nil {
						fmt.Fprintf(os.Stderr, "warning: the restore is not recorded, so dr verify cannot check it: %v\n", err)
					}
					out.Verify = verifyCommand(f.stack) + " --class CLASS --key KEY"
				}
			}
			if f.output == "text" {
				if v, ok := res.Outputs["storeUrl"]; ok {
					fmt.Printf("snapshot store %v\n", v.Value)
				} else {
					fmt.Printf("coord cluster %v, arbiters %v\nprofile: %s (lockctl --profile %s status)\n",
						res.Outputs["coordClusterId"].Value, res.Outputs["arbiterEndpoints"].Value, out.Profile, out.Profile)
					if out.FanInProfile != "" {
						fmt.Printf("through the fan-in tier %v: GRPC_XDS_BOOTSTRAP=%s lockctl --profile %s status\n",
							res.Outputs["fanInEndpoints"].Value, out.FanInBootstrap, out.FanInProfile)
					}
					if p, ok := res.Outputs["prometheusUrl"]; ok {
						fmt.Printf("monitoring: Prometheus %v, Alertmanager %v (docs/observability.md)\n", p.Value, res.Outputs["alertmanagerUrl"].Value)
					}
				}
				if restored, ok := res.Outputs["restored"].Value.(map[string]any); ok {
					printRestored(os.Stdout, f.stack, out.Profile, operatorPeople(res.Outputs), restored, typedFloor(res.Outputs))
				}
				if v, ok := res.Outputs["snapshotStore"]; ok {
					fmt.Printf("snapshots into %v (lockplane snapshot list --stack %s)\n", v.Value, f.stack)
				}
			}
			return out, nil
		})
	c.Flags().BoolVar(&expectNoChanges, "expect-no-changes", false, "fail if anything would change")
	return c
}

func changes(m *map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return *m
}

func previewCmd() *cobra.Command {
	var expectNoChanges bool
	c := stackVerb("preview", "Show what up would change, changing nothing", "",
		func(ctx context.Context, s auto.Stack, _ string, f *stackFlags) (summary, error) {
			opts := []optpreview.Option{optpreview.ProgressStreams(f.progress())}
			if expectNoChanges {
				opts = append(opts, optpreview.ExpectNoChanges())
			}
			res, err := s.Preview(ctx, opts...)
			if err != nil {
				return summary{}, err
			}
			ch := map[string]int{}
			for k, v := range res.ChangeSummary {
				ch[string(k)] = v
			}
			return summary{Result: "succeeded", Changes: ch}, nil
		})
	c.Flags().BoolVar(&expectNoChanges, "expect-no-changes", false, "fail if anything would change")
	return c
}

func refreshCmd() *cobra.Command {
	c := stackVerb("refresh", "Read every resource back from the hosts and record what drifted", "",
		func(ctx context.Context, s auto.Stack, _ string, f *stackFlags) (summary, error) {
			res, err := s.Refresh(ctx, optrefresh.ProgressStreams(f.progress()))
			if err != nil {
				return summary{}, err
			}
			return summary{Result: res.Summary.Result, Changes: changes(res.Summary.ResourceChanges)}, nil
		})
	return c
}

func destroyCmd() *cobra.Command {
	c := stackVerb("destroy", "Stop and remove everything the stack made on its hosts", "",
		func(ctx context.Context, s auto.Stack, root string, f *stackFlags) (summary, error) {
			if err := releaseSigningKeys(ctx, s); err != nil {
				return summary{}, err
			}
			res, err := s.Destroy(ctx, optdestroy.ProgressStreams(f.progress()))
			if err != nil {
				return summary{}, err
			}
			os.RemoveAll(filepath.Join(root, ".lockplane", f.stack))
			return summary{Result: res.Summary.Result, Changes: changes(res.Summary.ResourceChanges)}, nil
		})
	return c
}

// lastLines keeps the end of a long Pulumi error, where the cause is.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// writeProfile writes a lockctl profile for the deployed arbiter, with the
// demo workload's and the deployer operator's SVIDs (identities demo and
// operator), and each of operators.people's own operator SVID as identity
// <name>: the two-person actions take a person's ID token only on theirs.
func writeProfile(root, stack string, out auto.OutputMap) (string, error) {
	str := func(k string) string { s, _ := out[k].Value.(string); return s }
	eps, _ := out["arbiterEndpoints"].Value.([]any)
	if len(eps) == 0 {
		return "", nil
	}
	dir := filepath.Join(root, ".lockplane", stack)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	files := map[string]string{"bundle.pem": str("spiffeBundlePem"), "demo.pem": str("clientSvidPem"), "demo-key.pem": str("clientKeyPem"),
		"operator.pem": str("operatorSvidPem"), "operator-key.pem": str("operatorKeyPem")}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return "", err
		}
	}
	td := str("trustDomain")
	p := &profile.Profile{Endpoint: fmt.Sprint(eps[0]), ServerID: str("arbiterServerId"), TrustDomain: td,
		Bundle: filepath.Join(dir, "bundle.pem"), DefaultIdentity: "demo", Identities: map[string]profile.Identity{
			"demo":     {SPIFFEID: "spiffe://" + td + "/ns/demo/sa/lockctl", Cert: filepath.Join(dir, "demo.pem"), Key: filepath.Join(dir, "demo-key.pem")},
			"operator": {SPIFFEID: "spiffe://" + td + components.OperatorPath(topology.OperatorDeployer), Cert: filepath.Join(dir, "operator.pem"), Key: filepath.Join(dir, "operator-key.pem")},
		}}
	if err := addPeople(p, dir, out); err != nil {
		return "", err
	}
	// With SPIRE, the demo identity as a workload on a workload host
	// takes it: from that host's agent, rotating.
	if socks, _ := out["spireWorkloadSockets"].Value.([]any); len(socks) > 0 {
		p.Identities["workload"] = profile.Identity{SPIFFEID: "spiffe://" + td + "/ns/demo/sa/lockctl", SPIFFESocket: fmt.Sprint(socks[0])}
	}
	path := filepath.Join(dir, "profile.json")
	return path, p.Save(path)
}

// addPeople writes each person's operator SVID and key beside the
// profile (operator-<name>.pem, operator-<name>-key.pem) and adds them as
// identity <name>. A person whose certificate or key the outputs lack is
// an error: the profile would send their token on no SVID of theirs.
func addPeople(p *profile.Profile, dir string, out auto.OutputMap) error {
	certs, _ := out[program.OperatorPeopleSvidsOutput].Value.(map[string]any)
	keys, _ := out[program.OperatorPeopleKeysOutput].Value.(map[string]any)
	for _, name := range sortedKeys(certs) {
		cert, _ := certs[name].(string)
		key, _ := keys[name].(string)
		if cert == "" || key == "" {
			return fmt.Errorf("the stack's outputs lack operator %s's SVID or key (%s, %s): run lockplane refresh, then up",
				name, program.OperatorPeopleSvidsOutput, program.OperatorPeopleKeysOutput)
		}
		if _, taken := p.Identities[name]; taken {
			return fmt.Errorf("operators.people: %q is already the profile's identity %s: give the person's account", name, name)
		}
		id := profile.Identity{SPIFFEID: "spiffe://" + p.TrustDomain + components.OperatorPath(name),
			Cert: filepath.Join(dir, "operator-"+name+".pem"), Key: filepath.Join(dir, "operator-"+name+"-key.pem")}
		for f, content := range map[string]string{id.Cert: cert, id.Key: key} {
			if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
				return err
			}
		}
		p.Identities[name] = id
	}
	return nil
}

// operatorPeople are the people whose operator SVIDs the stack issued
// (operators.people), by name.
func operatorPeople(out auto.OutputMap) []string {
	certs, _ := out[program.OperatorPeopleSvidsOutput].Value.(map[string]any)
	return sortedKeys(certs)
}

// writeProfiles is writeProfile and, when the stack runs the fan-in tier,
// the profile's copy that dials through it and the demo identity's xDS
// bootstrap naming its first control plane.
func writeProfiles(root, stack string, out auto.OutputMap) (path, fanInPath, bootstrapPath string, err error) {
	if path, err = writeProfile(root, stack, out); err != nil || path == "" {
		return path, "", "", err
	}
	eps, _ := out["fanInEndpoints"].Value.([]any)
	if len(eps) == 0 {
		return path, "", "", nil
	}
	p, err := profile.Load(path)
	if err != nil {
		return path, "", "", err
	}
	demo := p.Identities[p.DefaultIdentity]
	boot, err := fanin.ClientBootstrap(fmt.Sprint(eps[0]), "lockctl-"+stack, fanin.ClientTLS{Cert: demo.Cert, Key: demo.Key, Bundle: p.Bundle})
	if err != nil {
		return path, "", "", err
	}
	dir := filepath.Dir(path)
	bootstrapPath = filepath.Join(dir, "xds-bootstrap.json")
	if err := os.WriteFile(bootstrapPath, append(boot, '\n'), 0o600); err != nil {
		return path, "", "", err
	}
	p.Endpoint = "xds:///" + fanin.DefaultName
	fanInPath = filepath.Join(dir, "profile-fanin.json")
	return path, fanInPath, bootstrapPath, p.Save(fanInPath)
}
