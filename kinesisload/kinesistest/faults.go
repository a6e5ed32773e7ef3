package kinesistest

import (
	"context"
	"time"
)

// Op names a Kinesis operation of the fake, for [Fault] and [Fake.Calls].
type Op string

// The operations the fake implements.
const (
	OpCreateStream          Op = "CreateStream"
	OpDeleteStream          Op = "DeleteStream"
	OpDescribeStreamSummary Op = "DescribeStreamSummary"
	OpListShards            Op = "ListShards"
	OpGetShardIterator      Op = "GetShardIterator"
	OpGetRecords            Op = "GetRecords"
	OpPutRecord             Op = "PutRecord"
	OpPutRecords            Op = "PutRecords"
	OpSplitShard            Op = "SplitShard"
	OpMergeShards           Op = "MergeShards"
	OpUpdateShardCount      Op = "UpdateShardCount"
)

// A Fault changes what chosen calls do, so that a test can replay a race or
// a failure exactly. A call matches a fault when its operation is Op and,
// where set, its stream is Stream and its shard is Shard. When a fault
// fires, in this order: Entered receives a value, the call sleeps Delay,
// waits until Block is closed or receives a value, and then fails with Err,
// or, when Err is nil, goes on to do its work (so a blocked GetRecords sees
// the records put while it was blocked). Every wait ends early with
// ctx.Err() when the caller's context ends, so no goroutine is left behind.
type Fault struct {
	// Op is the operation to match. Required.
	Op Op
	// Stream, if set, restricts the fault to calls on this stream (by
	// name). A call whose stream cannot be told (a forged iterator, a
	// NextToken) matches only faults without Stream.
	Stream string
	// Shard, if set, restricts the fault to calls on this shard:
	// GetShardIterator's ShardId, the shard of GetRecords' iterator,
	// PutRecord's target shard, SplitShard's ShardToSplit and either shard of
	// MergeShards. Other operations never match a fault with Shard set.
	Shard string
	// Nth makes the fault fire on the Nth matching call after Inject (1 is
	// the next one) and then retire. Zero fires on every matching call until
	// the fault is removed.
	Nth int
	// Err, if not nil, is returned by the call instead of doing its work.
	Err error
	// Delay, if positive, is how long the call sleeps (real time, not the
	// fake's clock) before going on.
	Delay time.Duration
	// Block, if not nil, holds the call until it is closed or receives a
	// value.
	Block <-chan struct{}
	// Entered, if not nil, receives a value when the call starts, before
	// Delay and Block: the test learns that the call is in flight. The send
	// waits for a receiver (or the caller's context); use a buffered channel
	// if the test may not be listening.
	Entered chan<- struct{}
}

type faultEntry struct {
	id    uint64
	fault Fault
	seen  int
}

// Inject adds a fault and returns a function that removes it; calling that
// function again, or after the fault has retired, does nothing. Faults are
// checked in the order they were injected, and every matching fault fires.
func (f *Fake) Inject(ft Fault) (remove func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faultSeq++
	e := &faultEntry{id: f.faultSeq, fault: ft}
	f.faults = append(f.faults, e)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.removeFault(e.id)
	}
}

// ClearFaults removes every injected fault. Calls already waiting in a
// fault keep waiting until it releases them or their context ends.
func (f *Fake) ClearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = nil
}

func (f *Fake) removeFault(id uint64) {
	for i, e := range f.faults {
		if e.id == id {
			f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			return
		}
	}
}

// Calls returns how many calls of op the fake has received, including
// calls failed by faults, throttled or invalid, but not calls whose context
// had already ended.
func (f *Fake) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// enter is the first thing every operation does: it honours an ended
// context, counts the call and plays the faults that fire on it. shards are
// the shards the call is about, if known.
func (f *Fake) enter(ctx context.Context, op Op, stream string, shards ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.calls[op]++
	var fire []Fault
	for i := 0; i < len(f.faults); i++ {
		e := f.faults[i]
		if !e.matches(op, stream, shards) {
			continue
		}
		e.seen++
		switch {
		case e.fault.Nth <= 0:
			fire = append(fire, e.fault)
		case e.seen == e.fault.Nth:
			fire = append(fire, e.fault)
			f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			i--
		}
	}
	f.mu.Unlock()
	for _, ft := range fire {
		if err := play(ctx, ft); err != nil {
			return err
		}
	}
	return nil
}

// begin opens a call on a stream addressed by name or ARN: it runs the
// call's entry ([Fake.enter]: context, faults) and then finds the stream
// under f.mu. On success f.mu is held and the caller must unlock it; on
// error it is not held.
func (f *Fake) begin(ctx context.Context, op Op, name, arn *string, shards ...string) (*stream, error) {
	if err := f.enter(ctx, op, f.requestStream(name, arn), shards...); err != nil {
		return nil, err
	}
	f.mu.Lock()
	st, err := f.lookupStream(name, arn)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	return st, nil
}

func (e *faultEntry) matches(op Op, stream string, shards []string) bool {
	ft := &e.fault
	if ft.Op != op || (ft.Stream != "" && ft.Stream != stream) {
		return false
	}
	if ft.Shard == "" {
		return true
	}
	for _, s := range shards {
		if s == ft.Shard {
			return true
		}
	}
	return false
}

func play(ctx context.Context, ft Fault) error {
	if ft.Entered != nil {
		select {
		case ft.Entered <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ft.Delay > 0 {
		t := time.NewTimer(ft.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if ft.Block != nil {
		select {
		case <-ft.Block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ft.Err
}
