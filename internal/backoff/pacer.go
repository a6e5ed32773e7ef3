package backoff

import (
	"context"
	"sync"
	"time"
)

// A Pacer spaces calls at least a minimum interval apart: each [Pacer.Wait]
// returns no sooner than Interval after the previous one returned, and a
// caller may push the next slot further out with [Pacer.Hold]. Five calls
// per second become an interval of 200 ms.
//
// A Pacer is safe for concurrent use. It is meant for one caller at a time
// (one shard's reader); concurrent waiters are given slots one interval
// apart in the order they arrive. Create one with [NewPacer].
type Pacer struct {
	interval time.Duration
	clock    Clock

	mu   sync.Mutex
	next time.Time // earliest time the next call may start; zero: now
	last time.Time // when the last call was let through; zero: none yet
}

// NewPacer returns a pacer allowing one call per interval on clock. A nil
// clock means [System]; a non-positive interval never waits (but
// [Pacer.Hold] still does).
func NewPacer(interval time.Duration, clock Clock) *Pacer {
	if clock == nil {
		clock = System{}
	}
	return &Pacer{interval: max(interval, 0), clock: clock}
}

// Interval returns the minimum interval between calls.
func (p *Pacer) Interval() time.Duration { return p.interval }

// Wait blocks until the caller may make its call, then returns nil; the
// next call is then due one interval later. If ctx ends first it returns
// ctx.Err() and the slot it held is left unused, so calls are only ever
// spaced further apart, never closer.
func (p *Pacer) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	now := p.clock.Now()
	slot := now
	if p.next.After(now) {
		slot = p.next
	}
	p.next = slot.Add(p.interval)
	p.mu.Unlock()
	if err := p.clock.Sleep(ctx, slot.Sub(now)); err != nil {
		return err
	}
	// A real sleep overruns a little: count the interval from the moment
	// the call is actually let through.
	p.mu.Lock()
	p.last = p.clock.Now()
	if t := p.last.Add(p.interval); t.After(p.next) {
		p.next = t
	}
	p.mu.Unlock()
	return nil
}

// Hold makes the next call start at least d after the last call was let
// through (or d from now, before any call), if that is later than it would
// start anyway: for instance the time a large read takes to "refill" a
// bytes-per-second budget. The budget is spent when the service serves the
// call, not when its answer arrives, so counting from the call keeps the
// call's own latency from being lost on every cycle. A non-positive d does
// nothing.
func (p *Pacer) Hold(d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	from := p.last
	if from.IsZero() {
		from = p.clock.Now()
	}
	if t := from.Add(d); t.After(p.next) {
		p.next = t
	}
}
