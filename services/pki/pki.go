// Package pki is Lockplane's one way to make certificates: a private CA
// (ECDSA P-256) and the leaf certificates it signs, for etcd's peer and
// client TLS, the arbiter's mTLS and SPIFFE SVIDs alike. Keys are PKCS#8
// PEM; callers decide where they go, and must treat them as secrets.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// CA signs certificates.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA named commonName, valid for ttl. uris
// become its URI SANs (a SPIFFE trust domain's CA carries spiffe://td).
func NewCA(commonName string, ttl time.Duration, uris ...*url.URL) (*CA, error) {
	if commonName == "" || ttl <= 0 {
		return nil, errors.New("pki: a CA needs a common name and a positive lifetime")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Lockplane"}, CommonName: commonName},
		URIs:                  uris,
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
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return LoadCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// LoadCA reads a CA made by NewCA from its PEM certificate and key.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("pki: CA certificate: not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("pki: CA certificate: not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("pki: CA key: not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("pki: CA key does not match the CA certificate")
	}
	return &CA{cert: cert, key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Request describes a leaf certificate.
type Request struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []*url.URL
	// Server and Client choose the extended key usages.
	Server, Client bool
	TTL            time.Duration
}

// Issue signs a new key for req and returns the certificate and key PEM.
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	if !req.Server && !req.Client {
		return nil, nil, errors.New("pki: a certificate must be for a server, a client or both")
	}
	if req.TTL <= 0 {
		return nil, nil, errors.New("pki: a certificate needs a positive lifetime")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	var usages []x509.ExtKeyUsage
	if req.Server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	notAfter := time.Now().Add(req.TTL)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Lockplane"}, CommonName: req.CommonName},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
		URIs:         req.URIs,
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageKeyAgreement,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// IssueCA signs an intermediate CA under ca for a SPIRE server's upstream
// authority, so the SVIDs SPIRE signs verify against ca's bundle. Its
// path length is one: SPIRE signs its own rotating CA with it, and that
// CA signs the SVIDs.
func (ca *CA) IssueCA(commonName string, ttl time.Duration, uris ...*url.URL) (certPEM, keyPEM []byte, err error) {
	if commonName == "" || ttl <= 0 {
		return nil, nil, errors.New("pki: a CA needs a common name and a positive lifetime")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	notAfter := time.Now().Add(ttl)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Lockplane"}, CommonName: commonName},
		URIs:                  uris,
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            1,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("pki: no randomness: %v", err))
	}
	return n
}

// NewSigningKey makes an ECDSA P-256 key pair for signing tokens (ES256),
// as PEM: the private key PKCS#8 ("PRIVATE KEY"), the public key PKIX
// ("PUBLIC KEY"). etcd's --auth-token jwt reads both forms.
func NewSigningKey() (privatePEM, publicPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if privatePEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return privatePEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}
