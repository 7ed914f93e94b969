package pausetest

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockplane/lockplane/services/pausetest/pauseresult"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
)

// Config says what to test and how to reach the lock service.
type Config struct {
	Kind, Target  string
	Class         string
	SchemaVersion string
	// Profile is the lock service profile; Holder is the identity of the
	// frozen holder A, Rival the identity of B (they must differ).
	Profile, Holder, Rival string
	// Command starts a holder process; HolderEnv is added to its
	// environment. Default: this executable.
	Command []string
	// KeyPrefix is where the run's keys go; "pausetest/<run>" by default.
	KeyPrefix string
	// Progress receives each step as it happens.
	Progress func(testCase, step string)
	// MaxMessages bounds the paused-at cases; 8 when zero.
	MaxMessages int
}

// Run runs every case against the resource and returns the result
// document. An error means the kit could not run, not that the fence failed.
func Run(ctx context.Context, cfg Config) (*pauseresult.Result, error) {
	kind, err := Lookup(cfg.Kind)
	if err != nil {
		return nil, err
	}
	if cfg.Holder == cfg.Rival {
		return nil, errors.New("pausetest: holder and rival identities must differ (the same identity under another session is refused as a leak)")
	}
	if len(cfg.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Command = []string{exe}
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = 8
	}
	run := time.Now().UTC().Format("20060102t150405.000000000")
	run = strings.ReplaceAll(run, ".", "-")
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "pausetest/" + run
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, string) {}
	}
	if err := kind.Prepare(ctx, cfg.Target); err != nil {
		return nil, fmt.Errorf("pausetest: prepare %s: %w", cfg.Kind, err)
	}
	k := &kit{cfg: cfg, kind: kind, run: run}
	if err := k.connect(ctx); err != nil {
		return nil, err
	}
	defer k.close()

	res := &pauseresult.Result{APIVersion: pauseresult.APIVersion, Kind: "PauseTestResult",
		Metadata: pauseresult.Metadata{Name: fmt.Sprintf("%s-%s-%s", cfg.Class, cfg.Kind, run)},
		Spec:     pauseresult.ResultSpec{Class: cfg.Class, KitVersion: pauseresult.KitVersion, Resource: pauseresult.ResourceSpec{Kind: cfg.Kind, Identity: kind.Identity(cfg.Target), SchemaVersion: cfg.SchemaVersion}},
		Status:   pauseresult.ResultStatus{StartedAt: time.Now().UTC()}}

	n, err := k.messagesPerWrite(ctx)
	if err != nil {
		return nil, err
	}
	cases := []func(context.Context, *caseRun){k.equalToken, k.perRecord}
	names := []string{"equal-token", "per-record"}
	for i := 1; i <= min(n, cfg.MaxMessages); i++ {
		at := i
		cases = append(cases, func(ctx context.Context, c *caseRun) { k.pausedAt(ctx, c, at) })
		names = append(names, fmt.Sprintf("paused-at-%d", at))
	}
	results := make([]pauseresult.CaseResult, len(cases))
	var wg sync.WaitGroup
	for i := range cases {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := &caseRun{name: names[i], progress: cfg.Progress, result: pauseresult.CaseResult{Name: names[i], Outcome: pauseresult.Passed}}
			cases[i](ctx, c)
			results[i] = c.result
		}(i)
	}
	wg.Wait()
	res.Status.Cases = results
	res.Status.Outcome = pauseresult.Passed
	for _, c := range results {
		if c.Outcome != pauseresult.Passed {
			res.Status.Outcome = pauseresult.Failed
		}
	}
	res.Status.CompletedAt = time.Now().UTC()
	res.Status.Expires = res.Status.CompletedAt.Add(pauseresult.Validity)
	return res, nil
}

// kit is one run: the rival's connection to the lock service and to the
// resource, shared by the cases.
type kit struct {
	cfg    Config
	kind   Kind
	run    string
	rival  *lockclient.Client
	rivalS *lockclient.Session
}

func (k *kit) connect(ctx context.Context) error {
	p, err := profile.Load(k.cfg.Profile)
	if err != nil {
		return err
	}
	if k.rival, err = lockclient.DialProfile(p, k.cfg.Rival); err != nil {
		return err
	}
	if k.rivalS, err = k.rival.Session(ctx, k.cfg.Class); err != nil {
		return fmt.Errorf("pausetest: rival session: %w", err)
	}
	return nil
}

func (k *kit) close() {
	if k.rival != nil {
		k.rival.Close(context.Background())
	}
}

func (k *kit) key(c string) string { return k.cfg.KeyPrefix + "/" + c }

func (k *kit) record(c string) string { return k.run + "-" + c }

