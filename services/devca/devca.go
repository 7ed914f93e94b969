// Package devca is the development trust domain: a local CA that issues
// SPIFFE X.509 SVIDs, standing in for SPIRE on a laptop or in tests.
//
// Its certificates have the shape SPIRE's have (one URI SAN, digital
// signature usage, both client and server auth), so everything that verifies
// them is the production code path. The CA key never leaves the process.
package devca

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/pki"
)

// CA issues SVIDs for one trust domain.
type CA struct {
	TrustDomain string
	ca          *pki.CA
}

// New creates a CA valid for ttl.
func New(trustDomain string, ttl time.Duration) (*CA, error) {
	ca, err := pki.NewCA(trustDomain+" dev CA", ttl, &url.URL{Scheme: "spiffe", Host: trustDomain})
	if err != nil {
		return nil, err
	}
	return &CA{TrustDomain: trustDomain, ca: ca}, nil
}

// BundlePEM is the trust bundle: the CA certificate.
func (ca *CA) BundlePEM() []byte { return ca.ca.CertPEM }

// Issue returns a PEM certificate and PKCS#8 key for spiffe://<td><path>.
func (ca *CA) Issue(path string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	return ca.ca.Issue(pki.Request{
		URIs: []*url.URL{{Scheme: "spiffe", Host: ca.TrustDomain, Path: path}},
		// Loopback SANs let plain TLS tools (curl, grpcurl) talk to it too.
		IPs:      []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames: []string{"localhost"},
		Server:   true, Client: true, TTL: ttl,
	})
}

// WriteBundle writes the bundle to dir/bundle.pem and returns its path.
func (ca *CA) WriteBundle(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "bundle.pem")
	return p, os.WriteFile(p, ca.ca.CertPEM, 0o644)
}

// WriteSVID issues an SVID for path and writes dir/svid.pem and dir/key.pem
// (the key readable by its owner only).
func (ca *CA) WriteSVID(dir, path string, ttl time.Duration) (identity.Files, error) {
	cert, key, err := ca.Issue(path, ttl)
	if err != nil {
		return identity.Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return identity.Files{}, err
	}
	f := identity.Files{Cert: filepath.Join(dir, "svid.pem"), Key: filepath.Join(dir, "key.pem"), TrustDomain: ca.TrustDomain}
	if err := os.WriteFile(f.Cert, cert, 0o644); err != nil {
		return f, err
	}
	return f, os.WriteFile(f.Key, key, 0o600)
}
