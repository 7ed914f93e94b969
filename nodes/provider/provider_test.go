package provider_test

import (
	"context"
	"fmt"
	"github.com/lockplane/lockplane/services/resourcetest"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockplane/lockplane/nodes/provider"
	"github.com/lockplane/lockplane/nodes/remote"
	"github.com/lockplane/lockplane/test/hosts"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/structpb"
)

// A test region: two hosts on a private bridge, each with its own sshd.
func harness(t *testing.T) *hosts.Harness {
	t.Helper()
	resourcetest.NotShort(t, "test hosts")
	if err := hosts.Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	h, err := hosts.Up(context.Background(), hosts.Config{Dir: t.TempDir(), Prefix: "lptp", Subnet: "10.231.252.0/24",
		Hosts: []hosts.Spec{{Name: "n1", Address: "10.231.252.11"}, {Name: "n2", Address: "10.231.252.12"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Down() })
	return h
}

func target(t *testing.T, h *hosts.Harness, name string) map[string]any {
	key, err := os.ReadFile(h.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	host := h.Host(name)
	return map[string]any{"host": host.Address, "user": "root", "privateKey": string(key), "hostKey": host.HostKey}
}

func urn(kind, name string) string {
	return "urn:pulumi:test::lockplane::lockplane:nodes:" + kind + "::" + name
}

func props(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := plugin.MarshalProperties(resource.NewPropertyMapFromMap(m), plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func outputs(t *testing.T, s *structpb.Struct) map[string]any {
	t.Helper()
	pm, err := plugin.UnmarshalProperties(s, plugin.MarshalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pm.Mappable()
}

func run(t *testing.T, h *hosts.Harness, host, cmd string) string {
	t.Helper()
	c, err := h.Dial(host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _ := c.NewSession()
	defer s.Close()
	out, _ := s.CombinedOutput(cmd)
	return strings.TrimSpace(string(out))
}

func TestFileLifecycleOnARealHost(t *testing.T) {
	h := harness(t)
	p := provider.New()
	ctx := context.Background()
	path := filepath.Join(h.Host("n1").Root, "etc/lockplane/app.conf")
	in := map[string]any{"connection": target(t, h, "n1"), "path": path, "content": "a = 1\n", "mode": "0640"}

	check, err := p.Check(ctx, &pulumirpc.CheckRequest{Urn: urn("File", "conf"), News: props(t, in)})
	if err != nil || len(check.Failures) > 0 {
		t.Fatalf("check: %v %v", err, check.GetFailures())
	}
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("File", "conf"), Properties: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, h, "n1", "cat "+path+"; stat -c %a "+path); got != "a = 1\n640" && got != "a = 1\n\n640" && !strings.HasPrefix(got, "a = 1") {
		t.Fatalf("on the host: %q", got)
	}
	if mode := run(t, h, "n1", "stat -c %a "+path); mode != "640" {
		t.Fatalf("mode %s", mode)
	}
	// The private key is stored as a secret.
	st, _ := plugin.UnmarshalProperties(created.Properties, plugin.MarshalOptions{KeepSecrets: true})
	if !st["connection"].ObjectValue()["privateKey"].IsSecret() && !st["connection"].IsSecret() {
		t.Fatal("the SSH private key is stored in the clear")
	}

	// Nothing changed: no diff. Content changed: an update, not a replace.
	same, err := p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("File", "conf"), Olds: created.Properties, News: props(t, in)})
	if err != nil || same.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Fatalf("diff of identical inputs: %v %v", same, err)
	}
	in2 := map[string]any{"connection": target(t, h, "n1"), "path": path, "content": "a = 2\n", "mode": "0640"}
	d, err := p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("File", "conf"), Olds: created.Properties, News: props(t, in2)})
	if err != nil || d.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(d.Replaces) != 0 || strings.Join(d.Diffs, ",") != "content" {
		t.Fatalf("diff of new content: %+v %v", d, err)
	}
	if _, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: urn("File", "conf"), Id: created.Id, Olds: created.Properties, News: props(t, in2)}); err != nil {
		t.Fatal(err)
	}
	if got := run(t, h, "n1", "cat "+path); got != "a = 2" {
		t.Fatalf("after update: %q", got)
	}
	// A new path replaces.
	in3 := map[string]any{"connection": target(t, h, "n1"), "path": path + ".new", "content": "a = 2\n"}
	if d, _ := p.Diff(ctx, &pulumirpc.DiffRequest{Urn: urn("File", "conf"), Olds: created.Properties, News: props(t, in3)}); len(d.Replaces) != 1 || d.Replaces[0] != "path" {
		t.Fatalf("a new path should replace: %+v", d)
	}

	// Read finds it; deleted behind Pulumi's back, Read reports it gone.
	r, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("File", "conf"), Id: created.Id, Properties: created.Properties, Inputs: props(t, in2)})
	if err != nil || r.Id == "" {
		t.Fatalf("read: %v %v", r, err)
	}
	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("File", "conf"), Id: created.Id, Properties: created.Properties, OldInputs: props(t, in2)}); err != nil {
		t.Fatal(err)
	}
	if got := run(t, h, "n1", "test -e "+path+" && echo present || echo absent"); got != "absent" {
		t.Fatalf("after delete: %s", got)
	}
	r, err = p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("File", "conf"), Id: created.Id, Properties: created.Properties, Inputs: props(t, in2)})
	if err != nil || r.Id != "" {
		t.Fatalf("read of a deleted file: %v %v", r, err)
	}
}

