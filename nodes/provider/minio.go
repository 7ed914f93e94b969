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

// minioRoot is a MinIO server reached as its root user, which is how
// deploy steps (the archive's and the vault's buckets and users) set it
// up: URL is https with its certificate signed by CACertPem, or http on
// loopback (tests).
type minioRoot struct {
	URL, CACertPem, User, Password string
}

// validate names the first field of r that is wrong.
func (r minioRoot) validate() error {
	u, err := url.Parse(r.URL)
	switch {
	case err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil:
		return fmt.Errorf("url: want MinIO's base URL, e.g. https://minio:9000, got %q", r.URL)
	case u.Scheme == "https" && r.CACertPem == "":
		return errors.New("caCertPem: is required with an https url")
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return errors.New("url: must be https (plain http only on loopback)")
	case u.Scheme != "https" && u.Scheme != "http":
		return fmt.Errorf("url: scheme %q, want https", u.Scheme)
	case r.User == "" || r.Password == "":
		return errors.New("rootUser, rootPassword: are required")
	}
	return nil
}

// clients are an S3 and an admin client of MinIO's root user.
func (r minioRoot) clients() (*minio.Client, *madmin.AdminClient, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, nil, err
	}
	creds := credentials.NewStaticV4(r.User, r.Password, "")
	secure := u.Scheme == "https"
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if secure {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(r.CACertPem)) {
			return nil, nil, errors.New("caCertPem: no certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	s3, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: secure, Transport: tr})
	if err != nil {
		return nil, nil, err
	}
	adm, err := madmin.NewWithOptions(u.Host, &madmin.Options{Creds: creds, Secure: secure, Transport: tr})
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
