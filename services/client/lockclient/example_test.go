package lockclient_test

import (
	"context"
	"log"
	"time"

	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
)

// A holder that does its work in units, checks CanStart before each, and
// presents the token with every write to the resource.
func Example() {
	ctx := context.Background()
	src, err := identity.FromWorkloadAPI(ctx, "unix:///run/spire/agent.sock")
	if err != nil {
		log.Fatal(err)
	}
	c, err := lockclient.Dial(lockclient.Config{
		Target: "lockplane.example.internal:7443", Identity: src,
		ServerID: "spiffe://example.org/lockplane/arbiter",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	s, err := c.Session(ctx, "") // one lease per class TTL, renewed in the background
	if err != nil {
		log.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // how long to wait for the key
	defer cancel()
	work, stop := context.WithCancel(ctx)
	h, err := s.Lock(wctx, "team-a/orders/42", func(*lockclient.Hold) { stop() })
	if err != nil {
		log.Fatal(err)
	}
	defer h.Release(ctx)
	for unit := 0; unit < 10 && h.CanStart(); unit++ {
		// UPDATE orders SET ..., fence = $token WHERE id = $id AND fence < $token
		_ = work
		_ = h.Token()
	}
}
