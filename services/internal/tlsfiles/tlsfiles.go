// Package tlsfiles builds TLS configurations from PEM files named by flags.
//
// Its errors name the flag.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files are a client's TLS files and the flags that named them.
type Files struct {
	// CA is the bundle that signed the server's certificate; the system
	// roots when empty.
	CA, CAFlag string
	// Cert and Key are the client's certificate and key, both or neither.
	Cert, Key, CertFlag, KeyFlag string
}

// Client is the TLS configuration of f; nil when f names no file.
func (f Files) Client() (*tls.Config, error) {
	if f.CA == "" && f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%s and %s: give both or neither", f.CertFlag, f.KeyFlag)
	}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", f.CertFlag, f.KeyFlag, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.CAFlag, errors.Unwrap(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no certificates in %s", f.CAFlag, f.CA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
