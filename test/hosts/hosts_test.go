package hosts_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/test/hosts"
)

func TestHostsHaveTheirOwnNameAddressAndNetwork(t *testing.T) {
	h := hoststest(t, "lpth", "10.231.250.0/24", []hosts.Spec{{Name: "alpha", Address: "10.231.250.11"}, {Name: "beta", Address: "10.231.250.12"}})
	for _, name := range []string{"alpha", "beta"} {
		out := ssh(t, h, name, "hostname; ip -4 -o addr show eth0")
		if !strings.HasPrefix(out, name+"\n") || !strings.Contains(out, h.Host(name).Address+"/24") {
			t.Fatalf("%s: hostname and address: %q", name, out)
		}
	}
	// alpha reaches beta's sshd across the bridge, from its own namespace.
	if out := ssh(t, h, "alpha", "exec 3<>/dev/tcp/10.231.250.12/22 && head -c 7 <&3"); out != "SSH-2.0" {
		t.Fatalf("alpha -> beta:22: %q", out)
	}

	// Down removes every namespace and process, however they were left.
	ssh(t, h, "beta", "setsid sleep 600 >/dev/null 2>&1 < /dev/null & echo started")
	if len(h.Processes()["beta"]) < 2 {
		t.Fatalf("beta runs %v: expected sshd and sleep", h.Processes()["beta"])
	}
	if err := h.Down(); err != nil {
		t.Fatal(err)
	}
	for _, host := range h.Hosts {
		if _, err := os.Stat("/run/netns/" + host.Namespace); err == nil {
			t.Fatalf("namespace %s survived Down", host.Namespace)
		}
	}
}

func TestBadConfigIsRefusedBeforeAnythingIsMade(t *testing.T) {
	_, err := hosts.Up(context.Background(), hosts.Config{Dir: t.TempDir(), Prefix: "lptx", Subnet: "10.231.251.0/24",
		Hosts: []hosts.Spec{{Name: "a", Address: "10.231.9.5"}}})
	if err == nil || !strings.Contains(err.Error(), `address "10.231.9.5" must lie in 10.231.251.0/24`) {
		t.Fatalf("an address outside the subnet: %v", err)
	}
	_, err = hosts.Up(context.Background(), hosts.Config{Dir: t.TempDir(), Prefix: "lptx", Subnet: "8.8.8.0/24"})
	if err == nil || !strings.Contains(err.Error(), "must be a private IPv4 network") {
		t.Fatalf("a public subnet: %v", err)
	}
}

func hoststest(t *testing.T, prefix, subnet string, specs []hosts.Spec) *hosts.Harness {
	t.Helper()
	if err := hosts.Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	h, err := hosts.Up(context.Background(), hosts.Config{Dir: t.TempDir(), Prefix: prefix, Subnet: subnet, Hosts: specs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Down() })
	return h
}

func ssh(t *testing.T, h *hosts.Harness, host, cmd string) string {
	t.Helper()
	c, err := h.Dial(host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s: %s: %v: %s", host, cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}