// An unchanged file is not sent again: the upload is skipped when the
// host's copy has the same checksum.
func TestUnchangedFilesAreNotResent(t *testing.T) {
	h := harness(t)
	var pool remote.Pool
	defer pool.Close()
	var tg remote.Target
	m := target(t, h, "n2")
	tg.Host, tg.User, tg.PrivateKey, tg.HostKey = m["host"].(string), "root", m["privateKey"].(string), m["hostKey"].(string)
	c, err := pool.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(h.Host("n2").Root, "opt/blob")
	body := strings.Repeat("lockplane ", 100000)
	sum := mustSum(body)
	for i, want := range []bool{true, false} {
		sent, err := c.Put(context.Background(), path, strings.NewReader(body), sum, 0o644)
		if err != nil || sent != want {
			t.Fatalf("put %d: sent=%v err=%v, want sent=%v", i, sent, err, want)
		}
	}
	// A source that does not match its declared checksum is not installed.
	if _, err := c.Put(context.Background(), path, strings.NewReader("other"), mustSum("different"), 0o644); err == nil || !strings.Contains(err.Error(), "changed while it was sent") {
		t.Fatalf("a mismatched source: %v", err)
	}
	if got, _ := c.Sha256(context.Background(), path); got != sum {
		t.Fatal("the host's file changed after a refused upload")
	}
}

func mustSum(s string) string {
	f, _ := os.CreateTemp("", "sum")
	defer os.Remove(f.Name())
	f.WriteString(s)
	f.Close()
	sum, _ := provider.SumFile(f.Name())
	return sum
}

func TestAnUnknownHostKeyIsRefused(t *testing.T) {
	h := harness(t)
	p := provider.New()
	conn := target(t, h, "n1")
	conn["hostKey"] = h.Host("n2").HostKey // another host's key
	in := map[string]any{"connection": conn, "path": filepath.Join(h.Host("n1").Root, "x"), "content": "x"}
	_, err := p.Create(context.Background(), &pulumirpc.CreateRequest{Urn: urn("File", "x"), Properties: props(t, in)})
	if err == nil || !strings.Contains(err.Error(), "host key mismatch") || !strings.Contains(err.Error(), "refusing to connect") {
		t.Fatalf("a wrong pinned key: %v", err)
	}
	delete(conn, "hostKey")
	check, _ := p.Check(context.Background(), &pulumirpc.CheckRequest{Urn: urn("File", "x"), News: props(t, in)})
	if len(check.GetFailures()) != 1 || !strings.Contains(check.Failures[0].Reason, "no pinned host key; pin it, or set trustOnFirstUse") {
		t.Fatalf("no pinned key: %v", check.GetFailures())
	}
	conn["trustOnFirstUse"] = true
	if _, err := p.Create(context.Background(), &pulumirpc.CreateRequest{Urn: urn("File", "x"), Properties: props(t, in)}); err != nil {
		t.Fatalf("explicit trust on first use: %v", err)
	}
}

