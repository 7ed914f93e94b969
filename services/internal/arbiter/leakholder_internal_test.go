package arbiter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/status"
)

// LEAKED names a session only from a hold of the caller's identity, and on
// a shard only the coord session the hold records, never the hold's lease.
// Another identity's hold cannot reach LEAKED through the API (it needs the
// caller's own process), so the rule is checked here.
func TestALeakNamesOnlyTheCallersKnownSession(t *testing.T) {
	me, other := spiffeid.RequireFromString("spiffe://example.org/me"), spiffeid.RequireFromString("spiffe://example.org/other")
	r := request{caller: me, instance: "p1", key: "ns/k"}
	const lease = 987654321
	hold := func(id spiffeid.ID, coord int64) []byte {
		return []byte(holdRecord{Identity: id.String(), Instance: "p1", Session: lease, CoordSession: coord}.Encode())
	}
	for _, tc := range []struct {
		name  string
		shard bool
		hold  []byte
		want  int64
	}{
		{"coord cluster: the lease is the session", false, hold(me, 0), lease},
		{"shard: the recorded coord session", true, hold(me, 7), 7},
		{"shard, no coord session recorded", true, hold(me, 0), 0},
		{"shard, unreadable hold", true, []byte("{"), 0},
		{"coord cluster, unreadable hold", false, []byte("{"), 0},
		{"another identity's hold, shard", true, hold(other, 7), 0},
		{"another identity's hold, coord cluster", false, hold(other, 0), 0},
	} {
		if got := leakedHolder(tc.shard, r, tc.hold, lease); got != tc.want {
			t.Errorf("%s: names session %d, want %d", tc.name, got, tc.want)
		}
		err := (&Arbiter{shardOf: tc.shard}).leaked(r, tc.hold, lease)
		_, meta := reason.Info(err)
		want := ""
		if tc.want != 0 {
			want = strconv.FormatInt(tc.want, 10)
		}
		if meta["holder_session"] != want {
			t.Errorf("%s: LEAKED holder_session %q, want %q", tc.name, meta["holder_session"], want)
		}
		if msg := status.Convert(err).Message(); tc.want != lease && strings.Contains(msg, strconv.Itoa(lease)) {
			t.Errorf("%s: LEAKED's message names the hold's lease: %s", tc.name, msg)
		}
	}
}
