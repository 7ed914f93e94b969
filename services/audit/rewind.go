package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A cluster restored in place under its old cluster ID (etcdutl snapshot
// restore with the old token, member names and peer URLs) keeps the ID
// but not the history: its revisions start again at the snapshot's, and
// the revisions the tailer had read past it are written anew with other
// events. The ID check cannot see it, so the tailer checks the history
// itself: the cluster's head below what it read, or the last put it
// stored no longer at its revision, is a rewind.

// mark is one put the store has: the key, its revision and a digest of
// its value (never the value: the checkpoint is readable by operators).
type mark struct {
	Key string `json:"key"`
	Rev int64  `json:"rev"`
	Sum string `json:"sum"`
}

// markOf is r's last put, nil when r has none (deletes leave nothing to
// compare: a rewound history may lack the key too).
func markOf(r revision) *mark {
	for i := len(r.events) - 1; i >= 0; i-- {
		if ev := r.events[i]; ev.Type == mvccpb.PUT && ev.Kv != nil {
			return &mark{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision, Sum: digest(ev.Kv.Value)}
		}
	}
	return nil
}

func digest(v []byte) string {
	s := sha256.Sum256(v)
	return hex.EncodeToString(s[:8])
}

// rewind records a gap, once, when the tailed cluster no longer has the
// history the tailer read up to t.done, and reports whether it did.
// Reading goes on after t.done: the store keeps the old history's events
// to there, and the restored history's events at those revisions would
// share their rows (cluster ID, revision, key), so they are not read. The
// gap is keyed at revision 0, which holds no event: a tailer that finds
// the same rewind again writes the same row. A read that fails says
// nothing either way (the watch handles outages), nor does a compacted
// mark.
func (t *tailer) rewind(ctx context.Context) (bool, error) {
	if t.done == 0 || t.done == t.rewoundAt {
		return false, nil
	}
	why := t.rewound(ctx)
	if why == "" {
		return false, nil
	}
	g := t.gap(0, t.done, "")
	g.Revision = 0
	g.Detail = fmt.Sprintf("cluster %s was rewound under the same cluster ID (restored in place from a snapshot): %s; "+
		"the events stored up to revision %d are of its old history, its restored history's up to there were not read, and reading goes on after %d",
		t.src.id, why, t.done, t.done)
	t.cfg.Logger.Warn("audit: the tailed cluster was rewound under the same cluster ID; recorded a gap", "cluster", t.cfg.Cluster, "revision", t.done, "why", why)
	if err := t.insert(ctx, []Event{g}); err != nil {
		return false, err
	}
	// The mark names the old history: the next put read replaces it, and
	// the checkpoint drops it now, so a successor does not find the same
	// rewind by it again.
	t.mark, t.rewoundAt = nil, t.done
	t.dirty, t.saved = true, -1
	return true, nil
}

// rewound says how the cluster shows it was rewound below t.done, or ""
// when it does not. Each read is linearizable, so a member that lags
// behind what the tailer read is never taken for a rewind.
func (t *tailer) rewound(ctx context.Context) string {
	octx, cancel := context.WithTimeout(ctx, t.cfg.OpTimeout)
	resp, err := t.cfg.Etcd.Get(octx, lockkey.EpochKey, clientv3.WithCountOnly())
	cancel()
	if err != nil || epoch.FormatID(resp.Header.ClusterId) != t.src.id {
		return "" // an outage, or another cluster: sameCluster's case
	}
	if resp.Header.Revision < t.done {
		return fmt.Sprintf("its head is revision %d, below revision %d the tailer had read", resp.Header.Revision, t.done)
	}
	m := t.mark
	if m == nil || m.Rev > t.done {
		return ""
	}
	octx, cancel = context.WithTimeout(ctx, t.cfg.OpTimeout)
	resp, err = t.cfg.Etcd.Get(octx, m.Key, clientv3.WithRev(m.Rev))
	cancel()
	switch {
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Sprintf("revision %d, which the tailer read, is ahead of its head", m.Rev)
	case err != nil || epoch.FormatID(resp.Header.ClusterId) != t.src.id:
		return "" // compacted, an outage, or another cluster
	case len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != m.Rev || digest(resp.Kvs[0].Value) != m.Sum:
		return fmt.Sprintf("the put the tailer read at revision %d is not there", m.Rev)
	}
	return ""
}
