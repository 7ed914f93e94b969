package archive

import (
	"context"
	"time"
)

// Progress keeps the last day RunDaily finished, so a successor (another
// arbiter elected after this one) resumes after it instead of skipping
// the days this one had not finished.
type Progress interface {
	// Last is the last day done; ok is false when none was recorded.
	Last(ctx context.Context) (day time.Time, ok bool, err error)
	// Done records day as done.
	Done(ctx context.Context, day time.Time) error
}

// memoryProgress is Progress for one process: RunDaily's without one.
type memoryProgress struct{ last time.Time }

func (m *memoryProgress) Last(context.Context) (time.Time, bool, error) {
	return m.last, !m.last.IsZero(), nil
}

func (m *memoryProgress) Done(_ context.Context, day time.Time) error {
	m.last = day
	return nil
}

// RunDaily archives until ctx ends, then returns nil. Delay after each
// UTC day ends it exports that day, exports the ReexportDays before it
// again (so events the store got late, after an outage of up to that
// long, reach the archive too: a day whose events did not change is the
// same bytes), and copies the records from RecordsLookback before it.
//
// It resumes after the last day recorded in p (one of its own when nil:
// the arbiters keep it in etcd, under their election), doing every day
// since in order (at most MaxCatchUpDays: older ones are logged, for
// ExportDay by hand); with nothing recorded it does the last day that is
// due. A run that failed is tried again after RetryEvery; no day is
// recorded done before its run succeeded.
func (a *Archive) RunDaily(ctx context.Context, p Progress) error {
	if p == nil {
		p = &memoryProgress{}
	}
	for {
		wait, err := a.runDue(ctx, p)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			a.cfg.Logger.Warn("archive: daily run failed; trying again", "in", a.cfg.RetryEvery, "err", err)
			wait = a.cfg.RetryEvery
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.cfg.Clock.After(wait):
		}
	}
}

// runDue does every day that is due and not done, and returns how long
// until the next one is due.
func (a *Archive) runDue(ctx context.Context, p Progress) (time.Duration, error) {
	now := a.cfg.Clock.Now()
	// The last day whose end was Delay ago or more.
	due := Day(now.Add(-a.cfg.Delay)).AddDate(0, 0, -1)
	wait := due.AddDate(0, 0, 2).Add(a.cfg.Delay).Sub(now)
	last, ok, err := p.Last(ctx)
	if err != nil {
		return 0, err
	}
	next := due
	if ok {
		next = Day(last).AddDate(0, 0, 1)
	}
	if oldest := due.AddDate(0, 0, 1-a.cfg.MaxCatchUpDays); next.Before(oldest) {
		a.cfg.Logger.Warn("archive: days not archived, beyond the catch-up bound; export them by hand",
			"from", next.Format(time.DateOnly), "to", oldest.AddDate(0, 0, -1).Format(time.DateOnly))
		next = oldest
	}
	for ; !next.After(due); next = next.AddDate(0, 0, 1) {
		if err := a.runDay(ctx, next); err != nil {
			return 0, err
		}
		if err := p.Done(ctx, next); err != nil {
			return 0, err
		}
	}
	return wait, nil
}

// runDay exports day and the ReexportDays before it, and copies the
// records from RecordsLookback before it.
func (a *Archive) runDay(ctx context.Context, day time.Time) error {
	for d := day.AddDate(0, 0, -a.cfg.ReexportDays); !d.After(day); d = d.AddDate(0, 0, 1) {
		if _, err := a.ExportDay(ctx, d); err != nil {
			return err
		}
	}
	_, err := a.CopyRecords(ctx, day.Add(-a.cfg.RecordsLookback))
	return err
}
