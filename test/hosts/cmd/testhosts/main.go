// Command testhosts makes and removes the test hosts of stack files:
// `testhosts up --stack stacks/Pulumi.local.yaml` makes one network
// namespace host per entry of lockplane:hosts on the bridge that
// lockplane:testHosts names; `testhosts down` removes them all. --stack
// may be repeated for stacks that share one bridge (a region and its
// snapshot store), which then reach each other.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/lockplane/lockplane/test/hosts"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down" && os.Args[1] != "status") {
		fmt.Fprintln(os.Stderr, "usage: testhosts up|down|status [--stack FILE] [--dir DIR] [-o json]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var stacks stackFiles
	fs.Var(&stacks, "stack", "stack file whose lockplane:hosts to make (repeatable, for stacks on one bridge; default stacks/Pulumi.local.yaml)")
	dir := fs.String("dir", ".lockplane/hosts", "state directory (the stack's ssh key, known_hosts and roots live here)")
	output := fs.String("o", "text", "output: text or json")
	fs.Parse(os.Args[2:])
	if len(stacks) == 0 {
		stacks = stackFiles{"stacks/Pulumi.local.yaml"}
	}
	if err := run(os.Args[1], stacks, *dir, *output == "json"); err != nil {
		fmt.Fprintln(os.Stderr, "testhosts:", err)
		os.Exit(1)
	}
}

// stackFiles are the --stack flags.
type stackFiles []string

func (s *stackFiles) String() string     { return fmt.Sprint(*s) }
func (s *stackFiles) Set(v string) error { *s = append(*s, v); return nil }

func run(verb string, stacks []string, dir string, asJSON bool) error {
	switch verb {
	case "down":
		h, err := hosts.Load(dir)
		if errors.Is(err, os.ErrNotExist) {
			fmt.Println("no test hosts are up")
			return nil
		}
		if err != nil {
			return err
		}
		if err := h.Down(); err != nil {
			return err
		}
		fmt.Printf("removed %d test hosts and bridge %s\n", len(h.Hosts), h.Bridge)
		return nil
	case "status":
		h, err := hosts.Load(dir)
		if err != nil {
			return err
		}
		return report(h, asJSON)
	}
	var cfg hosts.Config
	for i, stack := range stacks {
		c, err := readStack(stack, dir)
		if err != nil {
			return err
		}
		if i > 0 && (c.Prefix != cfg.Prefix || c.Subnet != cfg.Subnet) {
			return fmt.Errorf("%s: lockplane:testHosts %s on %s, but %s's are %s on %s: stacks made together share one bridge", stack, c.Prefix, c.Subnet, stacks[0], cfg.Prefix, cfg.Subnet)
		}
		hs := cfg.Hosts
		cfg = c
		cfg.Hosts = append(hs, c.Hosts...)
	}
	fmt.Fprintf(os.Stderr, "making %d test hosts on %s ...\n", len(cfg.Hosts), cfg.Subnet)
	h, err := hosts.Up(context.Background(), cfg)
	if err != nil {
		return err
	}
	return report(h, asJSON)
}

func report(h *hosts.Harness, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(h)
	}
	procs := h.Processes()
	for _, host := range h.Hosts {
		fmt.Printf("%-12s %-15s %s  (%d processes)\n", host.Name, host.Address, host.Namespace, len(procs[host.Name]))
	}
	fmt.Printf("bridge %s (%s); ssh key %s; known_hosts %s\n", h.Bridge, h.Subnet, h.ClientKey, h.KnownHosts)
	return nil
}

// readStack takes the hosts and bridge from a Pulumi stack file.
func readStack(path, dir string) (hosts.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return hosts.Config{}, err
	}
	var f struct {
		Config struct {
			Hosts     []hosts.Spec `json:"lockplane:hosts"`
			TestHosts struct {
				Prefix string `json:"prefix"`
				Subnet string `json:"subnet"`
			} `json:"lockplane:testHosts"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return hosts.Config{}, fmt.Errorf("%s: %v", path, err)
	}
	if f.Config.TestHosts.Subnet == "" {
		return hosts.Config{}, fmt.Errorf("%s: lockplane:testHosts.subnet is not set: this stack is not for test hosts", path)
	}
	return hosts.Config{Dir: dir, Prefix: f.Config.TestHosts.Prefix, Subnet: f.Config.TestHosts.Subnet, Hosts: f.Config.Hosts}, nil
}