func TestServiceRunsRestartsAndStops(t *testing.T) {
	h := harness(t)
	p := provider.New()
	ctx := context.Background()
	state := filepath.Join(h.Host("n1").Root, "run")
	in := map[string]any{"connection": target(t, h, "n1"), "name": "sleeper", "mode": "supervised", "stateDir": state,
		"command": []any{"/bin/sleep", "600"}}
	created, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("Service", "s"), Properties: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	pid := outputs(t, created.Properties)["pid"]
	if got := services(h, "n1"); got != "sh sleep" {
		t.Fatalf("processes on n1 after start: %q, want the loop and sleep", got)
	}
	// The command dies: the loop starts it again. (-x: the loop's own
	// command line names the command too.)
	// (Only processes in n1's namespace count: this machine runs other
	// sleeps.)
	first := sleeps(h, "n1")
	if len(first) != 1 {
		t.Fatalf("sleeps on n1: %v", first)
	}
	for pid := range first {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	restarted := false
	for i := 0; i < 100 && !restarted; i++ {
		for pid := range sleeps(h, "n1") {
			if _, old := first[pid]; !old {
				restarted = true
			}
		}
		time.Sleep(50 * time.Millisecond) // polling the namespace: there is no event for a process start
	}
	if !restarted {
		t.Fatal("the service was not restarted")
	}
	// An update restarts it with the new command.
	in["command"] = []any{"/bin/sleep", "700"}
	up, err := p.Update(ctx, &pulumirpc.UpdateRequest{Urn: urn("Service", "s"), Id: created.Id, Olds: created.Properties, News: props(t, in)})
	if err != nil {
		t.Fatal(err)
	}
	if outputs(t, up.Properties)["pid"] == pid {
		t.Fatal("update did not restart the service")
	}
	// The update returns once the new loop runs; its command may start a
	// moment later (polled: no event for a process start).
	var got map[int]string
	for i := 0; i < 100; i++ {
		if got = sleeps(h, "n1"); len(got) == 1 && slices.Contains(slices.Collect(maps.Values(got)), "/bin/sleep 700") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 1 || !slices.Contains(slices.Collect(maps.Values(got)), "/bin/sleep 700") {
		t.Fatalf("after the update the service runs %v, want only /bin/sleep 700", got)
	}
	if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("Service", "s"), Id: created.Id, Properties: up.Properties, OldInputs: props(t, in)}); err != nil {
		t.Fatal(err)
	}
	if got := services(h, "n1"); got != "" {
		t.Fatalf("processes left on n1 after delete: %q", got)
	}
}

// sleeps maps the pids of the sleep processes in a host's namespace to
// their command lines.
func sleeps(h *hosts.Harness, host string) map[int]string {
	out := map[int]string{}
	for _, pid := range h.Processes()[host] {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) != "sleep" {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out[pid] = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// services lists the commands running in a host's namespace, but sshd.
func services(h *hosts.Harness, host string) string {
	var names []string
	for _, pid := range h.Processes()[host] {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if name := strings.TrimSpace(string(b)); err == nil && name != "sshd" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// A LUKS volume bound to two Tang servers is verified to unlock through
// them; with both stopped the verification fails, and one is enough.
func TestLuksVolumeUnlocksOnlyThroughTang(t *testing.T) {
	for _, bin := range []string{"cryptsetup", "clevis", "socat", "jose", "/usr/libexec/tangd"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (apt-get install cryptsetup-bin clevis clevis-luks tang-common socat jose)", bin)
			}
			t.Skipf("%s is missing", bin)
		}
	}
	h := harness(t)
	p := provider.New()
	ctx := context.Background()
	var pins []any
	tangs := map[string]*pulumirpc.CreateResponse{}
	tangIn := map[string]map[string]any{}
	for _, n := range []string{"n1", "n2"} {
		db := filepath.Join(h.Host(n).Root, "var/db/tang")
		keys, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("TangKeys", n), Properties: props(t, map[string]any{"connection": target(t, h, n), "dir": db})})
		if err != nil {
			t.Fatal(err)
		}
		addr := h.Host(n).Address
		tangIn[n] = map[string]any{"connection": target(t, h, n), "name": "tangd", "mode": "supervised", "stateDir": filepath.Join(h.Host(n).Root, "run"),
			"command": []any{"/usr/bin/socat", "TCP-LISTEN:7500,bind=" + addr + ",reuseaddr,fork", "EXEC:/usr/libexec/tangd " + db}}
		if tangs[n], err = p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("Service", n), Properties: props(t, tangIn[n])}); err != nil {
			t.Fatal(err)
		}
		pins = append(pins, map[string]any{"url": "http://" + addr + ":7500", "thumbprint": outputs(t, keys.Properties)["thumbprint"]})
	}
	vin := map[string]any{"connection": target(t, h, "n1"), "path": filepath.Join(h.Host("n1").Root, "var/lib/luks/data.img"),
		"sizeMiB": 32, "tang": pins, "threshold": 1}
	vol, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("LuksVolume", "v"), Properties: props(t, vin)})
	if err != nil {
		t.Fatal(err)
	}
	if o := outputs(t, vol.Properties); o["verified"] != true || o["uuid"] == "" {
		t.Fatalf("volume: %v", o)
	}
	verified := func() bool {
		r, err := p.Read(ctx, &pulumirpc.ReadRequest{Urn: urn("LuksVolume", "v"), Id: vol.Id, Properties: vol.Properties, Inputs: props(t, vin)})
		if err != nil {
			t.Fatal(err)
		}
		return outputs(t, r.Properties)["verified"] == true
	}
	stop := func(n string) {
		if _, err := p.Delete(ctx, &pulumirpc.DeleteRequest{Urn: urn("Service", n), Id: tangs[n].Id, Properties: tangs[n].Properties, OldInputs: props(t, tangIn[n])}); err != nil {
			t.Fatal(err)
		}
	}
	stop("n1")
	if !verified() {
		t.Fatal("with one of two Tang servers up the volume did not unlock (threshold 1)")
	}
	stop("n2")
	if verified() {
		t.Fatal("the volume unlocked with every Tang server down: the binding proves nothing")
	}
}

