package backoff

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock is a Clock whose Sleep moves time forward at once instead of
// waiting, and records every wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return nil
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) takeSleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sleeps
	c.sleeps = nil
	return s
}

func TestPolicyCeiling(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"first retry is base", Policy{Base: 100 * ms, Max: time.Second}, 1, 100 * ms},
		{"attempt 0 counts as 1", Policy{Base: 100 * ms, Max: time.Second}, 0, 100 * ms},
		{"negative attempt counts as 1", Policy{Base: 100 * ms, Max: time.Second}, -3, 100 * ms},
		{"doubles", Policy{Base: 100 * ms, Max: time.Second}, 2, 200 * ms},
		{"doubles again", Policy{Base: 100 * ms, Max: time.Second}, 4, 800 * ms},
		{"capped by max", Policy{Base: 100 * ms, Max: time.Second}, 5, time.Second},
		{"huge attempt stays capped", Policy{Base: 100 * ms, Max: time.Second}, 1 << 30, time.Second},
		{"no max caps at MaxInt64", Policy{Base: time.Second}, 1000, math.MaxInt64},
		{"max below base wins", Policy{Base: time.Second, Max: 300 * ms}, 1, 300 * ms},
		{"zero base never waits", Policy{Max: time.Second}, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Ceiling(tt.attempt); got != tt.want {
				t.Errorf("Ceiling(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestPolicyDelay(t *testing.T) {
	const ms = time.Millisecond
	fixed := func(r float64) func() float64 { return func() float64 { return r } }
	tests := []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"full jitter scales the ceiling", Policy{Base: 100 * ms, Max: time.Second, Rand: fixed(0.25)}, 3, 100 * ms},
		{"full jitter may be zero", Policy{Base: 100 * ms, Rand: fixed(0)}, 1, 0},
		{"equal jitter at least half", Policy{Base: 100 * ms, Jitter: EqualJitter, Rand: fixed(0)}, 2, 100 * ms},
		{"equal jitter upper half", Policy{Base: 100 * ms, Jitter: EqualJitter, Rand: fixed(0.5)}, 2, 150 * ms},
		{"no jitter is the ceiling", Policy{Base: 100 * ms, Jitter: NoJitter, Rand: fixed(0.1)}, 3, 400 * ms},
		{"capped then jittered", Policy{Base: 100 * ms, Max: time.Second, Rand: fixed(0.5)}, 10, 500 * ms},
		{"rand above range clamps to ceiling", Policy{Base: 100 * ms, Rand: fixed(7)}, 1, 100 * ms},
		{"negative rand clamps to zero", Policy{Base: 100 * ms, Rand: fixed(-1)}, 1, 0},
		{"NaN rand clamps to zero", Policy{Base: 100 * ms, Rand: fixed(math.NaN())}, 1, 0},
		{"zero policy", Policy{}, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Delay(tt.attempt); got != tt.want {
				t.Errorf("Delay(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestPolicyDelayDefaultRandStaysInBounds(t *testing.T) {
	for _, j := range []Jitter{FullJitter, EqualJitter} {
		p := Policy{Base: 10 * time.Millisecond, Max: time.Second, Jitter: j}
		for attempt := 1; attempt <= 12; attempt++ {
			c := p.Ceiling(attempt)
			lo := time.Duration(0)
			if j == EqualJitter {
				lo = c / 2
			}
			for range 200 {
				if d := p.Delay(attempt); d < lo || d > c {
					t.Fatalf("%s jitter: Delay(%d) = %v, outside [%v, %v]", j, attempt, d, lo, c)
				}
			}
		}
	}
}

func TestJitterString(t *testing.T) {
	got := []string{FullJitter.String(), EqualJitter.String(), NoJitter.String(), Jitter(9).String()}
	want := []string{"full", "equal", "none", "Jitter(9)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Jitter names (-want +got):\n%s", diff)
	}
}

func TestSleep(t *testing.T) {
	t.Run("full wait returns nil", func(t *testing.T) {
		if err := Sleep(context.Background(), time.Millisecond); err != nil {
			t.Fatalf("Sleep = %v, want nil", err)
		}
	})
	t.Run("non-positive duration returns nil", func(t *testing.T) {
		for _, d := range []time.Duration{0, -time.Hour} {
			if err := Sleep(context.Background(), d); err != nil {
				t.Fatalf("Sleep(%v) = %v, want nil", d, err)
			}
		}
	})
	t.Run("ended context wins even for zero", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for _, d := range []time.Duration{0, time.Hour} {
			if err := Sleep(ctx, d); !errors.Is(err, context.Canceled) {
				t.Fatalf("Sleep(%v) on a cancelled context = %v, want context.Canceled", d, err)
			}
		}
	})
	t.Run("context ending mid-wait cuts it short", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		// An hour would time the test out if the context were ignored.
		if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sleep = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("System clock sleeps the same way", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := (System{}).Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("System{}.Sleep = %v, want context.Canceled", err)
		}
		if err := (System{}).Sleep(context.Background(), 0); err != nil {
			t.Fatalf("(System{}).Sleep(0) = %v, want nil", err)
		}
	})
}

func TestPacerSpacesCalls(t *testing.T) {
	const interval = 200 * time.Millisecond
	c := newFakeClock()
	p := NewPacer(interval, c)
	ctx := context.Background()

	var times []time.Time
	for range 6 {
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		times = append(times, c.Now())
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap != interval {
			t.Errorf("gap between call %d and %d = %v, want %v", i-1, i, gap, interval)
		}
	}
	if diff := cmp.Diff([]time.Duration{0, interval, interval, interval, interval, interval}, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestPacerDoesNotWaitWhenIntervalPassed(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(200*time.Millisecond, c)
	ctx := context.Background()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(150 * time.Millisecond)
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 50 * time.Millisecond, 0}
	if diff := cmp.Diff(want, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestPacerHold(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(200*time.Millisecond, c)
	ctx := context.Background()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.Hold(time.Second)            // pushes the next slot out
	p.Hold(100 * time.Millisecond) // earlier than both: no effect
	p.Hold(-time.Second)           // no effect
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, time.Second, 200 * time.Millisecond}
	if diff := cmp.Diff(want, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

// The hold counts from when the last call was let through: time the call
// took (its latency) is part of the hold, not added to it.
func TestPacerHoldCountsFromTheCall(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(200*time.Millisecond, c)
	ctx := context.Background()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(300 * time.Millisecond) // the call takes 300 ms
	p.Hold(time.Second)
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(300 * time.Millisecond)
	p.Hold(100 * time.Millisecond) // already past: no wait beyond the interval
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 700 * time.Millisecond, 0}
	if diff := cmp.Diff(want, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestPacerZeroIntervalNeverWaits(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(-time.Second, c)
	if p.Interval() != 0 {
		t.Errorf("Interval() = %v, want 0", p.Interval())
	}
	for range 3 {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]time.Duration{0, 0, 0}, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

func TestPacerWaitCancelled(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(200*time.Millisecond, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context = %v, want context.Canceled", err)
	}
	if got := c.takeSleeps(); len(got) != 0 {
		t.Errorf("a cancelled Wait slept %v", got)
	}
}

func TestPacerRealClockCancelledMidWait(t *testing.T) {
	p := NewPacer(time.Hour, nil)
	if err := p.Wait(context.Background()); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	// The next slot is an hour away: only the context can end this wait.
	if err := p.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
	}
}

// A call that starts later than the pacer let it through (its caller
// waited for something else in between) is the one the next call is
// spaced from, and a hold counts from it too.
func TestPacerStartedCountsFromTheActualCall(t *testing.T) {
	c := newFakeClock()
	p := NewPacer(200*time.Millisecond, c)
	ctx := context.Background()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(150 * time.Millisecond) // waits for memory, then calls
	p.Started()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	p.Started() // right after Wait: no change
	p.Hold(300 * time.Millisecond)
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 200 * time.Millisecond, 300 * time.Millisecond}
	if diff := cmp.Diff(want, c.takeSleeps()); diff != "" {
		t.Errorf("sleeps (-want +got):\n%s", diff)
	}
}

// A window pacer lets any window+1 calls in a row through at least
// window*interval + margin apart, and otherwise one interval apart.
func TestWindowPacerKeepsAMarginOverTheWindow(t *testing.T) {
	c := newFakeClock()
	p := NewWindowPacer(200*time.Millisecond, 5, 5*time.Millisecond, c)
	ctx := context.Background()
	start := c.Now()
	var at []time.Duration
	for range 12 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		at = append(at, c.Now().Sub(start))
	}
	ms := time.Millisecond
	want := []time.Duration{0, 200 * ms, 400 * ms, 600 * ms, 800 * ms, 1005 * ms, 1205 * ms, 1405 * ms, 1605 * ms, 1805 * ms, 2010 * ms, 2210 * ms}
	if diff := cmp.Diff(want, at); diff != "" {
		t.Errorf("calls let through at (-want +got):\n%s", diff)
	}
}

// A call's own overrun (here: Started later than Wait returned) counts
// towards the window's margin: it is not added on top of it.
func TestWindowPacerCountsOverrunTowardsTheMargin(t *testing.T) {
	c := newFakeClock()
	p := NewWindowPacer(200*time.Millisecond, 5, 5*time.Millisecond, c)
	ctx := context.Background()
	start := c.Now()
	var at []time.Duration
	for i := range 7 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			c.advance(3 * time.Millisecond)
			p.Started()
		}
		at = append(at, c.Now().Sub(start))
	}
	ms := time.Millisecond
	want := []time.Duration{0, 203 * ms, 403 * ms, 603 * ms, 803 * ms, 1005 * ms, 1208 * ms}
	if diff := cmp.Diff(want, at); diff != "" {
		t.Errorf("calls let through at (-want +got):\n%s", diff)
	}
}

// A call delayed on its way (its round trip 30 ms longer than the others')
// is counted from when it reached the service: its answer less the
// shortest round trip.
func TestWindowPacerCountsADelayedCallFromItsArrival(t *testing.T) {
	c := newFakeClock()
	p := NewWindowPacer(200*time.Millisecond, 5, 5*time.Millisecond, c)
	ctx := context.Background()
	start := c.Now()
	var at []time.Duration
	for i := range 7 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		at = append(at, c.Now().Sub(start))
		trip := 30 * time.Millisecond
		if i == 1 {
			trip += 30 * time.Millisecond
		}
		c.advance(trip)
		p.Answered()
	}
	ms := time.Millisecond
	want := []time.Duration{0, 200 * ms, 400 * ms, 600 * ms, 800 * ms, 1005 * ms, 1235 * ms}
	if diff := cmp.Diff(want, at); diff != "" {
		t.Errorf("calls let through at (-want +got):\n%s", diff)
	}
}
