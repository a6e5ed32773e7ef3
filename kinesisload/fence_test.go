package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// Without a fleet a Sink that refuses a batch with ErrLeaseLost refuses
// what no newer owner can have written (the batch carries epoch 0): Run
// stops at once with a *RunError of class ErrSink naming the shard, not
// retried (even with SinkRetriesForever) and not taken for a lost lease
// that would stop the shard while Run goes on.
func TestSinkLeaseLostWithoutFleetStopsRun(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "R1")
	s.settle()
	var calls atomic.Int32
	rec := newRecorder()
	rec.fail = func(b Batch) error {
		calls.Add(1)
		return fmt.Errorf("stored at epoch 3, the batch is at %d: %w", b.Epoch, ErrLeaseLost)
	}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), SinkRetries: SinkRetriesForever},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	re, ok := errors.AsType[*RunError](err)
	if !ok || !errors.Is(err, ErrSink) || re.Shard != shard0 || re.Op != "Deliver" {
		t.Fatalf("Run = %v, want a *RunError of class ErrSink naming Deliver and %s", err, shard0)
	}
	if !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Run = %v: the sink's refusal is not its cause", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the sink was called %d times, want once: a refusal as lost lease is not retried", n)
	}
	if st := r.l.Stats(); st.LeasesLost != 0 {
		t.Errorf("Stats.LeasesLost = %d, want 0: without a fleet no lease is lost", st.LeasesLost)
	}
}

// A TransactionalSink that refuses a start batch (epoch 0, handed over
// during initialisation) with ErrLeaseLost refuses what no lease was
// given for: Run stops with a *RunError of class ErrSink naming the shard,
// like a refusal of a batch of records at epoch 0. It is not the loss of
// the fleet's initialisation lock, which would start the initialisation
// over and deliver the same start batch again, for ever.
func TestSinkLeaseLostOnStartBatchStopsRun(t *testing.T) {
	s := newFakeStream(t, 1)
	s.settle()
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &txSink{}
	sink.fail = func(b Batch) error {
		if len(b.Records) > 0 || b.Epoch != 0 {
			return nil
		}
		if calls.Add(1) > 3 {
			cancel() // initialised over and over: end the test's Run
		}
		return fmt.Errorf("stored at epoch 3, the batch is at %d: %w", b.Epoch, ErrLeaseLost)
	}
	r := start(t, ctx, Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), SinkRetries: SinkRetriesForever},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	err := r.wait(t)
	re, ok := errors.AsType[*RunError](err)
	if !ok || !errors.Is(err, ErrSink) || re.Shard != shard0 || re.Op != "Deliver" {
		t.Fatalf("Run = %v, want a *RunError of class ErrSink naming Deliver and %s", err, shard0)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the start batch was delivered %d times, want once", n)
	}
}
