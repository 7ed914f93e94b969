package arbiter

import (
	"context"
	"fmt"
	"testing"

	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

type fixedQuota quota.Limits

func (q fixedQuota) LimitsFor(spiffeid.ID) quota.Limits { return quota.Limits(q) }

// BenchmarkQuotaCheck prices the hold quota check side by side: far below
// the limit it reads the watched count; near it, it also confirms the
// count with a linearizable read and a watch progress notification.
func BenchmarkQuotaCheck(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cli := oneMember(b, ctx)
	const held = 100
	id := spiffeid.RequireFromString("spiffe://t/holder")
	for i := range held {
		cli.Put(ctx, lockkey.HoldKey(fmt.Sprintf("team-a/q/%d", i)), fmt.Sprintf(`{"identity":%q}`, id))
	}
	for _, c := range []struct {
		name  string
		limit int
	}{{"far below the limit", 100 * held}, {"near the limit", held + 1}} {
		b.Run(c.name, func(b *testing.B) {
			a, err := New(Config{Etcd: cli, Quotas: fixedQuota{Holds: c.limit}, AllowAnyWorkload: true})
			if err != nil {
				b.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			go a.Run(rctx)
			if err := a.Ready(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := a.withinQuota(ctx, id, "holds"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
