package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// FaultyTable wraps a [Table] with faults a test turns on, as one host sees
// the table: lost answers, writes refused (throttled), conflicts reported
// for writes that landed (the answer of an SDK's retry of a write that had
// landed), an outage, latency, a host paused (SIGSTOP) or killed. It counts
// the calls. The zero value is not valid: use [NewFaultyTable]. It is safe
// for concurrent use.
type FaultyTable struct {
	t Table

	mu        sync.Mutex
	unpaused  *sync.Cond
	killed    bool
	paused    bool
	outage    bool
	refuse    int // writes refused without landing
	failReads int // reads that fail
	lose      int // writes that land and answer ErrUnknown
	conflicts int // writes that land and answer ErrConflict
	latency   time.Duration
	reads     int
	writes    int
}

var _ Table = (*FaultyTable)(nil)

// NewFaultyTable returns t as one host sees it, with no fault on.
func NewFaultyTable(t Table) *FaultyTable {
	f := &FaultyTable{t: t}
	f.unpaused = sync.NewCond(&f.mu)
	return f
}

// Kill makes every later call fail at once with an error wrapping
// [ErrDown] and [ErrUnknown], nothing landing; it also ends a pause.
func (f *FaultyTable) Kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = true
	f.unpaused.Broadcast()
}

// Pause makes every later call wait until [FaultyTable.Resume] (or Kill),
// ignoring its context, as the calls of a stopped process do; a call in
// flight completes.
func (f *FaultyTable) Pause() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = true
}

// Resume ends a pause.
func (f *FaultyTable) Resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = false
	f.unpaused.Broadcast()
}

// Paused reports whether the table is paused (or killed).
func (f *FaultyTable) Paused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused || f.killed
}

// Outage makes every call fail with [ErrUnknown] without landing while on
// is true: the table is unreachable.
func (f *FaultyTable) Outage(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outage = on
}

// Refuse makes the next n writes fail with [ErrUnknown] without landing,
// as throttled writes do.
func (f *FaultyTable) Refuse(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = n
}

// FailReads makes the next n reads (Get, Query) fail with [ErrUnknown].
func (f *FaultyTable) FailReads(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failReads = n
}

// LoseAnswers makes the next n writes take effect as usual (or fail their
// condition) but answer [ErrUnknown], as a timeout does.
func (f *FaultyTable) LoseAnswers(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lose = n
}

// FalseConflicts makes the next n writes take effect as usual but answer
// [ErrConflict] when they landed: what a client's retry of a write that
// landed hears (its condition, true the first time, is false the second).
func (f *FaultyTable) FalseConflicts(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conflicts = n
}

// SetLatency makes every call take d longer (real time; simulated time
// inside a synctest bubble).
func (f *FaultyTable) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// Reads and Writes return how many reads (Get, Query) and writes (Put,
// Delete, SetEntry) were made, landed or not, for tests of the cost.
func (f *FaultyTable) Reads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// Writes: see Reads.
func (f *FaultyTable) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

// enter waits out a pause and the latency, and reports the fault of this
// call: the error to return before calling the table (nil to call it),
// and for a write the error to return after a call that succeeded.
func (f *FaultyTable) enter(ctx context.Context, write bool) (before, after error) {
	f.mu.Lock()
	for f.paused && !f.killed {
		f.unpaused.Wait()
	}
	lat := f.latency
	if write {
		f.writes++
	} else {
		f.reads++
	}
	switch {
	case f.killed:
		f.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrUnknown, ErrDown), nil
	case f.outage:
		f.mu.Unlock()
		return fmt.Errorf("%w: the table is unreachable (an outage)", ErrUnknown), nil
	case !write && f.failReads > 0:
		f.failReads--
		f.mu.Unlock()
		return fmt.Errorf("%w: the read failed", ErrUnknown), nil
	case write && f.refuse > 0:
		f.refuse--
		f.mu.Unlock()
		return fmt.Errorf("%w: throttled", ErrUnknown), nil
	case write && f.lose > 0:
		f.lose--
		after = fmt.Errorf("%w: the answer was lost", ErrUnknown)
	case write && f.conflicts > 0:
		f.conflicts--
		after = fmt.Errorf("%w: the condition failed on a retry of a write that landed", ErrConflict)
	}
	f.mu.Unlock()
	if lat > 0 {
		t := time.NewTimer(lat)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnknown, ctx.Err()), nil
		}
	}
	return nil, after
}

// answer is what a write returns: the lost answer or the false conflict
// instead of a success; a lost answer instead of a failed condition too.
func answer[T any](v T, err, after error) (T, error) {
	var zero T
	switch {
	case after == nil:
		return v, err
	case errors.Is(after, ErrUnknown):
		return zero, after
	case err == nil:
		return zero, after
	}
	return v, err
}

// Get implements [Table].
func (f *FaultyTable) Get(ctx context.Context, partition, key string) (Item, error) {
	if before, _ := f.enter(ctx, false); before != nil {
		return Item{}, before
	}
	return f.t.Get(ctx, partition, key)
}

// GetField implements [Table].
func (f *FaultyTable) GetField(ctx context.Context, partition, key, field string) (Item, error) {
	if before, _ := f.enter(ctx, false); before != nil {
		return Item{}, before
	}
	return f.t.GetField(ctx, partition, key, field)
}

// Query implements [Table].
func (f *FaultyTable) Query(ctx context.Context, partition string) ([]Item, error) {
	if before, _ := f.enter(ctx, false); before != nil {
		return nil, before
	}
	return f.t.Query(ctx, partition)
}

// Put implements [Table].
func (f *FaultyTable) Put(ctx context.Context, it Item) (Item, error) {
	before, after := f.enter(ctx, true)
	if before != nil {
		return Item{}, before
	}
	got, err := f.t.Put(ctx, it)
	return answer(got, err, after)
}

// Delete implements [Table].
func (f *FaultyTable) Delete(ctx context.Context, partition, key string, version uint64) error {
	before, after := f.enter(ctx, true)
	if before != nil {
		return before
	}
	_, err := answer(struct{}{}, f.t.Delete(ctx, partition, key, version), after)
	return err
}

// SetEntry implements [Table].
func (f *FaultyTable) SetEntry(ctx context.Context, partition, key, field, entry, old, value string) (Item, error) {
	before, after := f.enter(ctx, true)
	if before != nil {
		return Item{}, before
	}
	got, err := f.t.SetEntry(ctx, partition, key, field, entry, old, value)
	return answer(got, err, after)
}
