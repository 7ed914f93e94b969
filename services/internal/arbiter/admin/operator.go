package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Operator is a person signed in through OpenID Connect, as an
// OperatorVerifier found them in a verified ID token. Issuer and Subject
// together name the person: two-person actions compare both.
type Operator struct {
	Issuer, Subject string
	// Name is the person's account at the issuer (the verifier's account
	// claim, preferred_username by default). The operator SVID a call
	// arrives on must name it as its last segment (bound): another
	// person's token on one's connection is refused. The two-person rule
	// compares Issuer and Subject, never Name.
	Name string
}

// same reports whether o and p are the same person.
func (o Operator) same(p Operator) bool { return o.Issuer == p.Issuer && o.Subject == p.Subject }

// String is how logs and records name the operator.
func (o Operator) String() string {
	if o.Name != "" {
		return o.Name + " (" + o.Issuer + " " + o.Subject + ")"
	}
	return o.Issuer + " " + o.Subject
}

// OperatorVerifier verifies an operator's raw OpenID Connect ID token:
// signature, issuer, audience, expiry, the operator role and the second
// factor (ADR-20). Its error says which rule failed; it is shown to the
// caller, so it must never quote the token.
//
// The go-oidc verifier and the development OpenID provider live under
// services/operator and are wired into the arbiter's Config there; this
// package's tests use a small fake, and the integration test against the
// real provider comes with that wiring.
type OperatorVerifier interface {
	Verify(ctx context.Context, rawIDToken string) (Operator, error)
}

// operatorHeader is the gRPC metadata key the ID token arrives under, as
// "Bearer <token>", on the (still mTLS) admin connection.
const operatorHeader = "authorization"

// errNoBearer is a call without an operator's ID token.
var errNoBearer = errors.New(`no operator ID token: send gRPC metadata "authorization: Bearer <ID token>" (lockctl reads it from --id-token-file; run lockctl login)`)

// bearer is the raw ID token of ctx's call.
func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(operatorHeader)
	if len(vals) != 1 {
		return "", errNoBearer
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", errNoBearer
	}
	return strings.TrimSpace(tok), nil
}

// signedInOperator is the operator behind a call that changes who may
// write: a force-release or an epoch advance. It needs the mTLS identity
// of the connection and a verified ID token; a SPIFFE operator identity
// alone serves only the read-only admin calls. Every refusal names the
// rule that failed in metadata "cause".
func (s *Server) signedInOperator(ctx context.Context) (Operator, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return Operator{}, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	// An operator's token is not enough on a workload's connection: a
	// token stolen into a workload must not let it break locks.
	if !s.cfg.IsOperator(caller) {
		return Operator{}, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED,
			"force-release and epoch advance are for operators: connect with an operator identity, and sign in", "cause", "not_an_operator_identity")
	}
	if s.cfg.Operators == nil {
		return Operator{}, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PERMISSION_DENIED,
			"this arbiter has no operator sign-in configured (no OpenID Connect verifier): force-release and epoch advance "+
				"need two signed-in operators, so they are refused until it is configured", "cause", "no_operator_verifier")
	}
	raw, err := bearer(ctx)
	if err != nil {
		return Operator{}, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error(), "cause", "no_operator_token")
	}
	op, err := s.cfg.Operators.Verify(ctx, raw)
	if err != nil {
		meta := []string{"cause", "operator_token_refused"}
		if rule := oidcauth.RuleOf(err); rule != "" {
			meta = append(meta, "rule", string(rule)) // which rule, for machines
		}
		return Operator{}, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED,
			"operator ID token refused: "+err.Error(), meta...)
	}
	if op.Issuer == "" || op.Subject == "" {
		return Operator{}, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED,
			"operator ID token refused: it names no issuer and subject", "cause", "operator_token_refused")
	}
	if err := bound(caller, op); err != nil {
		return Operator{}, err
	}
	return op, nil
}

// bound refuses a signed-in person other than the one the operator SVID
// of the connection names (its last segment is their account), so a token
// carried on someone else's connection, or an SVID lent with one's own
// token, acts as no one.
func bound(svid spiffeid.ID, op Operator) error {
	account, err := svidAccount(svid)
	if err == nil && op.Name != "" && account == op.Name {
		return nil
	}
	return refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED,
		fmt.Sprintf("the operator signed in (account %q) is not the one this connection's SVID %s names (%q): "+
			"connect with your own operator SVID, whose last segment is your account, and your own sign-in", op.Name, svid, account),
		"cause", "operator_svid_mismatch")
}
