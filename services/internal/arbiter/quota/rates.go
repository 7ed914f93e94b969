package quota

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// MaxLimiters caps the namespaces with a limiter of their own. Any
// authorised caller names namespaces; past the cap (all of them active
// within a refill period) new ones share overflow.
const MaxLimiters = 4096

// Rates rate-limits a call per namespace (the lock core's ValidateToken).
// An entry idle for longer than a refill period is full again, the same as
// a new one, so it is dropped: the map holds only namespaces active within
// that period.
type Rates struct {
	mu    sync.Mutex
	rate  rate.Limit
	burst int
	idle  time.Duration // time to refill a burst from empty
	by    map[string]*limiter
	// overflow serves new namespaces while the map is at its cap.
	overflow  *limiter
	lastSweep time.Time
}

type limiter struct {
	lim  *rate.Limiter
	used time.Time
}

// NewRates allows perSecond calls a second per namespace, with bursts of
// burst.
func NewRates(perSecond float64, burst int) *Rates {
	l := &Rates{rate: rate.Limit(perSecond), burst: burst, by: map[string]*limiter{}}
	if perSecond > 0 {
		l.idle = time.Duration(float64(burst) / perSecond * float64(time.Second))
	}
	l.overflow = &limiter{lim: rate.NewLimiter(l.rate, l.burst)}
	return l
}

// Allow reports whether a call of namespace may go ahead now, and counts
// it.
func (l *Rates) Allow(namespace string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.by[namespace]
	if !ok {
		if len(l.by) >= MaxLimiters || now.Sub(l.lastSweep) > l.idle {
			l.sweep(now)
		}
		if len(l.by) < MaxLimiters {
			e = &limiter{lim: rate.NewLimiter(l.rate, l.burst)}
			l.by[namespace] = e
		} else {
			e = l.overflow
		}
	}
	e.used = now
	return e.lim.AllowN(now, 1)
}

// sweep drops limiters idle for longer than a refill period.
func (l *Rates) sweep(now time.Time) {
	l.lastSweep = now
	for ns, e := range l.by {
		if now.Sub(e.used) > l.idle {
			delete(l.by, ns)
		}
	}
}

// Size is the number of namespaces with a limiter of their own.
func (l *Rates) Size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.by)
}
