// Package hosts makes test hosts on this machine: each one a network
// namespace on a private bridge, with its own address, hostname, sshd and
// root directory, so that what crosses a network between hosts really
// does. Everything it makes is named in a state file, and Down removes all
// of it, including every process left running in a host's namespace.
//
// It needs root, iproute2 and openssh-server. Addresses are the ones the
// caller gives, inside a subnet the harness itself creates on its bridge:
// nothing here reaches any other network.
package hosts

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
)

// Spec is one host to make.
type Spec struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// Config is a set of hosts on one bridge.
type Config struct {
	// Dir holds the state file, the SSH client key, known_hosts and each
	// host's root directory.
	Dir string
	// Prefix names the bridge, namespaces and links (at most 8 characters),
	// so harnesses of different tests do not collide.
	Prefix string
	// Subnet is the bridge's network, such as 10.231.0.0/24; the bridge
	// takes its first address and every host address must lie inside it.
	Subnet string
	Hosts  []Spec
}

// Host is a running test host.
type Host struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Namespace string `json:"namespace"`
	Link      string `json:"link"`
	// Root is the host's own root directory on this machine's disk: paths
	// on the host are under it (namespaces do not separate filesystems).
	Root string `json:"root"`
	// HostKey is the host's public SSH key in authorized_keys form.
	HostKey string `json:"host_key"`
	SSHPID  int    `json:"sshd_pid"`
}

// Harness is a set of running hosts.
type Harness struct {
	Dir    string  `json:"dir"`
	Bridge string  `json:"bridge"`
	Subnet string  `json:"subnet"`
	Hosts  []*Host `json:"hosts"`
	// ClientKey is the private key (OpenSSH PEM) authorised as root on
	// every host; KnownHosts pins every host's key.
	ClientKey  string `json:"client_key"`
	KnownHosts string `json:"known_hosts"`
}

// StateFile is where Up records what it made, under Config.Dir.
const StateFile = "hosts.json"

// Check reports what this machine lacks to make hosts.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("test hosts need root (network namespaces)")
	}
	for _, bin := range []string{"ip", "/usr/sbin/sshd", "unshare", "setsid"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("test hosts need %s (apt-get install iproute2 openssh-server util-linux)", bin)
		}
	}
	return nil
}

func (c Config) validate() (netip.Prefix, error) {
	if c.Dir == "" {
		return netip.Prefix{}, errors.New("hosts: Dir is required")
	}
	if c.Prefix == "" || len(c.Prefix) > 8 {
		return netip.Prefix{}, fmt.Errorf("hosts: Prefix %q must be 1 to 8 characters (Linux link names are at most 15)", c.Prefix)
	}
	subnet, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !subnet.Addr().Is4() || !subnet.Addr().IsPrivate() {
		return netip.Prefix{}, fmt.Errorf("hosts: Subnet %q must be a private IPv4 network such as 10.231.0.0/24", c.Subnet)
	}
	seen := map[string]bool{}
	for i, h := range c.Hosts {
		a, err := netip.ParseAddr(h.Address)
		if err != nil || !subnet.Contains(a) || a == subnet.Masked().Addr().Next() {
			return netip.Prefix{}, fmt.Errorf("hosts: hosts[%d] (%s): address %q must lie in %s and not be the bridge's first address", i, h.Name, h.Address, subnet)
		}
		if h.Name == "" || seen[h.Name] || seen[h.Address] {
			return netip.Prefix{}, fmt.Errorf("hosts: hosts[%d]: name %q and address %q must be set and unique", i, h.Name, h.Address)
		}
		seen[h.Name], seen[h.Address] = true, true
	}
	return subnet.Masked(), nil
}

