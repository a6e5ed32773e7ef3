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

	mu   sync.Mutex
	next time.Time // earliest time the next call may start; zero: now
	last time.Time // when the last call was let through; zero: none yet
	// With a window: when the service is taken to have served each of the
	// last window calls, oldest first, and the round trips of the last
	// window answered calls.
	served []time.Time
	trips  []time.Duration
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
// shard, an interval of 200 ms and a window of 5), counted where it serves
// them. Calls spaced exactly one interval apart as they leave reach it
// unevenly: a call that the network, or a pause of the caller's process,
// delayed more than the fifth call after it puts six calls in the
// service's second, and one is refused.
//
// So besides the interval between two calls, any window+1 calls in a row
// are kept window times interval plus margin apart, counted from when the
// service served the first of them. That moment is estimated from the
// call's answer (see [Pacer.Answered]): its arrival less the shortest
// round trip of the last window calls, but never before the call was let
// through. A call delayed on its way (a pause of the process, a slow
// network path) is thereby counted from when it arrived; the margin
// absorbs what the estimate cannot see (the difference in delay between
// the way there and back). The window costs a window-th of the margin per
// call when calls are due at the interval anyway, plus a window-th of each
// round trip's excess over the shortest. Without Answered, calls are
// counted from when they were let through. A non-positive window or
// interval means [NewPacer].
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
	if len(p.served) == p.window && p.window > 0 {
		// This call is the window+1-th in a row from the oldest.
		if t := p.served[0].Add(time.Duration(p.window)*p.interval + p.margin); t.After(slot) {
			slot = t
		}
	}
	p.next = slot.Add(p.interval)
	p.mu.Unlock()
	if err := p.clock.Sleep(ctx, slot.Sub(now)); err != nil {
		return err
	}
	// A real sleep overruns a little: count the interval from the moment
	// the call is actually let through.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.window > 0 {
		if len(p.served) == p.window {
			copy(p.served, p.served[1:])
			p.served = p.served[:len(p.served)-1]
		}
		p.served = append(p.served, time.Time{}) // set by started
	}
	p.started(p.clock.Now())
	return nil
}

// started records that the last call starts at t. Called with p.mu held.
func (p *Pacer) started(t time.Time) {
	p.last = t
	if t := t.Add(p.interval); t.After(p.next) {
		p.next = t
	}
	if n := len(p.served); n > 0 {
		p.served[n-1] = t
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
	p.started(p.clock.Now())
}

// Answered records that the answer to the last call let through (by
// [Pacer.Wait], or [Pacer.Started]) arrived now, whatever it was. A pacer
// with a window uses it to tell when the service served the call (see
// [NewWindowPacer]); other pacers ignore it.
func (p *Pacer) Answered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.served)
	if p.window == 0 || n == 0 {
		return
	}
	now := p.clock.Now()
	trip := max(now.Sub(p.last), 0)
	if len(p.trips) == p.window {
		copy(p.trips, p.trips[1:])
		p.trips = p.trips[:len(p.trips)-1]
	}
	p.trips = append(p.trips, trip)
	shortest := trip
	for _, d := range p.trips {
		shortest = min(shortest, d)
	}
	if t := now.Add(-shortest); t.After(p.served[n-1]) {
		p.served[n-1] = t
	}
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
