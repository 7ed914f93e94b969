package etcdauth

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TokenTTL is how long an auth token of Lockplane's clusters lives: the
// ttl of their --auth-token (signed tokens; the embedded clusters and
// `lockplane up` both). A signed-in client renews its token well within it.
const TokenTTL = 10 * time.Minute

// AuthTokenFlag is etcd's --auth-token for signed tokens living ttl
// (TokenTTL in every cluster but a test's), keyed by the secret file at
// key: HMAC-SHA256 (HS256) with the file's bytes as the key. etcd checks
// a token's signature on every request, a lease renewal included, and an
// ECDSA (ES256) check cost a fifth of the CPU of a scale run; an HMAC
// check costs a few microseconds. Every member holds the key either way,
// since every member signs tokens, so HMAC trusts no one more.
func AuthTokenFlag(key string, ttl time.Duration) string {
	return fmt.Sprintf("jwt,priv-key=%s,sign-method=HS256,ttl=%s", key, ttl)
}

// renewEvery is how old a token may get before the next call signs in
// again: under half of TokenTTL, so a renewal has time to fail and retry.
var renewEvery = TokenTTL / 3

// WatchContext is ctx for opening an etcd watch on a client of New.
// clientv3 carries every watch whose context has the same outgoing
// metadata on one gRPC stream, and etcd checks a new watch against the
// token that stream was opened with, which expires: a long-lived watch
// would keep the stream, and every watch opened on it after the token's
// TTL would be cancelled. Tagged with the current period of renewEvery/3,
// a watch shares only a stream opened in that period, whose token is at
// most renewEvery old and good for most of its TTL. Harmless on a client
// without sign-in.
func WatchContext(ctx context.Context) context.Context {
	period := int64(max(renewEvery/3, time.Millisecond))
	return metadata.AppendToOutgoingContext(ctx, watchPeriodKey, strconv.FormatInt(time.Now().UnixNano()/period, 10))
}

// watchPeriodKey is the metadata WatchContext adds (etcd ignores it).
const watchPeriodKey = "lockplane-watch-period"

// New opens a client of cfg. With cfg.Username set it signs in once and
// sends that token with every call, signing in again only as the token
// ages (renewEvery) or after etcd refused it. clientv3's own sign-in
// (Username, Password) authenticates before every stream it opens, and
// the arbiter opens one per lease keepalive: each would cost etcd a
// password hash and a Raft entry.
func New(cfg clientv3.Config) (*clientv3.Client, error) {
	if cfg.Username == "" {
		return clientv3.New(cfg)
	}
	signer := cfg
	signer.Username, signer.Password = "", ""
	signCli, err := clientv3.New(signer)
	if err != nil {
		return nil, err
	}
	t := &tokens{user: cfg.Username, password: cfg.Password, auth: signCli}
	cfg.Username, cfg.Password = "", ""
	cfg.DialOptions = append(append([]grpc.DialOption{}, cfg.DialOptions...),
		grpc.WithPerRPCCredentials(t), grpc.WithChainUnaryInterceptor(t.unary), grpc.WithChainStreamInterceptor(t.stream))
	cli, err := clientv3.New(cfg)
	if err != nil {
		signCli.Close()
		return nil, err
	}
	go func() {
		<-cli.Ctx().Done() // Close
		signCli.Close()
	}()
	return cli, nil
}

// tokens is one user's auth token, as gRPC per-call credentials.
type tokens struct {
	user, password string
	auth           clientv3.Auth

	mu    sync.Mutex
	token string
	at    time.Time // when token was issued; zero: sign in on next use
}

// signInHook, when set (tests), runs on every sign-in.
var signInHook func()

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *tokens) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.at.IsZero() || time.Since(t.at) >= renewEvery {
		// Bounded by the call's own deadline, and by 5 s at most.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if signInHook != nil {
			signInHook()
		}
		resp, err := t.auth.Authenticate(sctx, t.user, t.password)
		switch {
		case errors.Is(err, rpctypes.ErrAuthNotEnabled):
			t.token = "" // etcd takes no token; AuthStatus tells the caller
		case err != nil:
			return nil, fmt.Errorf("etcd sign-in as %s: %w", t.user, err)
		default:
			t.token = resp.Token
		}
		t.at = time.Now()
	}
	if t.token == "" {
		return nil, nil
	}
	return map[string]string{rpctypes.TokenFieldNameGRPC: t.token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: the
// embedded clusters serve plain loopback; `up`'s serve TLS.
func (t *tokens) RequireTransportSecurity() bool { return false }

// refused forgets a token etcd refused (a cluster rebuilt with another
// key, a token past its TTL): the next call signs in again.
func (t *tokens) refused(err error) {
	switch rpctypes.Error(err) {
	case rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision, rpctypes.ErrUserEmpty:
		t.mu.Lock()
		t.at = time.Time{}
		t.mu.Unlock()
	}
}

func (t *tokens) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil {
		t.refused(err)
	}
	return err
}

func (t *tokens) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		t.refused(err)
		return nil, err
	}
	return refusedStream{s, t}, nil
}

// refusedStream notes a refusal that arrives on a stream (a keepalive's
// or a watch's answer).
type refusedStream struct {
	grpc.ClientStream
	t *tokens
}

func (s refusedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.t.refused(err)
	}
	return err
}
