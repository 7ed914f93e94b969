package snapshot

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Signature is a manifest's signature by its cluster's snapshot signing
// key: who may write a cluster's snapshots is decided by who holds that
// key, not by who can write to the snapshot store (docs/dr.md).
type Signature struct {
	// KeyID names the public key that verifies it (KeyID).
	KeyID string `json:"key_id"`
	// Ed25519 is the signature over the manifest's JSON without its
	// signature, base64.
	Ed25519 string `json:"ed25519"`
}

// PublicKeyPrefix starts a public key's text form: "ed25519:" and the
// key's 32 bytes in standard base64.
const PublicKeyPrefix = "ed25519:"

// KeyID names a public key: the first 16 hex digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// FormatPublicKey is pub's text form, as the store stack exports it.
func FormatPublicKey(pub ed25519.PublicKey) string {
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey reads a public key's text form (FormatPublicKey).
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b64, ok := strings.CutPrefix(s, PublicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("snapshot signing key %q: want %sBASE64", s, PublicKeyPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("snapshot signing key %q: want %d bytes of base64 after %s", s, ed25519.PublicKeySize, PublicKeyPrefix)
	}
	return ed25519.PublicKey(b), nil
}

// GenerateKey makes a cluster's signing key: the private key as PEM
// (PKCS #8, as openssl writes it) and the public key's text form.
func GenerateKey() (privatePEM, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), FormatPublicKey(pub), nil
}

// ParsePrivateKey reads a signing key written by GenerateKey.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("snapshot signing key: want a PEM block PRIVATE KEY (PKCS #8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("snapshot signing key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("snapshot signing key: a %T, want an Ed25519 key", k)
	}
	return priv, nil
}

// signed is what a signature covers: m's JSON without its signature or
// the version the snapshot store found it at. The manifest object is this JSON
// with the signature added, so decoding it and encoding it again gives
// the same bytes (Sign checks that it does).
func (m Manifest) signed() ([]byte, error) {
	m.Signature, m.ObjectVersion = nil, ""
	return json.Marshal(m)
}

// Sign signs m with key. Every field, Object included, must be final.
func (m *Manifest) Sign(key ed25519.PrivateKey) error {
	if len(key) != ed25519.PrivateKeySize {
		return errors.New("snapshot: sign: no signing key")
	}
	msg, err := m.signed()
	if err != nil {
		return err
	}
	// What a reader will check is the decoded manifest encoded again: a
	// field that did not survive the trip would make a good snapshot look
	// forged, so refuse it here, where it is a bug, not at restore.
	var back Manifest
	if err := json.Unmarshal(msg, &back); err != nil {
		return err
	}
	if again, err := back.signed(); err != nil || string(again) != string(msg) {
		return fmt.Errorf("snapshot: sign: the manifest does not read back as written (%v)", err)
	}
	m.Signature = &Signature{KeyID: KeyID(key.Public().(ed25519.PublicKey)),
		Ed25519: base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))}
	return nil
}

// ErrUnsigned and ErrBadSignature are why a manifest is not trusted.
var (
	ErrUnsigned     = errors.New("it is not signed")
	ErrBadSignature = errors.New("its signature is not by a signing key of its cluster")
)

// CheckSignature reports whether m is signed by one of trusted, its
// cluster's keys. The error wraps ErrUnsigned or ErrBadSignature.
func (m Manifest) CheckSignature(trusted []ed25519.PublicKey) error {
	s := m.Signature
	if s == nil {
		return ErrUnsigned
	}
	sig, err := base64.StdEncoding.DecodeString(s.Ed25519)
	if err != nil {
		return fmt.Errorf("%w (the signature is not base64)", ErrBadSignature)
	}
	msg, err := m.signed()
	if err != nil {
		return err
	}
	for _, k := range trusted {
		if KeyID(k) == s.KeyID && ed25519.Verify(k, msg, sig) {
			return nil
		}
	}
	return fmt.Errorf("%w (key %q)", ErrBadSignature, s.KeyID)
}
