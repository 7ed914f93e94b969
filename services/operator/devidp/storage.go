package devidp

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// errUnsupported answers every op.Storage method of a grant this provider
// does not offer (authorization code, refresh, client credentials, JWT
// profile): the op package then refuses the request.
var errUnsupported = errors.New("devidp: only the device authorization grant is supported")

// storage is the provider's in-memory op.Storage and
// op.DeviceAuthorizationStorage. It holds the users, the one public client,
// the signing key, pending device authorizations and issued access tokens.
type storage struct {
	cfg    *Config
	users  map[string]*User // by name
	client *client
	key    signingKey

	mu      sync.Mutex
	devices map[string]*deviceAuth // by device code
	byCode  map[string]string      // user code -> device code
	tokens  map[string]accessToken // by token ID
}

// deviceAuth is one device authorization request (RFC 8628) and, once the
// user has signed in at the form, its outcome.
type deviceAuth struct {
	state    op.DeviceAuthorizationState
	userCode string
}

type accessToken struct {
	subject string
	expires time.Time
}

var (
	_ op.Storage                    = (*storage)(nil)
	_ op.DeviceAuthorizationStorage = (*storage)(nil)
	_ op.CanSetUserinfoFromRequest  = (*storage)(nil)
)

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// --- device authorization (RFC 8628) ---

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for dc, d := range s.devices { // purge expired flows so user codes stay unique and few
		if now.After(d.state.Expires) {
			delete(s.byCode, d.userCode)
			delete(s.devices, dc)
		}
	}
	if _, ok := s.byCode[userCode]; ok {
		return op.ErrDuplicateUserCode
	}
	s.devices[deviceCode] = &deviceAuth{
		userCode: userCode,
		state:    op.DeviceAuthorizationState{ClientID: clientID, Scopes: scopes, Expires: expires},
	}
	s.byCode[userCode] = deviceCode
	return nil
}

func (s *storage) GetDeviceAuthorizatonState(_ context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[deviceCode]
	if !ok || d.state.ClientID != clientID {
		return nil, errors.New("devidp: unknown device code")
	}
	st := d.state // a copy: the op package may append to its audience
	if st.Done || st.Denied {
		// A device code is redeemed once: the poll that sees the outcome ends the flow.
		delete(s.byCode, d.userCode)
		delete(s.devices, deviceCode)
	}
	return &st, nil
}

// pendingDevice returns the scopes of the pending, unexpired flow with userCode.
func (s *storage) pendingDevice(userCode string) (clientID string, scopes []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.pendingLocked(userCode)
	if err != nil {
		return "", nil, err
	}
	return d.state.ClientID, slices.Clone(d.state.Scopes), nil
}

func (s *storage) pendingLocked(userCode string) (*deviceAuth, error) {
	d, ok := s.devices[s.byCode[userCode]]
	if !ok || time.Now().After(d.state.Expires) {
		return nil, errors.New("unknown or expired user code")
	}
	if d.state.Done || d.state.Denied {
		return nil, errors.New("user code already used")
	}
	return d, nil
}

// completeDevice records the user's decision on the flow with userCode.
func (s *storage) completeDevice(userCode, subject string, amr []string, allow bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.pendingLocked(userCode)
	if err != nil {
		return err
	}
	d.state.Subject = subject
	d.state.AMR = amr
	d.state.AuthTime = time.Now()
	d.state.Done, d.state.Denied = allow, !allow
	return nil
}

// --- tokens ---

func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	id := randomID()
	exp := time.Now().Add(s.cfg.AccessTokenLifetime)
	s.mu.Lock()
	s.tokens[id] = accessToken{subject: req.GetSubject(), expires: exp}
	s.mu.Unlock()
	return id, exp, nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errUnsupported
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, errUnsupported
}

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(_ context.Context, tokenOrID, _, _ string) *oidc.Error {
	s.mu.Lock()
	delete(s.tokens, tokenOrID)
	s.mu.Unlock()
	return nil
}

// --- authorization code flow: not offered ---

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errUnsupported
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errUnsupported }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return nil }

// --- keys ---

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.ES256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.key}}, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errUnsupported
}

// --- clients ---

func (s *storage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	if clientID != s.client.id {
		return nil, fmt.Errorf("devidp: unknown client %q", clientID)
	}
	return s.client, nil
}

func (s *storage) AuthorizeClientIDSecret(context.Context, string, string) error {
	return errors.New("devidp: the client is public and has no secret")
}

// --- claims ---

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil // deprecated by the op package; SetUserinfoFromRequest does the work
}

// SetUserinfoFromRequest puts the user's profile, the role claim and the
// acr into the ID token.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, scopes []string) error {
	if err := s.setUserinfo(info, req.GetSubject(), scopes); err != nil {
		return err
	}
	if acr := s.cfg.acrFor(req.GetAMR()); acr != "" {
		info.AppendClaims("acr", acr)
	}
	return nil
}

func (s *storage) setUserinfo(info *oidc.UserInfo, subject string, scopes []string) error {
	u := s.userBySubject(subject)
	if u == nil {
		return fmt.Errorf("devidp: unknown subject %q", subject)
	}
	info.Subject = u.Subject
	for _, sc := range scopes {
		switch sc {
		case oidc.ScopeProfile:
			info.Name = u.Name
			info.PreferredUsername = u.Name
		case oidc.ScopeEmail:
			info.Email = u.Email
			info.EmailVerified = oidc.Bool(u.Email != "")
		}
	}
	if len(u.Roles) > 0 {
		info.AppendClaims(s.cfg.RoleClaim, slices.Clone(u.Roles))
	}
	return nil
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	s.mu.Lock()
	t, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || t.subject != subject || time.Now().After(t.expires) {
		return errors.New("devidp: access token unknown or expired")
	}
	return s.setUserinfo(info, subject, []string{oidc.ScopeProfile, oidc.ScopeEmail})
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errUnsupported
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errUnsupported
}

func (s *storage) Health(context.Context) error { return nil }

func (s *storage) userBySubject(subject string) *User {
	for _, u := range s.users {
		if u.Subject == subject {
			return u
		}
	}
	return nil
}

// --- the signing key (ES256, made per provider instance) ---

type signingKey struct {
	id  string
	key *ecdsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.ES256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }
