package admin

import "time"

// Hooks are points of a two-person action that tests synchronise on or
// break at. Each runs on the goroutine at that point and may block it. The
// lock core's tests set them (arbiter.TestHooks, whose fields of the same
// names these are); production has none, and a nil hook is skipped.
type Hooks struct {
	// ActionLoaded runs when an approval or a denial has read a pending
	// request, before its claim (decide).
	ActionLoaded func(id string)
	// ActionClaimed runs when an approval has claimed a request
	// (executing), before it carries it out; true stops the approval
	// there, as a crash of the arbiter would.
	ActionClaimed func(id string) (crash bool)
	// ActionTxn runs before an approval's Txn (force record, epoch
	// advance). A non-nil error replaces its answer: with run, after the
	// Txn, as a deadline passing after the commit would; without, in its
	// place, as a Txn that never reached etcd.
	ActionTxn func(id string) (run bool, err error)
	// SessionRevoking runs before a force-release revokes the holder's
	// session lease; a non-nil error stands for the revoke failing.
	SessionRevoking func(session int64) error
	// ClaimBound, when set, replaces how old an executing request's claim
	// must be before reconcile, finding nothing done, puts it back to
	// pending; ShardAddWait, how long an approved shard add waits for the
	// moving ranges' holders. Tests shorten a bound rather than wait it out.
	ClaimBound, ShardAddWait *time.Duration
}

// hooked is the hooks in force; none when the arbiter gave none.
func (s *Server) hooked() Hooks {
	if s.hooks != nil {
		if h := s.hooks(); h != nil {
			return *h
		}
	}
	return Hooks{}
}

func (s *Server) actionLoadedHook(id string) {
	if h := s.hooked().ActionLoaded; h != nil {
		h(id)
	}
}

func (s *Server) actionClaimedHook(id string) bool {
	if h := s.hooked().ActionClaimed; h != nil {
		return h(id)
	}
	return false
}

func (s *Server) actionTxnHook(id string) (run bool, err error) {
	if h := s.hooked().ActionTxn; h != nil {
		return h(id)
	}
	return true, nil
}

func (s *Server) sessionRevokingHook(session int64) error {
	if h := s.hooked().SessionRevoking; h != nil {
		return h(session)
	}
	return nil
}
