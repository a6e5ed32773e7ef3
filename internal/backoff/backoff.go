// Package backoff computes jittered exponential retry delays, sleeps in a
// way a context can cut short, and paces calls to a minimum interval.
//
// Time comes from a [Clock], so tests can run every wait against a clock
// that moves only when they say so. [System] is the real one.
//
//   - [Policy.Delay] turns an attempt number into a delay: exponential from
//     a base, capped, with full, equal or no jitter drawn from an injectable
//     random source.
//   - [Sleep] and [Clock.Sleep] wait for a duration or until the context
//     ends, whichever comes first, and leave no timer behind.
//   - [Pacer] spaces calls at least a minimum interval apart, such as the
//     200 ms that keeps a Kinesis shard under 5 GetRecords calls per second.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// A Clock tells the time and waits. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends, whichever comes first. It
	// returns nil after the full wait and ctx.Err() if ctx ended first
	// (including when ctx had already ended on entry, whatever d). A
	// non-positive d does not wait.
	Sleep(ctx context.Context, d time.Duration) error
}

// System is the [Clock] of the real time. The zero System is ready to use.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// Sleep is [Sleep].
func (System) Sleep(ctx context.Context, d time.Duration) error { return Sleep(ctx, d) }

var _ Clock = System{}

// Sleep waits for d on the real clock, or until ctx ends, whichever comes
// first. It returns nil after the full wait and ctx.Err() if ctx ended
// first; a context that has already ended wins even when d is not positive.
// The timer it uses is stopped before it returns.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Jitter says how much of an exponential delay is randomised.
type Jitter uint8

// The jitter modes. With a ceiling c = min(Max, Base*2^(attempt-1)):
const (
	// FullJitter picks the delay uniformly in [0, c). It spreads competing
	// callers best, but may retry almost at once. It is the zero Jitter.
	FullJitter Jitter = iota
	// EqualJitter picks the delay uniformly in [c/2, c): never less than
	// half the ceiling.
	EqualJitter
	// NoJitter uses c itself.
	NoJitter
)

// String returns the name of j, such as "full".
func (j Jitter) String() string {
	switch j {
	case FullJitter:
		return "full"
	case EqualJitter:
		return "equal"
	case NoJitter:
		return "none"
	}
	return "Jitter(" + strconv.Itoa(int(j)) + ")"
}

// A Policy is an exponential backoff: the delay before retry number n
// (n >= 1) is drawn below the ceiling min(Max, Base*2^(n-1)) as [Jitter]
// says. The zero Policy never waits.
type Policy struct {
	// Base is the ceiling of the first retry's delay. A non-positive Base
	// means no delay at all.
	Base time.Duration
	// Max caps the ceiling. A non-positive Max means no cap other than the
	// largest time.Duration.
	Max time.Duration
	// Jitter is how the delay is drawn below the ceiling. Default:
	// FullJitter.
	Jitter Jitter
	// Rand returns a uniform float in [0, 1). It must be safe for
	// concurrent use if the Policy is shared. Default (nil): the
	// math/rand/v2 top-level Float64, which is.
	Rand func() float64
}

// Ceiling returns the largest delay the policy can give for attempt:
// min(Max, Base*2^(attempt-1)), without overflow. An attempt below 1 counts
// as 1.
func (p Policy) Ceiling(attempt int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	limit := p.Max
	if limit <= 0 {
		limit = math.MaxInt64
	}
	if attempt < 1 {
		attempt = 1
	}
	c := p.Base
	for i := 1; i < attempt && c < limit; i++ {
		if c > limit/2 {
			c = limit
			break
		}
		c *= 2
	}
	return min(c, limit)
}

// Delay returns the wait before retry number attempt (1 for the first
// retry). An attempt below 1 counts as 1. The result is in [0, Ceiling].
func (p Policy) Delay(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	if c <= 0 {
		return 0
	}
	switch p.Jitter {
	case NoJitter:
		return c
	case EqualJitter:
		half := c / 2
		return half + p.scale(c-half)
	default:
		return p.scale(c)
	}
}

// scale returns a uniform duration in [0, d) using p.Rand.
func (p Policy) scale(d time.Duration) time.Duration {
	f := rand.Float64
	if p.Rand != nil {
		f = p.Rand
	}
	r := f()
	// Guard against a source that strays out of [0, 1).
	if !(r >= 0) {
		r = 0
	}
	if r >= 1 {
		return d
	}
	return time.Duration(r * float64(d))
}
