package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/lockplane/lockplane/services/pki"
)

// CAInputs is a private CA. Its key is a secret in the stack's state.
type CAInputs struct {
	CommonName    string   `json:"commonName"`
	ValidityHours int      `json:"validityHours"`
	URIs          []string `json:"uris,omitempty"`
}

// CertificateInputs is a certificate signed by a CA resource.
type CertificateInputs struct {
	CACertPem   string   `json:"caCertPem"`
	CAKeyPem    string   `json:"caKeyPem"`
	CommonName  string   `json:"commonName"`
	DNSNames    []string `json:"dnsNames,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
	URIs        []string `json:"uris,omitempty"`
	Server      bool     `json:"server,omitempty"`
	Client      bool     `json:"client,omitempty"`
	// CA makes an intermediate CA instead (pki.CA.IssueCA): a SPIRE
	// server's upstream authority.
	CA            bool `json:"ca,omitempty"`
	ValidityHours int  `json:"validityHours"`
}

func parseURIs(field string, list []string) ([]*url.URL, error) {
	var out []*url.URL
	for i, s := range list {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" {
			return nil, fmt.Errorf("%s[%d]: %q is not an absolute URI", field, i, s)
		}
		out = append(out, u)
	}
	return out, nil
}

// EtcdAuthTokenKeyInputs name the etcd cluster whose auth tokens the key
// pair signs: every member runs --auth-token jwt with it (its private key
// file's bytes as the HMAC key: etcdauth.AuthTokenFlag), so a
// token any member issued is checked by any other at once, whatever its
// Raft index. etcd's default "simple" tokens carry the index they were
// issued at and a member waits for its own to reach it, so a client signed
// in before a cluster is rebuilt or restored would hang on every call. The
// key is made once, at create; its private half is a secret in the state.
type EtcdAuthTokenKeyInputs struct {
	Cluster string `json:"cluster"`
}

func sum(b string) string {
	s := sha256.Sum256([]byte(b))
	return hex.EncodeToString(s[:])
}

func init() {
	register("CA", spec[CAInputs]{
		Validate: func(in *CAInputs) error {
			if in.CommonName == "" {
				return errors.New("commonName: is required")
			}
			if in.ValidityHours < 24 {
				return fmt.Errorf("validityHours: %d must be at least 24", in.ValidityHours)
			}
			_, err := parseURIs("uris", in.URIs)
			return err
		},
		Create: func(_ context.Context, _ *Env, in *CAInputs) (string, map[string]any, error) {
			uris, _ := parseURIs("uris", in.URIs)
			ca, err := pki.NewCA(in.CommonName, time.Duration(in.ValidityHours)*time.Hour, uris...)
			if err != nil {
				return "", nil, err
			}
			return sum(string(ca.CertPEM))[:16], map[string]any{"certPem": string(ca.CertPEM), "keyPem": string(ca.KeyPEM)}, nil
		},
		Secrets: []string{"keyPem"},
	})
	// No Update: a new cluster name is a new key (the members restart
	// with it, and clients sign in again when their token is refused).
	register("EtcdAuthTokenKey", spec[EtcdAuthTokenKeyInputs]{
		Validate: func(in *EtcdAuthTokenKeyInputs) error {
			if in.Cluster == "" {
				return errors.New("cluster: is required")
			}
			return nil
		},
		Create: func(_ context.Context, _ *Env, in *EtcdAuthTokenKeyInputs) (string, map[string]any, error) {
			priv, pub, err := pki.NewSigningKey()
			if err != nil {
				return "", nil, fmt.Errorf("%s: auth token key: %w", in.Cluster, err)
			}
			return in.Cluster + "-" + sum(string(pub))[:12], map[string]any{"publicKeyPem": string(pub), "privateKeyPem": string(priv)}, nil
		},
		Secrets: []string{"privateKeyPem"},
	})
	register("Certificate", spec[CertificateInputs]{
		Validate: func(in *CertificateInputs) error {
			if in.CACertPem != "" && in.CAKeyPem != "" {
				if _, err := pki.LoadCA([]byte(in.CACertPem), []byte(in.CAKeyPem)); err != nil {
					return fmt.Errorf("caCertPem, caKeyPem: %v", err)
				}
			}
			if in.CA && (in.Server || in.Client || len(in.DNSNames)+len(in.IPAddresses) > 0) {
				return errors.New("ca: an intermediate CA is neither a server nor a client and names no host")
			}
			if !in.Server && !in.Client && !in.CA {
				return errors.New("server, client: at least one must be true")
			}
			if in.ValidityHours < 1 {
				return fmt.Errorf("validityHours: %d must be at least 1", in.ValidityHours)
			}
			for i, ip := range in.IPAddresses {
				if net.ParseIP(ip) == nil {
					return fmt.Errorf("ipAddresses[%d]: %q is not an IP address", i, ip)
				}
			}
			_, err := parseURIs("uris", in.URIs)
			return err
		},
		Create: func(_ context.Context, _ *Env, in *CertificateInputs) (string, map[string]any, error) {
			ca, err := pki.LoadCA([]byte(in.CACertPem), []byte(in.CAKeyPem))
			if err != nil {
				return "", nil, err
			}
			uris, _ := parseURIs("uris", in.URIs)
			var ips []net.IP
			for _, ip := range in.IPAddresses {
				ips = append(ips, net.ParseIP(ip))
			}
			var cert, key []byte
			if in.CA {
				cert, key, err = ca.IssueCA(in.CommonName, time.Duration(in.ValidityHours)*time.Hour, uris...)
			} else {
				cert, key, err = ca.Issue(pki.Request{CommonName: in.CommonName, DNSNames: in.DNSNames, IPs: ips, URIs: uris,
					Server: in.Server, Client: in.Client, TTL: time.Duration(in.ValidityHours) * time.Hour})
			}
			if err != nil {
				return "", nil, err
			}
			return sum(string(cert))[:16], map[string]any{"certPem": string(cert), "keyPem": string(key)}, nil
		},
		Secrets: []string{"keyPem", "caKeyPem"},
	})
}