// The fsync benchmark runs on the host's disk and refuses a disk over the
// gate, naming the host, the disk, the figure and the gate.
func TestFsyncGateRefusesASlowDisk(t *testing.T) {
	h := harness(t)
	bin := filepath.Join(t.TempDir(), "lockplane-node")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lockplane/lockplane/services/cmd/lockplane-node").CombinedOutput(); err != nil {
		t.Fatalf("build lockplane-node: %v %s", err, out)
	}
	sum, err := provider.SumFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	p := provider.New()
	ctx := context.Background()
	remoteBin := filepath.Join(h.Host("n1").Root, "opt/lockplane/bin/lockplane-node")
	if _, err := p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("File", "bin"), Properties: props(t, map[string]any{
		"connection": target(t, h, "n1"), "path": remoteBin, "source": bin, "sourceSha256": sum, "mode": "0755"})}); err != nil {
		t.Fatal(err)
	}
	bench := func(gate float64) (*pulumirpc.CreateResponse, error) {
		return p.Create(ctx, &pulumirpc.CreateRequest{Urn: urn("FsyncBenchmark", "b"), Properties: props(t, map[string]any{
			"connection": target(t, h, "n1"), "hostName": "n1", "binary": remoteBin, "dir": filepath.Join(h.Host("n1").Root, "var/lib/etcd"),
			"sizeMiB": 1, "gateP99Ms": gate})})
	}
	ok, err := bench(1000)
	if err != nil {
		t.Fatal(err)
	}
	if o := outputs(t, ok.Properties); o["p99Ms"].(float64) <= 0 || o["device"] == "" {
		t.Fatalf("benchmark outputs: %v", o)
	}
	_, err = bench(0.0001)
	if err == nil || !strings.Contains(err.Error(), "fsync gate: host n1, disk ") || !strings.Contains(err.Error(), "is over the stack's gate of 0.0001 ms") ||
		!strings.Contains(err.Error(), "etcd will not be installed on it") {
		t.Fatalf("a disk over the gate: %v", err)
	}
}

// A Password is 32 random bytes in hex, secret in the state, and its ID
// says nothing of it; two are different.
func TestAPasswordIsRandomAndSecret(t *testing.T) {
	p := provider.New()
	seen := map[string]bool{}
	for range 2 {
		created, err := p.Create(context.Background(), &pulumirpc.CreateRequest{Urn: urn("Password", "pw"), Properties: props(t, map[string]any{"purpose": "audit"})})
		if err != nil {
			t.Fatal(err)
		}
		st, err := plugin.UnmarshalProperties(created.GetProperties(), plugin.MarshalOptions{KeepSecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		v := st["password"]
		if !v.IsSecret() {
			t.Fatalf("the password is not secret in the state: %v", v)
		}
		pw := v.SecretValue().Element.StringValue()
		if len(pw) != 64 || seen[pw] || strings.Contains(created.GetId(), pw[:8]) {
			t.Fatalf("password %d characters, seen before %v, id %q", len(pw), seen[pw], created.GetId())
		}
		seen[pw] = true
	}
	if _, err := p.Create(context.Background(), &pulumirpc.CreateRequest{Urn: urn("Password", "pw"), Properties: props(t, map[string]any{})}); err == nil ||
		!strings.Contains(err.Error(), "purpose") {
		t.Fatalf("a Password without a purpose: %v", err)

	}
}
