// Package issuertrust builds the HTTP client that talks to an OpenID
// provider: the operator sign-in client (lockctl login), the Admin API's
// token verifier and the development provider's test agent all use it, so
// they trust the issuer the same way.
package issuertrust

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"time"
)

// DefaultTimeout bounds every request of a client made with a zero timeout:
// discovery, JWKS and token requests never hang on an unresponsive issuer.
const DefaultTimeout = 10 * time.Second

// HTTPClient returns a client for the issuer. When caPEM is empty it trusts
// the system roots (a public Keycloak); otherwise it trusts only the
// certificates in caPEM (a private CA, the development provider's). Every
// request is bounded by timeout (DefaultTimeout if zero). TLS 1.2 is the
// minimum.
func HTTPClient(caPEM []byte, timeout time.Duration) (*http.Client, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("issuertrust: CA PEM: no certificate in it")
		}
		tlsConf.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}
