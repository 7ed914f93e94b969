package arbiter

import (
	"context"
	"errors"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
)

// request is a call that passed every check that needs no etcd read.
type request struct {
	caller spiffeid.ID
	// instance is the caller's process as its session names it
	// (AcquireRequest.instance); empty for other requests.
	instance string
	key      string
	class    class.Class
	labels   labels
	// mapVersion is the shard map version the Router homed the key under;
	// a grant commits only on a cluster serving that version. 0: no map.
	mapVersion int64
	// coordSession is, for a shard, the coord session the Router serves
	// the call for with its lease there; grants record it in the hold.
	coordSession int64
	// waitingSince is when an Acquire found the key held and began to
	// wait (zero: it has not waited); its grant records the wait.
	waitingSince time.Time
	// queuedAt is when the caller's session first queued for the key in a
	// durable queue, from its queue record (the arbiter's UTC clock; zero:
	// not known). A retried Acquire keeps its place, so its wait counts
	// from here, not from the retry.
	queuedAt time.Time
	// grant names this Acquire call in the hold it writes (records.Hold's
	// Grant); set once per call by acquireAdmitted.
	grant string
}

// on is r as served by the named cluster, under shard map version
// mapVersion (0: none): a Router's admission, handed to that cluster's
// arbiter.
func (r request) on(cluster string, mapVersion int64) request {
	r.labels.cluster, r.mapVersion = cluster, mapVersion
	return r
}

// deniedMsg is the one denial message: it is the same whether or not the key
// exists or is held (ADR-19).
const deniedMsg = "the caller may not lock this key"

// admitter admits a lock call that names a key: it authenticates the
// caller, validates the key and class and authorizes the call, all before
// etcd is touched. It is the one place a call is authorised, run once per
// call by the type serving the lock service over gRPC: an Arbiter serving
// alone, or a Router, whose arbiters then serve the admitted request
// without a second check.
type admitter struct {
	classes    class.Registry
	authorizer Authorizer
	metrics    *metrics
	// cluster labels refusals: the cluster of the server that admits.
	cluster string
}

func newAdmitter(cfg Config, m *metrics) admitter {
	return admitter{classes: cfg.Classes, authorizer: cfg.authorizer(), metrics: m, cluster: cfg.Cluster}
}

// admit is the request an Acquire for key in className makes, or the
// refusal: a class other than the key's is refused WRONG_CLASS.
func (g admitter) admit(ctx context.Context, key, className string) (request, error) {
	return g.admitAs(ctx, key, className, true)
}

// admitKey is admit for a call that only reads or ends a hold (Release,
// Inspect, ValidateToken): it goes to the key's class whatever the request
// names, so that a policy change that gave the key another class of the
// same tier never strands a hold its client can no longer name.
func (g admitter) admitKey(ctx context.Context, key, className string) (request, error) {
	return g.admitAs(ctx, key, className, false)
}

func (g admitter) admitAs(ctx context.Context, key, className string, strict bool) (request, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return request{}, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if err := lockkey.Validate(key); err != nil {
		var ke *lockkey.Error
		errors.As(err, &ke)
		g.metrics.refused(labels{cluster: g.cluster}, lockv1.ErrorReason_INVALID_KEY)
		return request{}, refuse.With(codes.InvalidArgument, lockv1.ErrorReason_INVALID_KEY, err.Error(), "field", "key", "rule", string(ke.Rule))
	}
	cls, err := g.classes.Lookup(className)
	if err != nil && !strict {
		// A class a policy change removed still names its holds' key.
		className = ""
		cls, err = g.classes.Lookup("")
	}
	if err != nil {
		return request{}, refuse.With(codes.NotFound, lockv1.ErrorReason_UNKNOWN_CLASS, "class: "+err.Error(), "field", "class")
	}
	r := request{caller: caller, key: key, class: cls, labels: labels{
		class: cls.Name, tier: string(cls.Tier), cluster: g.cluster}}
	if !g.authorizer.MayLock(caller, key) {
		// No namespace label: the key is the caller's say, not yet checked,
		// and any workload could mint a series per denied namespace.
		g.metrics.refused(r.labels, lockv1.ErrorReason_PERMISSION_DENIED)
		return request{}, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, deniedMsg)
	}
	r.labels.namespace = g.metrics.namespace(lockkey.Namespace(key))
	// After authorization, so a caller learns nothing of a namespace it
	// may not lock, not even its classes.
	if cls.Namespace != "" && cls.Namespace != lockkey.Namespace(key) && strict {
		return request{}, refuse.With(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
			"class: "+cls.Name+" locks keys of namespace "+cls.Namespace+" only", "field", "class", "rule", "class-namespace")
	}
	// The key's class, not the request's, picks its cluster: a key held
	// through two classes of two tiers would have two holders.
	if cls.Namespace != "" && cls.Namespace != lockkey.Namespace(key) {
		className = "" // !strict: the key's class, below
	}
	own, err := g.classes.ForKey(key, className)
	var wrong *class.WrongClassError
	if !strict && errors.As(err, &wrong) {
		// The hold is where the key's class puts it.
		own, err = g.classes.ForKey(key, "")
	}
	if err != nil {
		if errors.As(err, &wrong) {
			g.metrics.refused(r.labels, lockv1.ErrorReason_WRONG_CLASS)
			return request{}, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_WRONG_CLASS, wrong.Error(), "field", "class", "class", wrong.Want)
		}
		return request{}, refuse.With(codes.NotFound, lockv1.ErrorReason_UNKNOWN_CLASS, "class: "+err.Error(), "field", "class")
	}
	r.class, r.labels.class, r.labels.tier = own, own.Name, string(own.Tier)
	return r, nil
}

// admit admits an Acquire this Arbiter serves as the gRPC server.
func (a *Arbiter) admit(ctx context.Context, key, className string) (request, error) {
	return a.gate.admit(ctx, key, className)
}

// admitKey admits a Release, Inspect or ValidateToken (admitter.admitKey).
func (a *Arbiter) admitKey(ctx context.Context, key, className string) (request, error) {
	return a.gate.admitKey(ctx, key, className)
}

func requireSession(id int64) error {
	if id == 0 {
		return refuse.InvalidArgument("session_id", "is required (open one with OpenSession)")
	}
	return nil
}
