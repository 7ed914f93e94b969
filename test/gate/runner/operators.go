package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/login"
	ghistory "github.com/lockplane/lockplane/test/gate/history"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The two operators of every history: alice requests, bob approves. Each
// connects with an operator SVID of their own (writeTrust) and signs in
// at the history's OpenID provider.
const (
	requester = "alice"
	approver  = "bob"
)

// operators are a history's operator sign-in: the development OpenID
// provider (devidp, zitadel's op: alice and bob have the lock-operator
// role and a TOTP second factor) that the arbiters verify ID tokens
// against, the operators' ID tokens once signed in, and the history file
// of what they did (force-releases).
type operators struct {
	idp    *devidp.Provider
	dir    string
	caPath string
	mu     sync.Mutex
	tokens map[string]string
	// path is the operators' history; rec records to it.
	path string
	file *os.File
	rec  *ghistory.Recorder
}

// startOperators starts the provider, writes its CA where the arbiters'
// --oidc-ca reads it, and opens the operators' history.
func startOperators(dir string) (*operators, error) {
	dir = filepath.Join(dir, "operators")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	idp, err := devidp.Start(devidp.Config{})
	if err != nil {
		return nil, fmt.Errorf("OpenID provider: %w", err)
	}
	o := &operators{idp: idp, dir: dir, caPath: filepath.Join(dir, "ca.pem"), tokens: map[string]string{},
		path: filepath.Join(dir, "history.jsonl")}
	if err := os.WriteFile(o.caPath, idp.CAPEM(), 0o644); err != nil {
		idp.Close()
		return nil, err
	}
	if o.file, err = os.OpenFile(o.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		idp.Close()
		return nil, err
	}
	o.rec = ghistory.NewRecorder(o.file)
	return o, nil
}

func (o *operators) close() {
	o.idp.Close()
	o.file.Close()
}

// flags are the arbiter's operator sign-in: the provider's issuer and CA,
// its client, the role claim and role, and the second factor its tokens
// carry after a sign-in with a one-time code.
func (o *operators) flags() []string {
	return []string{"--oidc-issuer", o.idp.Issuer(), "--oidc-ca", o.caPath, "--oidc-client-id", o.idp.ClientID(),
		"--oidc-role-claim", o.idp.RoleClaim(), "--oidc-role", "lock-operator", "--oidc-amr", "otp"}
}

