package spire

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AgentPathTemplate names an agent by its node certificate's common name
// (spiffe://<td>/spire/agent/x509pop/<host>), so a host's agent ID, the
// parent of its entries, is known before the agent first attests.
const AgentPathTemplate = "/{{ .PluginName }}/{{ .Subject.CommonName }}"

// AgentID is the SPIFFE ID of the agent whose node certificate names host.
func AgentID(trustDomain, host string) string {
	return "spiffe://" + trustDomain + "/spire/agent/x509pop/" + host
}

// ServerConfig is a spire-server's configuration as Lockplane runs it:
// agents attest with x509pop node certificates signed by NodeCA, keys
// live on disk in DataDir, entries in SQLite or PostgreSQL.
type ServerConfig struct {
	TrustDomain string
	BindAddress string
	BindPort    int
	// SocketPath is the admin API's unix socket (entries are managed
	// through it, by whoever can open it on the server's host).
	SocketPath string
	DataDir    string
	// Postgres is the datastore's connection string; empty for SQLite in
	// DataDir.
	Postgres string
	// NodeCA is the PEM file of the CA that signs agents' node
	// certificates.
	NodeCA string
	// CATTL is the signing CA's lifetime; SVIDTTL the default X.509 SVID
	// lifetime (entries set their own).
	CATTL, SVIDTTL time.Duration
	// UpstreamCert and UpstreamKey are an intermediate of the trust
	// domain's root (UpstreamBundle) that signs SPIRE's own CA, so its
	// SVIDs verify against the root every profile already holds. Without
	// them SPIRE's CA is self-signed.
	UpstreamCert, UpstreamKey, UpstreamBundle string
}

// AgentConfig is a spire-agent's configuration: it attests with its
// host's node certificate and serves the Workload API on SocketPath,
// recognising workloads by unix user, group and binary path.
type AgentConfig struct {
	TrustDomain   string
	ServerAddress string
	ServerPort    int
	SocketPath    string
	DataDir       string
	// TrustBundle is the server's bundle (PEM), to trust it on first
	// contact.
	TrustBundle string
	// NodeCert and NodeKey are the host's x509pop certificate and key.
	NodeCert, NodeKey string
}

