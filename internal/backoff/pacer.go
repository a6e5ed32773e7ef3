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
// A Pacer made with [NewWindowPacer] also keeps a margin over a sliding
// window of calls, for services that count calls per second.
//
// A Pacer is safe for concurrent use. It is meant for one caller at a time
// (one shard's reader); concurrent waiters are given slots one interval
// apart in the order they arrive. Create one with [NewPacer] or
// [NewWindowPacer].
type Pacer struct {
	interval time.Duration
	clock    Clock
	// window and margin: see NewWindowPacer. window 0: no window.
	window int
	margin time.Duration

	mu     sync.Mutex
	next   time.Time   // earliest time the next call may start; zero: now
	last   time.Time   // when the last call was let through; zero: none yet
	recent []time.Time // with a window: the last window calls, oldest first
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

// NewWindowPacer is [NewPacer] for a service that allows window calls in
// any window times interval (Kinesis: 5 GetRecords calls per second per
// shard, an interval of 200 ms and a window of 5), measured where it
// serves them. Calls spaced exactly one interval apart as they leave
// reach it unevenly: a call the network delayed more than the fifth call
// after it puts six calls in the service's second, and one is refused.
// So besides the interval between two calls, any window+1 calls in a row
// are let through at least window times interval plus margin apart: the
// margin absorbs that much difference in delay. It costs margin/window
// per call only when calls are due at the interval anyway; a real wait's
// overrun, which already spaces the calls further, counts towards it. A
// non-positive window or interval means [NewPacer].
func NewWindowPacer(interval time.Duration, window int, margin time.Duration, clock Clock) *Pacer {
	p := NewPacer(interval, clock)
	if window > 0 && p.interval > 0 {
		p.window, p.margin = window, max(margin, 0)
	}
	return p
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
	p.started(p.clock.Now(), false)
	p.mu.Unlock()
	return nil
}

// started records a call let through at t, or (again) the last one's
// actual start, and pushes the next slot out accordingly. Called with
// p.mu held.
func (p *Pacer) started(t time.Time, again bool) {
	p.last = t
	if t := t.Add(p.interval); t.After(p.next) {
		p.next = t
	}
	if p.window == 0 {
		return
	}
	switch {
	case again && len(p.recent) > 0:
		p.recent[len(p.recent)-1] = t
	case len(p.recent) < p.window:
		p.recent = append(p.recent, t)
	default:
		copy(p.recent, p.recent[1:])
		p.recent[len(p.recent)-1] = t
	}
	if len(p.recent) == p.window {
		// The next call is the window+1-th in a row from the oldest.
		span := time.Duration(p.window)*p.interval + p.margin
		if t := p.recent[0].Add(span); t.After(p.next) {
			p.next = t
		}
	}
}

// Started records that the call let through by the last [Pacer.Wait]
// starts only now: its caller waited for something else in between (such
// as memory to hold the answer). The interval and a later [Pacer.Hold]
// then count from now, so that the calls are spaced as they reach the
// service, not as they left the pacer. Calling it right after Wait
// changes nothing.
func (p *Pacer) Started() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started(p.clock.Now(), true)
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