// signIn signs the operators in, as `lockctl login` does (the device
// flow through login.Login, its ID token verified and cached 0600), with
// each operator at the browser played by devidp.Approve: password and
// the current one-time code.
func (o *operators) signIn(ctx context.Context, names ...string) error {
	errs := make(chan error, len(names))
	for _, name := range names {
		go func() { errs <- o.signInOne(ctx, name) }()
	}
	var all []error
	for range names {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

func (o *operators) signInOne(ctx context.Context, name string) error {
	u, ok := o.idp.User(name)
	if !ok {
		return fmt.Errorf("sign in %s: no such user", name)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	approved := make(chan error, 1)
	prompt := func(p login.Prompt) {
		go func() {
			code, err := o.idp.OTP(name)
			if err == nil {
				err = devidp.Approve(lctx, o.idp.HTTPClient(), p.VerificationURI, p.UserCode,
					devidp.Credentials{User: name, Password: u.Password, OTP: code})
			}
			approved <- err
		}()
	}
	tok, err := login.Login(lctx, login.Config{Issuer: o.idp.Issuer(), ClientID: o.idp.ClientID(), CAPEM: o.idp.CAPEM(),
		CachePath: filepath.Join(o.dir, name+"-token.json"), Prompt: prompt})
	if err != nil {
		select {
		case aerr := <-approved:
			if aerr != nil {
				err = fmt.Errorf("%w (at the sign-in form: %v)", err, aerr)
			}
		default:
		}
		return fmt.Errorf("sign in %s: %w", name, err)
	}
	o.mu.Lock()
	o.tokens[name] = tok.IDToken
	o.mu.Unlock()
	return nil
}

// as is ctx carrying operator name's ID token, as lockctl sends it.
func (o *operators) as(ctx context.Context, name string) context.Context {
	o.mu.Lock()
	tok := o.tokens[name]
	o.mu.Unlock()
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// admin dials the arbiter of profilePath as operator name (their SVID).
func (o *operators) admin(profilePath, name string) (adminv1.AdminServiceClient, func(), error) {
	p, err := profile.Load(profilePath)
	if err != nil {
		return nil, nil, err
	}
	c, err := lockclient.DialProfile(p, name)
	if err != nil {
		return nil, nil, err
	}
	return adminv1.NewAdminServiceClient(c.Conn()), func() { c.Close(context.Background()) }, nil
}

// pair dials the two operators of a two-person action: alice (the
// requester) through the first profile's arbiter, bob (the approver)
// through the second's. done closes both.
func (o *operators) pair(profiles []string) (alice, bob adminv1.AdminServiceClient, done func(), err error) {
	alice, closeA, err := o.admin(profiles[0], requester)
	if err != nil {
		return nil, nil, nil, err
	}
	bob, closeB, err := o.admin(profiles[1], approver)
	if err != nil {
		closeA()
		return nil, nil, nil, err
	}
	return alice, bob, func() { closeA(); closeB() }, nil
}

// record appends an operators' op to their history.
func (o *operators) record(op ghistory.Op) {
	op.Client = ghistory.Operators
	o.rec.Record(op)
}

// twoPersonAdvance is the operators' epoch advance (ADR-03): alice
// requests it through one arbiter, bob approves it through the other.
// It returns the new epoch.
func (h *history) twoPersonAdvance(ctx context.Context, req *adminv1.AdvanceEpochRequest) (uint32, error) {
	alice, bob, done, err := h.ops.pair(h.profiles)
	if err != nil {
		return 0, err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r, err := alice.RequestEpochAdvance(h.ops.as(rctx, requester), &adminv1.RequestEpochAdvanceRequest{Advance: req})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	// The approval runs under a deadline of its own in the arbiter; the
	// call waits for it.
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := bob.ApproveAction(h.ops.as(actx, approver), &adminv1.ApproveActionRequest{Id: r.GetAction().GetId()})
	if err != nil {
		return 0, fmt.Errorf("approve request %s: %w", r.GetAction().GetId(), err)
	}
	return resp.GetEpochAdvance().GetEpoch(), nil
}

// twoPersonShardAdd adds shard to the map as operators must once sign-in
// is on: alice requests it through one arbiter, bob approves it through
// the other, and the approval runs the move (its epoch advance included).
func (h *history) twoPersonShardAdd(ctx context.Context, shard string) error {
	alice, bob, done, err := h.ops.pair(h.profiles)
	if err != nil {
		return err
	}
	defer done()
	if err := h.impoliteShardAdd(ctx, shard); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	r, err := alice.RequestShardAdd(h.ops.as(rctx, requester), &adminv1.RequestShardAddRequest{
		Add: &adminv1.AddShardRequest{Shard: shard, Reason: "gate: shard-add"}})
	cancel()
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	// The requester approving her own request moves nothing.
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = alice.ApproveAction(h.ops.as(sctx, requester), &adminv1.ApproveActionRequest{Id: r.GetAction().GetId()})
	cancel()
	if err == nil {
		return fmt.Errorf("request %s: approved by its own requester", r.GetAction().GetId())
	}
	// The approval waits for the moving ranges' holders under a deadline
	// of its own in the arbiter, which may outlast a call: a call that
	// ends first (its own deadline, the arbiter's "approve again to
	// resume", or the request still executing) is approved again, within
	// the history's deadline.
	id := r.GetAction().GetId()
	for {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := bob.ApproveAction(h.ops.as(actx, approver), &adminv1.ApproveActionRequest{Id: id})
		cancel()
		_, meta := reason.Info(err)
		switch {
		case err == nil, meta["cause"] == "action_approved":
			// Approved now, or by an earlier call whose answer was lost.
			return nil
		case meta["cause"] != "action_executing" && status.Code(err) != codes.DeadlineExceeded:
			return fmt.Errorf("approve request %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("approve request %s: not settled within the history: %w", id, err)
		case <-time.After(time.Second):
		}
	}
}

// impoliteShardAdd is one operator adding the shard alone, with an
// operator SVID and no sign-in: the arbiters verify sign-in, so it must be
// refused before anything moves (two_person_required).
func (h *history) impoliteShardAdd(ctx context.Context, shard string) error {
	c, err := operatorClient(h.profiles[0])
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := adminv1.NewAdminServiceClient(c.Conn()).AddShard(actx, &adminv1.AddShardRequest{Shard: shard, Reason: "gate: one person"})
	if err == nil {
		_, err = stream.Recv()
	}
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "two") {
		return fmt.Errorf("a one-person AddShard without sign-in was not refused as two-person: %v", err)
	}
	return nil
}
