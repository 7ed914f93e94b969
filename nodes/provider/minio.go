package provider

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Endpoint is a MinIO (S3) server and a user of it, as a deploy step
// reaches it: URL is https with its certificate signed by CACertPem, or
// http on loopback (tests).
type s3Endpoint struct {
	URL, CACertPem, User, Password string
}

// check names the first field that is wrong, by the names the resource's
// inputs give the URL and the CA.
func (e s3Endpoint) check(urlField, caField string) error {
	u, err := url.Parse(e.URL)
	switch {
	case err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil:
		return fmt.Errorf("%s: want the server's base URL, e.g. https://minio:9000, got %q", urlField, e.URL)
	case u.Scheme == "https" && e.CACertPem == "":
		return fmt.Errorf("%s: is required with an https %s", caField, urlField)
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return fmt.Errorf("%s: must be https (plain http only on loopback)", urlField)
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("%s: scheme %q, want https", urlField, u.Scheme)
	}
	return nil
}

// options are the endpoint's client options: its user, and its CA for
// https. They serve the S3 and the admin client alike.
func (e s3Endpoint) options() (host string, creds *credentials.Credentials, secure bool, tr *http.Transport, err error) {
	u, err := url.Parse(e.URL)
	if err != nil {
		return "", nil, false, nil, err
	}
	secure = u.Scheme == "https"
	tr = http.DefaultTransport.(*http.Transport).Clone()
	if secure {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(e.CACertPem)) {
			return "", nil, false, nil, errors.New("the CA certificate given holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return u.Host, credentials.NewStaticV4(e.User, e.Password, ""), secure, tr, nil
}

// client is the endpoint's S3 client; it does not connect.
func (e s3Endpoint) client() (*minio.Client, error) {
	host, creds, secure, tr, err := e.options()
	if err != nil {
		return nil, err
	}
	return minio.New(host, &minio.Options{Creds: creds, Secure: secure, Transport: tr})
}

// minioRoot is a MinIO server reached as its root user, which is how
// deploy steps (the archive's and the snapshot store's buckets and users) set it
// up.
type minioRoot s3Endpoint

// validate names the first field of r that is wrong.
func (r minioRoot) validate() error {
	if err := s3Endpoint(r).check("url", "caCertPem"); err != nil {
		return err
	}
	if r.User == "" || r.Password == "" {
		return errors.New("rootUser, rootPassword: are required")
	}
	return nil
}

// clients are an S3 and an admin client of MinIO's root user.
func (r minioRoot) clients() (*minio.Client, *madmin.AdminClient, error) {
	s3, err := s3Endpoint(r).client()
	if err != nil {
		return nil, nil, err
	}
	host, creds, secure, tr, err := s3Endpoint(r).options()
	if err != nil {
		return nil, nil, err
	}
	adm, err := madmin.NewWithOptions(host, &madmin.Options{Creds: creds, Secure: secure, Transport: tr})
	if err != nil {
		return nil, nil, err
	}
	return s3, adm, nil
}

// setMinIOUser creates or updates user (its password, enabled) with a
// canned policy of its own name, and gives it that policy and only that
// one. what names the user's job in errors.
func setMinIOUser(ctx context.Context, adm *madmin.AdminClient, what, user, password string, policy []byte) error {
	ctx, cancel := context.WithTimeout(ctx, minioCall)
	defer cancel()
	if err := adm.AddCannedPolicy(ctx, user, policy); err != nil {
		return fmt.Errorf("%s policy %s: %w", what, user, err)
	}
	if err := adm.AddUser(ctx, user, password); err != nil {
		return fmt.Errorf("%s user %s: %w", what, user, err)
	}
	info, err := adm.GetUserInfo(ctx, user)
	if err != nil {
		return fmt.Errorf("%s user %s: %w", what, user, err)
	}
	var others []string
	have := false
	for _, p := range strings.Split(info.PolicyName, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case user:
			have = true
		default:
			others = append(others, p)
		}
	}
	if !have {
		if _, err := adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{user}, User: user}); err != nil {
			return fmt.Errorf("%s user %s: attach its policy: %w", what, user, err)
		}
	}
	if len(others) > 0 {
		if _, err := adm.DetachPolicy(ctx, madmin.PolicyAssociationReq{Policies: others, User: user}); err != nil {
			return fmt.Errorf("%s user %s: detach %v: %w", what, user, others, err)
		}
	}
	return nil
}

// removeMinIOUser removes user and its policy; a user or server gone
// already is not an error (a MinIO whose host is gone has no users).
func removeMinIOUser(ctx context.Context, adm *madmin.AdminClient, what, user string) error {
	ctx, cancel := context.WithTimeout(ctx, minioCall)
	defer cancel()
	gone := func(err error) bool {
		code := madmin.ToErrorResponse(err).Code
		return err == nil || code == "" || code == "XMinioAdminNoSuchUser" || code == "XMinioAdminNoSuchPolicy"
	}
	if err := adm.RemoveUser(ctx, user); !gone(err) {
		return fmt.Errorf("%s user %s: remove: %w", what, user, err)
	}
	if err := adm.RemoveCannedPolicy(ctx, user); !gone(err) {
		return fmt.Errorf("%s policy %s: remove: %w", what, user, err)
	}
	return nil
}

// minioUserHasItsPolicy reports whether user exists, is enabled and has
// its own policy; an error is MinIO not answering about it.
func minioUserHasItsPolicy(ctx context.Context, adm *madmin.AdminClient, user string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, minioCall)
	defer cancel()
	info, err := adm.GetUserInfo(ctx, user)
	switch {
	case madmin.ToErrorResponse(err).Code == "XMinioAdminNoSuchUser":
		return false, nil
	case err != nil:
		return false, err
	}
	return info.Status == madmin.AccountEnabled && slices.Contains(strings.Split(info.PolicyName, ","), user), nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
