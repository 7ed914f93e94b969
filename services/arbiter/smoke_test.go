package arbiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockclient"
)

func TestSmoke(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := s.TryLock(ctx, "team-a/orders/42", func(*lockclient.Hold) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("token %v", h.Token())
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