// rivalResource is B's own connection to the resource, one per case, so
// that one case's B waiting on a lock held by its frozen A delays no other.
func (k *kit) rivalResource(ctx context.Context, c *caseRun) (Resource, bool) {
	var d net.Dialer
	r, err := k.kind.Open(ctx, k.cfg.Target, d.DialContext)
	if err != nil {
		c.fail("B could not open the resource: %v", err)
		return nil, false
	}
	return r, true
}

func (k *kit) holder(ctx context.Context) (*holderProc, error) {
	return startHolder(ctx, k.cfg.Command, HolderConfig{Kind: k.cfg.Kind, Target: k.cfg.Target, Profile: k.cfg.Profile, Identity: k.cfg.Holder})
}

// grantedHolder starts a holder process and has it granted key.
func (k *kit) grantedHolder(ctx context.Context, c *caseRun, key string) (*holderProc, bool) {
	a, err := k.holder(ctx)
	if err != nil {
		c.fail("%v", err)
		return nil, false
	}
	a.send(command{Op: "acquire", Key: key, Class: k.cfg.Class})
	if _, err := a.expect("acquired", time.Minute); err != nil {
		a.kill()
		c.fail("%v", err)
		return nil, false
	}
	return a, true
}

// messagesPerWrite runs one unobstructed write and counts its messages.
func (k *kit) messagesPerWrite(ctx context.Context) (int, error) {
	h, err := k.holder(ctx)
	if err != nil {
		return 0, err
	}
	defer h.kill()
	if err := h.send(command{Op: "acquire", Key: k.key("dry-run"), Class: k.cfg.Class}); err != nil {
		return 0, err
	}
	if _, err := h.expect("acquired", time.Minute); err != nil {
		return 0, err
	}
	h.send(command{Op: "write", Record: k.record("dry-run"), Value: "A"})
	e, err := h.expect("wrote", time.Minute)
	if err != nil {
		return 0, err
	}
	if e.Stale || e.Error != "" {
		return 0, fmt.Errorf("pausetest: an unobstructed first write was refused (stale=%v, %s): the fence refuses a current holder", e.Stale, e.Error)
	}
	k.cfg.Progress("dry-run", fmt.Sprintf("one write sends %d messages to the resource", e.Writes))
	return e.Writes, nil
}

// caseRun records one case's story.
type caseRun struct {
	name     string
	progress func(string, string)
	result   pauseresult.CaseResult
}

func (c *caseRun) step(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	c.result.Steps = append(c.result.Steps, s)
	c.progress(c.name, s)
}

func (c *caseRun) fail(format string, a ...any) {
	c.result.Outcome = pauseresult.Failed
	c.result.Detail = fmt.Sprintf(format, a...)
	c.progress(c.name, "FAILED: "+c.result.Detail)
}

// frozenPastTTL freezes A and returns B's grant of key, made once A's lease
// has expired: B's waiting Lock is the event.
func (k *kit) frozenPastTTL(ctx context.Context, c *caseRun, a *holderProc, key string) (*lockclient.Hold, bool) {
	if err := a.freeze(); err != nil {
		c.fail("SIGSTOP A: %v", err)
		return nil, false
	}
	frozen := time.Now()
	c.step("A frozen with SIGSTOP")
	wctx, cancel := context.WithTimeout(ctx, 3*k.rivalS.TTL()+10*time.Second)
	defer cancel()
	hb, err := k.rivalS.Lock(wctx, key, func(*lockclient.Hold) {})
	if err != nil {
		c.fail("B was not granted the key after A's lease should have expired: %v", err)
		return nil, false
	}
	c.step("B granted after A's lease expired (%s frozen, TTL %s)", time.Since(frozen).Round(10*time.Millisecond), k.rivalS.TTL())
	return hb, true
}