// Up makes every host and starts its sshd. On error it removes what it
// made.
func Up(ctx context.Context, cfg Config) (_ *Harness, err error) {
	subnet, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := Check(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
		return nil, fmt.Errorf("hosts: %s exists: the hosts are up already (run down first)", filepath.Join(dir, StateFile))
	}
	h := &Harness{Dir: dir, Bridge: cfg.Prefix + "br", Subnet: subnet.String()}
	defer func() {
		if err != nil {
			h.Down()
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if h.ClientKey, err = writeKey(filepath.Join(dir, "id_ed25519")); err != nil {
		return nil, err
	}
	clientPub, err := publicKeyOf(h.ClientKey)
	if err != nil {
		return nil, err
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, clientPub, 0o600); err != nil {
		return nil, err
	}
	bridgeAddr := netip.PrefixFrom(bridgeAddress(subnet), subnet.Bits())
	if err := run(ctx, "ip", "link", "add", h.Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := h.save(); err != nil { // from here on, Down can find the bridge
		return nil, err
	}
	if err := run(ctx, "ip", "addr", "add", bridgeAddr.String(), "dev", h.Bridge); err != nil {
		return nil, err
	}
	if err := run(ctx, "ip", "link", "set", h.Bridge, "up"); err != nil {
		return nil, err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	var known []string
	for i, s := range cfg.Hosts {
		host := &Host{Name: s.Name, Address: s.Address, Namespace: cfg.Prefix + "-" + s.Name,
			Link: cfg.Prefix + "v" + strconv.Itoa(i), Root: filepath.Join(dir, s.Name, "root")}
		h.Hosts = append(h.Hosts, host)
		if err := h.save(); err != nil {
			return nil, err
		}
		if err := host.make(ctx, h.Bridge, subnet.Bits(), authorized); err != nil {
			return nil, fmt.Errorf("hosts: %s: %w", s.Name, err)
		}
		known = append(known, fmt.Sprintf("%s %s", s.Address, host.HostKey))
	}
	h.KnownHosts = filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(h.KnownHosts, []byte(strings.Join(known, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := h.save(); err != nil {
		return nil, err
	}
	for _, host := range h.Hosts {
		if err := waitListening(ctx, host.Address+":22", 10*time.Second); err != nil {
			return nil, fmt.Errorf("hosts: %s: sshd: %w (log: %s)", host.Name, err, filepath.Join(host.Root, "..", "sshd.log"))
		}
	}
	return h, nil
}

func (host *Host) make(ctx context.Context, bridge string, bits int, authorized string) error {
	for _, d := range []string{"etc/ssh", "run", "var/log", "tmp"} {
		if err := os.MkdirAll(filepath.Join(host.Root, d), 0o755); err != nil {
			return err
		}
	}
	hostKey, err := writeKey(filepath.Join(host.Root, "etc/ssh/ssh_host_ed25519_key"))
	if err != nil {
		return err
	}
	pub, err := publicKeyOf(hostKey)
	if err != nil {
		return err
	}
	host.HostKey = strings.TrimSpace(string(pub))
	steps := [][]string{
		{"ip", "netns", "add", host.Namespace},
		{"ip", "link", "add", host.Link, "type", "veth", "peer", "name", "eth0", "netns", host.Namespace},
		{"ip", "link", "set", host.Link, "master", bridge, "up"},
		{"ip", "-n", host.Namespace, "addr", "add", fmt.Sprintf("%s/%d", host.Address, bits), "dev", "eth0"},
		{"ip", "-n", host.Namespace, "link", "set", "eth0", "up"},
		{"ip", "-n", host.Namespace, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	conf := filepath.Join(host.Root, "etc/ssh/sshd_config")
	if err := os.WriteFile(conf, []byte(strings.Join([]string{
		"ListenAddress " + host.Address,
		"HostKey " + hostKey,
		"PidFile " + filepath.Join(host.Root, "run/sshd.pid"),
		"AuthorizedKeysFile " + authorized,
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"UsePAM no",
		"StrictModes no",
		"MaxSessions 64",
		"MaxStartups 64:30:128",
		"Subsystem sftp internal-sftp",
		"",
	}, "\n")), 0o600); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(host.Root, "..", "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	// unshare --uts gives the host its own hostname; setsid detaches it
	// from whoever ran Up, so the hosts outlive a `make up`.
	cmd := exec.Command("ip", "netns", "exec", host.Namespace, "unshare", "--uts", "sh", "-c",
		fmt.Sprintf("hostname %s && exec /usr/sbin/sshd -D -e -f %s", host.Name, conf))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	host.SSHPID = cmd.Process.Pid
	go cmd.Wait()
	return nil
}

// Load reads the state of hosts made by Up, from dir.
func Load(dir string) (*Harness, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, err
	}
	var h Harness
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("hosts: %s: %w", filepath.Join(dir, StateFile), err)
	}
	return &h, nil
}

func (h *Harness) save() error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, StateFile), b, 0o600)
}

// Processes lists the PIDs running in each host's namespace, sshd
// included.
func (h *Harness) Processes() map[string][]int {
	out := map[string][]int{}
	for _, host := range h.Hosts {
		b, _ := exec.Command("ip", "netns", "pids", host.Namespace).Output()
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out[host.Name] = append(out[host.Name], pid)
			}
		}
	}
	return out
}

// Down kills every process in the hosts' namespaces, removes the
// namespaces, links and bridge, and deletes the hosts' directories. It
// carries on past errors and returns the first.
func (h *Harness) Down() error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, host := range h.Hosts {
		for i := 0; i < 50; i++ {
			pids := h.pidsOf(host)
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGCONT)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(20 * time.Millisecond) // the kernel reaps asynchronously
		}
		if left := h.pidsOf(host); len(left) > 0 {
			note(fmt.Errorf("hosts: %s: processes %v survived SIGKILL", host.Name, left))
		}
		exec.Command("ip", "link", "del", host.Link).Run()
		if err := exec.Command("ip", "netns", "del", host.Namespace).Run(); err != nil && nsExists(host.Namespace) {
			note(fmt.Errorf("hosts: delete namespace %s: %w", host.Namespace, err))
		}
	}
	if h.Bridge != "" {
		if err := exec.Command("ip", "link", "del", h.Bridge).Run(); err != nil && linkExists(h.Bridge) {
			note(fmt.Errorf("hosts: delete bridge %s: %w", h.Bridge, err))
		}
	}
	for _, host := range h.Hosts {
		note(os.RemoveAll(filepath.Dir(host.Root)))
	}
	for _, f := range []string{StateFile, "id_ed25519", "authorized_keys", "known_hosts"} {
		if err := os.Remove(filepath.Join(h.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			note(err)
		}
	}
	return first
}

// BridgeAddress is this machine's address on the hosts' bridge: the
// subnet's first address, where a service the hosts must reach listens.
func (h *Harness) BridgeAddress() string {
	p, err := netip.ParsePrefix(h.Subnet)
	if err != nil {
		return ""
	}
	return bridgeAddress(p).String()
}

// bridgeAddress is the bridge's own address in subnet: its first.
func bridgeAddress(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next() }

func (h *Harness) pidsOf(host *Host) []int { return h.Processes()[host.Name] }

// Host returns the host called name, or nil.
func (h *Harness) Host(name string) *Host {
	for _, host := range h.Hosts {
		if host.Name == name {
			return host
		}
	}
	return nil
}

// Dial opens an SSH connection to a host as root, checking its pinned key.
func (h *Harness) Dial(name string) (*ssh.Client, error) {
	host := h.Host(name)
	if host == nil {
		return nil, fmt.Errorf("hosts: no host %q", name)
	}
	key, err := os.ReadFile(h.ClientKey)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		return nil, err
	}
	pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(host.HostKey))
	if err != nil {
		return nil, err
	}
	return ssh.Dial("tcp", net.JoinHostPort(host.Address, "22"), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(pinned), Timeout: 5 * time.Second,
	})
}

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

func linkExists(name string) bool { return exec.Command("ip", "link", "show", name).Run() == nil }

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// writeKey writes a new ed25519 private key in OpenSSH form and returns
// its path.
func writeKey(path string) (string, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

func publicKeyOf(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, err
	}
	return ssh.MarshalAuthorizedKey(signer.PublicKey()), nil
}

func waitListening(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
