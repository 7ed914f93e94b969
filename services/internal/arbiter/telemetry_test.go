package arbiter_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/encoding/protojson"
)

// labelViolations lists metric labels outside ADR-22's set.
func labelViolations(fams []*dto.MetricFamily) []string {
	var bad []string
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(arbiter.AllowedLabels, l.GetName()) {
					bad = append(bad, f.GetName()+"{"+l.GetName()+"}")
				}
			}
		}
	}
	return bad
}

// lockedBuffer is a log sink shared by the arbiter's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// leaks reports every token whose value appears in text.
func leaks(text string, ts []token.Token) []string {
	var out []string
	for _, t := range ts {
		if strings.Contains(text, strconv.FormatUint(uint64(t), 10)) {
			out = append(out, fmt.Sprintf("token of revision %d", t.Revision()))
		}
	}
	return out
}

// Drive grants, contention, leaks, bad keys and stale releases, then read
// everything the arbiter emitted: no token, and no label but the four.
func TestTelemetryCarriesNoTokenAndOnlyBoundedLabels(t *testing.T) {
	logs := &lockedBuffer{}
	env := devenvtest.Start(t, devenv.Options{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx := ctxT(t, time.Minute)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, "")
	c2, oc := devenvtest.Client(t, env, "demo"), devenvtest.Client(t, env, "other")
	s2, o := devenvtest.Session(t, c2, ""), devenvtest.Session(t, oc, "")
	var tokens []token.Token
	var errText strings.Builder
	for i := 0; i < 10; i++ {
		key := fmt.Sprintf("team-a/tel/%d", i)
		h, err := s.TryLock(ctx, key, noFence)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, h.Token())
		for cl, sess := range map[*lockclient.Client]*lockclient.Session{c2: s2, oc: o} {
			_, err := raw(cl).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: sess.ID(), Instance: sess.Instance()})
			fmt.Fprintln(&errText, err)
		}
		insp, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := protojson.Marshal(insp)
		fmt.Fprintln(&errText, string(b))
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.ID(), Token: uint64(h.Token())})
		fmt.Fprintln(&errText, err)
	}
	_, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: "bad key", SessionId: s.ID(), Instance: s.Instance()})
	fmt.Fprintln(&errText, err)

	fams, err := env.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var metricsText bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&metricsText, f); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(metricsText.String(), "lockplane_grants_total") ||
		!strings.Contains(metricsText.String(), "lockplane_refusals_contended_total") {
		t.Fatalf("expected grant and refusal metrics, got:\n%s", metricsText.String())
	}
	if bad := labelViolations(fams); len(bad) > 0 {
		t.Fatalf("metrics with labels outside %v: %v", arbiter.AllowedLabels, bad)
	}
	for what, text := range map[string]string{"logs": logs.String(), "errors and inspect output": errText.String(), "metrics": metricsText.String()} {
		if l := leaks(text, tokens); len(l) > 0 {
			t.Errorf("%s carry %v", what, l)
		}
	}
}

// Both checks above must be able to fail.
func TestTelemetryChecksCatchViolations(t *testing.T) {
	reg := prometheus.NewRegistry()
	perKey := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bad_grants_total"}, []string{"namespace", "key"})
	reg.MustRegister(perKey)
	perKey.WithLabelValues("team-a", "team-a/orders/42").Inc()
	fams, _ := reg.Gather()
	if len(labelViolations(fams)) == 0 {
		t.Fatal("a per-key label passed the label check")
	}
	tok, _ := token.Mint(1, 4242)
	if len(leaks(fmt.Sprintf("granted key=k token=%d", uint64(tok)), []token.Token{tok})) == 0 {
		t.Fatal("a logged token passed the leak check")
	}
}