func (k *kit) pausedAt(ctx context.Context, c *caseRun, at int) {
	key, rec := k.key(c.name), k.record(c.name)
	a, ok := k.grantedHolder(ctx, c, key)
	if !ok {
		return
	}
	defer a.kill()
	c.step("A granted")
	a.send(command{Op: "write", Record: rec, Value: "A", Gate: at})
	if _, err := a.expect("gated", time.Minute); err != nil {
		c.fail("A's write did not reach message %d: %v", at, err)
		return
	}
	c.step("A's write stopped before message %d", at)
	hb, ok := k.frozenPastTTL(ctx, c, a, key)
	if !ok {
		return
	}
	defer hb.Release(context.Background())
	br, ok := k.rivalResource(ctx, c)
	if !ok {
		return
	}
	defer br.Close()

	// B writes; a frozen A may hold a lock in the resource that B must
	// wait for (an open transaction, an upload in progress).
	bDone := make(chan error, 1)
	go func() { bDone <- br.Write(ctx, hb.Token(), rec, "B") }()
	var bErr error
	bBlocked := false
	select {
	case bErr = <-bDone:
		c.step("B wrote (err %v)", bErr)
	case <-time.After(2 * time.Second):
		bBlocked = true
		c.step("B's write is blocked, by a lock A holds while frozen")
	}
	a.send(command{Op: "open"})
	a.thaw()
	c.step("A resumed")
	ae, err := a.expect("wrote", time.Minute)
	if err != nil {
		c.fail("%v", err)
		return
	}
	if bBlocked {
		bErr = <-bDone
		c.step("B wrote after A went on (err %v)", bErr)
	}
	final, err := br.Read(ctx, rec)
	if err != nil {
		c.fail("read the record: %v", err)
		return
	}
	c.step("A's write: %s; the record holds %q", outcome(ae), final)
	switch {
	case bErr != nil:
		c.fail("B, the current holder, could not write: %v", bErr)
	case final != "B":
		c.fail("B's write did not survive: the record holds %q, written by A after its lease expired", final)
	case ae.Error != "":
		c.fail("A's write failed with an error that is not a stale-fence refusal: %s", ae.Error)
	case !ae.Stale && !bBlocked:
		c.fail("A's write under an expired grant was accepted")
	}
}

func (k *kit) equalToken(ctx context.Context, c *caseRun) {
	key, rec := k.key(c.name), k.record(c.name)
	a, ok := k.grantedHolder(ctx, c, key)
	if !ok {
		return
	}
	defer a.kill()
	a.send(command{Op: "write", Record: rec, Value: "A1"})
	e, err := a.expect("wrote", time.Minute)
	if err != nil || e.Stale || e.Error != "" {
		c.fail("A's first write was refused (%v, stale=%v %s)", err, e.Stale, e.Error)
		return
	}
	c.step("A granted and wrote once")
	a.send(command{Op: "write", Record: rec, Value: "A2", Gate: 1})
	if _, err := a.expect("gated", time.Minute); err != nil {
		c.fail("%v", err)
		return
	}
	c.step("A's second write, with the same token, stopped before it is sent")
	hb, ok := k.frozenPastTTL(ctx, c, a, key)
	if !ok {
		return
	}
	defer hb.Release(context.Background())
	a.send(command{Op: "open"})
	a.thaw()
	c.step("A resumed before B writes")
	ae, err := a.expect("wrote", time.Minute)
	if err != nil {
		c.fail("%v", err)
		return
	}
	c.step("A's second write: %s", outcome(ae))
	if !ae.Stale {
		c.fail("A's second write, under a grant that had expired and been given to B, was %s: an equal token must be refused", outcome(ae))
		return
	}
	br, ok := k.rivalResource(ctx, c)
	if !ok {
		return
	}
	defer br.Close()
	if err := br.Write(ctx, hb.Token(), rec, "B"); err != nil {
		c.fail("B could not write: %v", err)
		return
	}
	if final, _ := br.Read(ctx, rec); final != "B" {
		c.fail("the record holds %q after B's write", final)
		return
	}
	c.step("B wrote; the record holds \"B\"")
}

func (k *kit) perRecord(ctx context.Context, c *caseRun) {
	keyA, keyB := k.key(c.name+"-a"), k.key(c.name+"-b")
	hb, err := k.rivalS.TryLock(ctx, keyB, func(*lockclient.Hold) {})
	if err != nil {
		c.fail("B: %v", err)
		return
	}
	defer hb.Release(context.Background())
	c.step("B granted key 2 (the older token)")
	a, ok := k.grantedHolder(ctx, c, keyA)
	if !ok {
		return
	}
	defer a.kill()
	a.send(command{Op: "write", Record: k.record(c.name + "-a"), Value: "A"})
	if e, err := a.expect("wrote", time.Minute); err != nil || e.Stale || e.Error != "" {
		c.fail("A's write of record 1 was refused (%v, %s)", err, outcome(e))
		return
	}
	c.step("A granted key 1 (a newer token) and wrote record 1")
	br, ok := k.rivalResource(ctx, c)
	if !ok {
		return
	}
	defer br.Close()
	if err := br.Write(ctx, hb.Token(), k.record(c.name+"-b"), "B"); err != nil {
		c.fail("B, the current holder of record 2, was refused (%v): the mark is not per record", err)
		return
	}
	c.step("B wrote record 2 with its older token: the marks are per record")
}

func outcome(e event) string {
	switch {
	case e.Stale:
		return "refused as stale"
	case e.Error != "":
		return "failed: " + e.Error
	default:
		return "accepted"
	}
}
