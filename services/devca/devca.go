// Package devca is the development trust domain: a local CA that issues
// SPIFFE X.509 SVIDs, standing in for SPIRE on a laptop or in tests.
//
// Its certificates have the shape SPIRE's have (one URI SAN, digital
// signature usage, both client and server auth), so everything that verifies
// them is the production code path. The CA key never leaves the process.
package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/lockplane/lockplane/services/identity"
)

// CA issues SVIDs for one trust domain.
type CA struct {
	TrustDomain string
	cert        *x509.Certificate
	key         *ecdsa.PrivateKey
	certPEM     []byte
}

// New creates a CA valid for ttl.
func New(trustDomain string, ttl time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	td := url.URL{Scheme: "spiffe", Host: trustDomain}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Lockplane development"}, CommonName: trustDomain + " dev CA"},
		URIs:                  []*url.URL{&td},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(ttl),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{TrustDomain: trustDomain, cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// BundlePEM is the trust bundle: the CA certificate.
func (ca *CA) BundlePEM() []byte { return ca.certPEM }

// Issue returns a PEM certificate and PKCS#8 key for spiffe://<td><path>.
func (ca *CA) Issue(path string, ttl time.Duration) (certPEM, keyPEM []byte, err error) {
	id := &url.URL{Scheme: "spiffe", Host: ca.TrustDomain, Path: path}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Lockplane development"}},
		URIs:         []*url.URL{id},
		// Loopback SANs let plain TLS tools (curl, grpcurl) talk to it too.
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
		NotBefore:   time.Now().Add(-time.Minute),
		NotAfter:    time.Now().Add(ttl),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// WriteBundle writes the bundle to dir/bundle.pem and returns its path.
func (ca *CA) WriteBundle(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "bundle.pem")
	return p, os.WriteFile(p, ca.certPEM, 0o644)
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

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("devca: no randomness: %v", err))
	}
	return n
}
