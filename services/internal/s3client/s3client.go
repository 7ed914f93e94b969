// Package s3client makes the MinIO (S3) clients the services are given by
// flags: a base URL, a user from a credentials file and, for https, the
// CA that signed the server. Each refusal names the flag that was wrong.
package s3client

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/lockplane/lockplane/services/internal/credfile"
	"github.com/lockplane/lockplane/services/internal/tlsfiles"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Endpoint is a server and how to reach it, with the flags that named
// each part (for errors).
type Endpoint struct {
	// URL is the base URL, e.g. https://minio:9000: no path, no user.
	URL, URLFlag string
	// CA is the bundle that signed an https server's certificate; the
	// system roots when empty. Refused with http.
	CA, CAFlag string
	// User is the access key and secret key.
	User credfile.Account
}

// Client checks e and makes its client. It does not connect.
func (e Endpoint) Client() (*minio.Client, error) {
	u, err := url.Parse(e.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
		return nil, fmt.Errorf("%s: want MinIO's base URL without a path or credentials, e.g. https://minio:9000, got %q", e.URLFlag, redacted(e.URL))
	}
	opts := &minio.Options{Creds: credentials.NewStaticV4(e.User.User, e.User.Password, ""), Secure: u.Scheme == "https"}
	if e.CA != "" {
		if u.Scheme != "https" {
			return nil, fmt.Errorf("%s: only with an https %s", e.CAFlag, e.URLFlag)
		}
		cfg, err := tlsfiles.Files{CA: e.CA, CAFlag: e.CAFlag}.Client()
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cfg
		opts.Transport = tr
	}
	cli, err := minio.New(u.Host, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.URLFlag, err)
	}
	return cli, nil
}

// redacted is a URL for an error: its password hidden.
func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
