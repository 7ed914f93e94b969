package archive

import (
	"context"
	"time"
)

// RunDaily archives until ctx ends, then returns nil. Delay after each
// UTC day ends it exports that day and copies the records from
// RecordsLookback before it. On start it does the last day that is due;
// a run that failed is tried again after RetryEvery, and days that came
// due meanwhile are done in order, so none is skipped while it runs.
// Days before it started are not exported: ExportDay them by hand.
func (a *Archive) RunDaily(ctx context.Context) error {
	var last time.Time // the last day done
	for {
		now := a.cfg.Clock.Now()
		// The last day whose end was Delay ago or more.
		due := Day(now.Add(-a.cfg.Delay)).AddDate(0, 0, -1)
		wait := due.AddDate(0, 0, 2).Add(a.cfg.Delay).Sub(now) // until the next one is due
		next := due
		if !last.IsZero() {
			next = last.AddDate(0, 0, 1)
		}
		for ; !next.After(due); next = next.AddDate(0, 0, 1) {
			if err := a.runDay(ctx, next); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				a.cfg.Logger.Warn("archive: daily run failed; trying again", "day", next.Format(time.DateOnly), "in", a.cfg.RetryEvery, "err", err)
				wait = a.cfg.RetryEvery
				break
			}
			last = next
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.cfg.Clock.After(wait):
		}
	}
}

// runDay exports day and copies the records from RecordsLookback before
// it.
func (a *Archive) runDay(ctx context.Context, day time.Time) error {
	if _, err := a.ExportDay(ctx, day); err != nil {
		return err
	}
	_, err := a.CopyRecords(ctx, day.Add(-a.cfg.RecordsLookback))
	return err
}
