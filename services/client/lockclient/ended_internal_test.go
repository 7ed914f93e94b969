package lockclient

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A keepalive reporting one hold force-released ends that hold alone:
// its CanStart turns false and its OnFence runs once, however often the
// report repeats; the lease's other holds and a later grant of the same
// key are untouched. (The service side, against etcd, is tested in the
// arbiter's force-release tests.)
func TestAReportedEndEndsOneHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := &grantTable{held: map[string]uint64{}}
	s, err := openSession(ctx, g, "c", "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.lease.end(false) // the table has no CloseSession
	fences := make(chan string, 8)
	onFence := func(h *Hold) { fences <- h.Key() }
	ended, err := s.Lock(ctx, "ns/ended", onFence)
	if err != nil {
		t.Fatal(err)
	}
	nested, err := s.Lock(ctx, "ns/ended", onFence)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Lock(ctx, "ns/other", onFence)
	if err != nil {
		t.Fatal(err)
	}
	report := func(key string, rev int64) {
		s.lease.answer(time.Now(), &lockv1.KeepAliveResponse{SessionId: s.ID(), Ttl: durationpb.New(time.Minute),
			Ended: []*lockv1.EndedHold{{Key: key, Revision: rev, Reason: lockv1.EndReason_FORCE_RELEASED}}})
	}
	// A report of another grant of the key (an older one) ends nothing.
	report("ns/ended", ended.Token().Revision()+100)
	if !ended.CanStart() {
		t.Fatal("a report naming another revision ended the hold")
	}
	report("ns/ended", ended.Token().Revision())
	if ended.CanStart() || nested.CanStart() {
		t.Fatal("CanStart is true for a force-released hold")
	}
	for range 2 { // the outer and the nested Hold's OnFence
		select {
		case k := <-fences:
			if k != "ns/ended" {
				t.Fatalf("OnFence ran for %s", k)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("OnFence did not run")
		}
	}
	if !other.CanStart() || !s.CanStart() {
		t.Fatal("the other hold or the session ended with the force-released hold")
	}
	// The key can be locked afresh, and the repeated report spares the new
	// grant and runs no OnFence again.
	again, err := s.Lock(ctx, "ns/ended", onFence)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() == ended.Token() {
		t.Fatal("the new Lock joined the force-released grant")
	}
	report("ns/ended", ended.Token().Revision())
	if !again.CanStart() {
		t.Fatal("the repeated report ended the new grant")
	}
	select {
	case k := <-fences:
		t.Fatalf("OnFence ran again, for %s", k)
	case <-time.After(100 * time.Millisecond):
	}
	// Releasing the ended Holds says the grant had already ended.
	nested.Release(ctx)
	if err := ended.Release(ctx); err != ErrGrantEnded {
		t.Fatalf("release of a force-released hold: %v, want ErrGrantEnded", err)
	}
	if !again.CanStart() {
		t.Fatal("releasing the ended hold ended the new grant")
	}
}