// Render is the server's HCL configuration.
func (c ServerConfig) Render() ([]byte, error) {
	if err := need(map[string]string{"trust domain": c.TrustDomain, "bind address": c.BindAddress, "socket path": c.SocketPath,
		"data dir": c.DataDir, "node CA": c.NodeCA}); err != nil {
		return nil, fmt.Errorf("spire server: %w", err)
	}
	if c.BindPort <= 0 || c.BindPort > 65535 {
		return nil, fmt.Errorf("spire server: bind port %d is not a port", c.BindPort)
	}
	if c.Postgres != "" {
		if err := need(map[string]string{"PostgreSQL connection string": c.Postgres}); err != nil {
			return nil, fmt.Errorf("spire server: %w", err)
		}
	}
	if up := c.UpstreamCert + c.UpstreamKey + c.UpstreamBundle; up != "" {
		if err := need(map[string]string{"upstream cert": c.UpstreamCert, "upstream key": c.UpstreamKey, "upstream bundle": c.UpstreamBundle}); err != nil {
			return nil, fmt.Errorf("spire server: an upstream authority needs its cert, key and bundle: %w", err)
		}
	}
	if c.SVIDTTL <= 0 || c.CATTL < MinCATTL(c.SVIDTTL) {
		return nil, fmt.Errorf("spire server: the CA TTL (%s) must be at least six times the SVID TTL (%s), which must be positive: SPIRE cuts SVIDs short otherwise", c.CATTL, c.SVIDTTL)
	}
	if err := checkSocket("socket path", c.SocketPath); err != nil {
		return nil, fmt.Errorf("spire server: %w", err)
	}
	dbType, conn := "sqlite3", c.DataDir+"/datastore.sqlite3"
	if c.Postgres != "" {
		dbType, conn = "postgres", c.Postgres
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server {\n")
	kv(&b, 1, "trust_domain", c.TrustDomain)
	kv(&b, 1, "bind_address", c.BindAddress)
	kv(&b, 1, "bind_port", strconv.Itoa(c.BindPort))
	kv(&b, 1, "socket_path", c.SocketPath)
	kv(&b, 1, "data_dir", c.DataDir)
	kv(&b, 1, "log_level", "INFO")
	kv(&b, 1, "ca_ttl", c.CATTL.String())
	kv(&b, 1, "default_x509_svid_ttl", c.SVIDTTL.String())
	fmt.Fprintf(&b, "}\nplugins {\n")
	plugin(&b, "DataStore", "sql", [][2]string{{"database_type", dbType}, {"connection_string", conn}})
	plugin(&b, "KeyManager", "disk", [][2]string{{"keys_path", c.DataDir + "/keys.json"}})
	plugin(&b, "NodeAttestor", "x509pop", [][2]string{{"ca_bundle_path", c.NodeCA}, {"agent_path_template", AgentPathTemplate}})
	if c.UpstreamCert != "" {
		plugin(&b, "UpstreamAuthority", "disk", [][2]string{{"cert_file_path", c.UpstreamCert}, {"key_file_path", c.UpstreamKey},
			{"bundle_file_path", c.UpstreamBundle}})
	}
	fmt.Fprintf(&b, "}\n")
	return []byte(b.String()), nil
}

// Render is the agent's HCL configuration.
func (c AgentConfig) Render() ([]byte, error) {
	if err := need(map[string]string{"trust domain": c.TrustDomain, "server address": c.ServerAddress, "socket path": c.SocketPath,
		"data dir": c.DataDir, "trust bundle": c.TrustBundle, "node certificate": c.NodeCert, "node key": c.NodeKey}); err != nil {
		return nil, fmt.Errorf("spire agent: %w", err)
	}
	if c.ServerPort <= 0 || c.ServerPort > 65535 {
		return nil, fmt.Errorf("spire agent: server port %d is not a port", c.ServerPort)
	}
	if err := checkSocket("socket path", c.SocketPath); err != nil {
		return nil, fmt.Errorf("spire agent: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "agent {\n")
	kv(&b, 1, "trust_domain", c.TrustDomain)
	kv(&b, 1, "server_address", c.ServerAddress)
	kv(&b, 1, "server_port", strconv.Itoa(c.ServerPort))
	kv(&b, 1, "socket_path", c.SocketPath)
	kv(&b, 1, "data_dir", c.DataDir)
	kv(&b, 1, "trust_bundle_path", c.TrustBundle)
	kv(&b, 1, "log_level", "INFO")
	fmt.Fprintf(&b, "}\nplugins {\n")
	plugin(&b, "KeyManager", "disk", [][2]string{{"directory", c.DataDir}})
	plugin(&b, "NodeAttestor", "x509pop", [][2]string{{"certificate_path", c.NodeCert}, {"private_key_path", c.NodeKey}})
	// discover_workload_path gives the unix:path selector.
	fmt.Fprintf(&b, "  WorkloadAttestor \"unix\" {\n    plugin_data {\n      discover_workload_path = true\n    }\n  }\n")
	fmt.Fprintf(&b, "}\n")
	return []byte(b.String()), nil
}

// MinCATTL is the shortest signing CA lifetime SPIRE issues SVIDs of ttl
// under in full: it prepares the next CA at a sixth of the current one's
// life left, and caps SVIDs at that (its MaxSVIDTTLForCATTL).
func MinCATTL(svidTTL time.Duration) time.Duration { return 6 * svidTTL }

// maxSocketPath is the longest unix socket path Linux binds (sun_path is
// 108 bytes with its NUL): a host root deep in a checkout can exceed it.
const maxSocketPath = 107

func checkSocket(name, p string) error {
	if len(p) > maxSocketPath {
		return fmt.Errorf("the %s %s is %d bytes, over the %d a unix socket allows: use a shorter host root", name, p, len(p), maxSocketPath)
	}
	return nil
}

// need checks the fields are set and printable.
func need(fields map[string]string) error {
	var missing []string
	for name, v := range fields {
		if v == "" {
			missing = append(missing, name)
		}
		if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 || strings.Contains(v, "${") {
			return fmt.Errorf("the %s %q holds a control character or ${, which SPIRE's HCL would not read as written", name, v)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return errors.New("required: " + strings.Join(missing, ", "))
	}
	return nil
}

// hclEscaper quotes what HCL would otherwise read as an escape; need has
// refused the rest.
var hclEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// kv writes key = "value".
func kv(b *strings.Builder, indent int, key, value string) {
	fmt.Fprintf(b, "%s%s = \"%s\"\n", strings.Repeat("  ", indent), key, hclEscaper.Replace(value))
}

func plugin(b *strings.Builder, kind, name string, data [][2]string) {
	fmt.Fprintf(b, "  %s %q {\n    plugin_data {\n", kind, name)
	for _, d := range data {
		kv(b, 3, d[0], d[1])
	}
	fmt.Fprintf(b, "    }\n  }\n")
}
