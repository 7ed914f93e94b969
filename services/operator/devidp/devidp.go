// Package devidp is a real OpenID provider for development and tests: it
// stands in for Keycloak, which signs operators in in production.
//
// It is built on the certified zitadel/oidc op package, so discovery, JWKS,
// the device authorization grant (RFC 8628) and the ID tokens are the
// library's protocol implementation; this package adds an in-memory store,
// users with passwords and TOTP secrets, and the sign-in form that the
// device flow's verification URI points to.
//
// Guarantees:
//   - The issuer is HTTPS on a loopback listener, with a certificate from a
//     development CA the provider makes (or is given); CAPEM is what clients
//     must trust. The op package refuses http issuers unless told to allow
//     them, and the verifier in production only ever sees https, so tests
//     take the same TLS path.
//   - Only the device authorization grant is offered, to one public client.
//   - The ID token's amr is ["pwd"] after a password-only sign-in and
//     ["pwd","otp","mfa"] only when the user also presented a valid TOTP
//     code for the current time; a wrong code refuses the sign-in.
//   - The role claim (Config.RoleClaim, "roles" by default) lists the
//     user's roles; users without roles get no such claim.
//   - The signing key (ES256) is made per Provider: a token from one
//     instance never verifies against another's keys.
//
// It is not hardened: no rate limit on passwords, no TOTP replay check, no
// CSRF token on the form. Never expose it beyond loopback.
package devidp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/pquerna/otp/totp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/lockplane/lockplane/services/operator/issuertrust"
	"github.com/lockplane/lockplane/services/pki"
)

// Provider is a running OpenID provider. Close stops it.
type Provider struct {
	cfg    Config
	store  *storage
	ca     *pki.CA
	issuer string
	srv    *http.Server
	ln     net.Listener
	done   chan error
}

// Start makes a provider (a new signing key, a TLS certificate, the users'
// missing TOTP secrets) and serves it until Close.
func Start(cfg Config) (*Provider, error) {
	cfg = cfg.withDefaults()
	users := make(map[string]*User, len(cfg.Users))
	for _, u := range cfg.Users {
		if u.Name == "" || u.Password == "" {
			return nil, errors.New("devidp: a user needs a name and a password")
		}
		if _, dup := users[u.Name]; dup {
			return nil, fmt.Errorf("devidp: user %q listed twice", u.Name)
		}
		if u.Subject == "" {
			u.Subject = "user-" + u.Name
		}
		if u.TOTPSecret == "" {
			k, err := totp.Generate(totp.GenerateOpts{Issuer: "lockplane-dev", AccountName: u.Name})
			if err != nil {
				return nil, fmt.Errorf("devidp: TOTP secret for %q: %w", u.Name, err)
			}
			u.TOTPSecret = k.Secret()
		}
		u.Roles = slices.Clone(u.Roles)
		users[u.Name] = &u
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := cfg.CA
	if ca == nil {
		if ca, err = pki.NewCA("lockplane dev OpenID provider CA", 24*time.Hour); err != nil {
			return nil, err
		}
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("devidp: Addr %q: %w", cfg.Addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !(ip.IsLoopback() || cfg.Private && ip.IsPrivate()) {
		return nil, fmt.Errorf("devidp: Addr %q is not a loopback address (nor a private one with Private set)", cfg.Addr)
	} else if !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Request{
		CommonName: "lockplane dev OpenID provider",
		DNSNames:   []string{"localhost"},
		IPs:        ips,
		Server:     true, TTL: 24 * time.Hour,
	})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("devidp: listen: %w", err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() && !(cfg.Private && ip.IsPrivate()) {
		ln.Close()
		return nil, fmt.Errorf("devidp: Addr %q is not loopback", cfg.Addr)
	}
	p := &Provider{cfg: cfg, ca: ca, ln: ln, done: make(chan error, 1)}
	p.issuer = "https://" + ln.Addr().String()
	p.store = &storage{
		cfg:   &p.cfg,
		users: users,
		client: &client{id: cfg.ClientID, idLifetime: cfg.IDTokenLifetime,
			allowScopes: map[string]bool{oidc.ScopeOpenID: true, oidc.ScopeProfile: true, oidc.ScopeEmail: true}},
		key:     signingKey{id: randomID(), key: ecKey},
		devices: map[string]*deviceAuth{},
		byCode:  map[string]string{},
		tokens:  map[string]accessToken{},
	}
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	opProvider, err := op.NewProvider(&op.Config{
		CryptoKey:      cryptoKey,
		AuthMethodPost: true,
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime:     cfg.DeviceCodeLifetime,
			PollInterval: cfg.PollInterval,
			UserFormPath: DeviceFormPath,
			UserCode:     op.UserCodeBase20,
		},
	}, p.store, op.StaticIssuer(p.issuer))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("devidp: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(DeviceFormPath, &deviceForm{store: p.store})
	mux.Handle("/", opProvider)
	p.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	go func() { p.done <- p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// Issuer is the issuer URL, https://127.0.0.1:PORT.
func (p *Provider) Issuer() string { return p.issuer }

// Addr is the listen address, for restarting a provider at the same issuer.
func (p *Provider) Addr() string { return p.ln.Addr().String() }

// CA is the development CA that signed the provider's TLS certificate.
func (p *Provider) CA() *pki.CA { return p.ca }

// CAPEM is the CA certificate clients must trust to reach the issuer.
func (p *Provider) CAPEM() []byte { return p.ca.CertPEM }

// ClientID is the public client's ID: the audience of its ID tokens.
func (p *Provider) ClientID() string { return p.cfg.ClientID }

// RoleClaim is the name of the claim listing roles.
func (p *Provider) RoleClaim() string { return p.cfg.RoleClaim }

// User returns a copy of the user called name (with its TOTP secret).
func (p *Provider) User(name string) (User, bool) {
	u, ok := p.store.users[name]
	if !ok {
		return User{}, false
	}
	c := *u
	c.Roles = slices.Clone(u.Roles)
	return c, true
}

// OTP returns the user's current TOTP code, as the user's authenticator app
// would show it.
func (p *Provider) OTP(name string) (string, error) {
	u, ok := p.store.users[name]
	if !ok {
		return "", fmt.Errorf("devidp: no user %q", name)
	}
	return totp.GenerateCode(u.TOTPSecret, time.Now())
}

// HTTPClient returns a client that trusts the provider's CA.
func (p *Provider) HTTPClient() *http.Client {
	c, err := issuertrust.HTTPClient(p.CAPEM(), 0)
	if err != nil {
		panic("devidp: own CA PEM unusable: " + err.Error()) // made by pki: cannot happen
	}
	return c
}

// Close stops serving and waits for the server to end.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if serr := <-p.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
