// Package profile is how lockctl and other clients find an arbiter and the
// identity to call it with: a JSON file naming the endpoint, the arbiter's
// SPIFFE ID, the trust bundle and one or more SVIDs. `make dev` writes one
// to .lockplane/dev/profile.json; a real deployment ships its own.
package profile

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
)

// DevPath is where the embedded default writes its profile, relative to the
// directory `make dev` ran in.
const DevPath = ".lockplane/dev/profile.json"

// EnvVar names a profile file to use instead of the dev one.
const EnvVar = "LOCKPLANE_PROFILE"

// Profile describes one deployment from a client's side.
type Profile struct {
	Endpoint        string              `json:"endpoint"`
	ServerID        string              `json:"server_id"`
	TrustDomain     string              `json:"trust_domain"`
	Bundle          string              `json:"bundle"`
	Identities      map[string]Identity `json:"identities"`
	DefaultIdentity string              `json:"default_identity"`
	// Metrics is the arbiter's Prometheus endpoint, when known.
	Metrics string `json:"metrics,omitempty"`

	dir string
}

// Identity is one SVID on disk, or a SPIRE agent's Workload API that
// issues it (and rotates it).
type Identity struct {
	SPIFFEID string `json:"spiffe_id"`
	Cert     string `json:"cert,omitempty"`
	Key      string `json:"key,omitempty"`
	// SPIFFESocket is the Workload API, unix:///path, instead of Cert
	// and Key.
	SPIFFESocket string `json:"spiffe_socket,omitempty"`
}

// workloadAPIWait bounds the wait for a Workload API's first SVID.
const workloadAPIWait = 30 * time.Second

// Find returns the profile path to use: $LOCKPLANE_PROFILE, else the dev
// profile in the current directory or the nearest parent that has one, up
// to the repository's root (the first directory holding .git), as git
// looks for its own. The walk never enters a directory anyone may write
// (such as /tmp), and a profile found must be the caller's own: a
// profile names the server to trust, so one planted by another user
// would hand out forged grants. When there is none, the error names
// every path tried.
func Find() (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	var tried []string
	stopped := ""
	for {
		if fi, err := os.Stat(dir); err == nil && anyoneMayWrite(fi) {
			stopped = fmt.Sprintf(" (the search stopped at %s, which anyone may write)", dir)
			break
		}
		p := filepath.Join(dir, DevPath)
		if fi, err := os.Stat(p); err == nil {
			if !ownedByCaller(fi) || othersMayWrite(fi) {
				return "", fmt.Errorf("profile %s: not this user's own (another owner, or writable by others): refusing a profile that names the server to trust", p)
			}
			return p, nil
		}
		tried = append(tried, p)
		_, gitErr := os.Stat(filepath.Join(dir, ".git"))
		parent := filepath.Dir(dir)
		if gitErr == nil || parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("no profile: %s is unset and there is no dev profile at %s%s: run `make dev` for the embedded default, set %s, "+
		"or pass --profile or --endpoint with --tls-* flags", EnvVar, strings.Join(tried, ", "), stopped, EnvVar)
}

// Load reads a profile; relative file paths in it are relative to its file.
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("profile %s: %w", path, err)
	}
	p.dir = filepath.Dir(path)
	for field, v := range map[string]string{"endpoint": p.Endpoint, "server_id": p.ServerID, "trust_domain": p.TrustDomain, "bundle": p.Bundle} {
		if v == "" {
			return nil, fmt.Errorf("profile %s: field %q is required", path, field)
		}
	}
	return &p, nil
}

// Save writes the profile as JSON, readable by its owner only.
func (p *Profile) Save(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (p *Profile) abs(f string) string {
	if f == "" || filepath.IsAbs(f) {
		return f
	}
	return filepath.Join(p.dir, f)
}

// Names lists the profile's identities.
func (p *Profile) Names() []string {
	var ns []string
	for n := range p.Identities {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// Source loads the named identity ("" is the default one).
func (p *Profile) Source(name string) (identity.Source, error) {
	if name == "" {
		name = p.DefaultIdentity
	}
	id, ok := p.Identities[name]
	if !ok {
		return nil, fmt.Errorf("profile: no identity %q (have %v)", name, p.Names())
	}
	if id.SPIFFESocket != "" {
		ctx, cancel := context.WithTimeout(context.Background(), workloadAPIWait)
		defer cancel()
		return identity.FromWorkloadAPIAs(ctx, id.SPIFFESocket, id.SPIFFEID)
	}
	return identity.FromFiles(identity.Files{Cert: p.abs(id.Cert), Key: p.abs(id.Key), Bundle: p.abs(p.Bundle), TrustDomain: p.TrustDomain})
}
