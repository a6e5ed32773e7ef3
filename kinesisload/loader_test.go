package kinesisload

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

const shard0 = "shardId-000000000000"
const shard1 = "shardId-000000000001"

// The seed's example: R1..R3 exist, the Loader initialises at LATEST, R4
// and R5 arrive, the first reader is aborted before it commits anything;
// its replacement must deliver R4 and R5 (and not R1..R3).
func TestLatestSurvivesAbortBeforeFirstCommit(t *testing.T) {
	s := newFakeStream(t, 1)
	var r3 string
	for _, d := range []string{"R1", "R2", "R3"} {
		r3 = s.put(shard0, d)
	}
	s.settle()
	j := journal.NewMemory()
	store := memStore(t, j)

	// The first reader: its Sink never accepts anything.
	entered := make(chan struct{}, 1)
	first := newRecorder()
	first.fail = func(b Batch) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		return errBoom
	}
	init1 := newInitHook()
	ctx1, abort := context.WithCancel(context.Background())
	r1 := start(t, ctx1, Config{Stream: s.name, Sink: first, SinkRetries: 1000}, WithClient(s.f), WithStore(store), WithHooks(init1))
	e := init1.wait(t)
	if e.Resolved != 1 || e.Reused != 0 {
		t.Fatalf("first init resolved %d and reused %d shards, want 1 and 0", e.Resolved, e.Reused)
	}
	if got, want := e.Positions[shard0], scan.AfterSequence(r3); !got.Equal(want) {
		t.Fatalf("journaled start %v, want %v (just after R3)", got, want)
	}
	s.put(shard0, "R4")
	s.put(shard0, "R5")
	<-entered
	abort() // the reader dies before any commit
	if err := r1.wait(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("first Run = %v, want context.Canceled", err)
	}

	second := newRecorder()
	init2 := newInitHook()
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: second}, WithClient(s.f), WithStore(store), WithHooks(init2))
	if e := init2.wait(t); e.Resolved != 0 || e.Reused != 1 {
		t.Errorf("second init resolved %d and reused %d shards, want 0 and 1: the journaled position must be reused", e.Resolved, e.Reused)
	}
	second.waitFor(t, "R4", "R5")
	if err := r2.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close = %v, want ErrClosed", err)
	}
	if diff := cmp.Diff([]string{"R4", "R5"}, second.delivered()); diff != "" {
		t.Errorf("second reader delivered (-want +got):\n%s", diff)
	}
}

// Empty polling, then a restart: records that arrive while no reader runs
// are delivered after the restart.
func TestEmptyPollingThenRestart(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "old")
	s.settle()
	store := memStore(t, journal.NewMemory())
	rec := newRecorder()
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store), WithHooks(ih))
	ih.wait(t)
	// Let it poll empty pages for a while.
	before := s.f.Calls(kinesistest.OpGetRecords)
	for s.f.Calls(kinesistest.OpGetRecords) < before+3 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	s.put(shard0, "new1")
	s.put(shard0, "new2")
	rec2 := newRecorder()
	r2 := start(t, context.Background(), Config{Stream: s.name, Sink: rec2}, WithClient(s.f), WithStore(store))
	rec2.waitFor(t, "new1", "new2")
	r2.stop(t)
	if diff := cmp.Diff([]string{"new1", "new2"}, rec2.delivered()); diff != "" {
		t.Errorf("delivered after restart (-want +got):\n%s", diff)
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Errorf("first run delivered %q, want nothing (history before LATEST)", got)
	}
}

// An iterator that expires before the first record is renewed at the
// resolved position, not at a new LATEST.
func TestIteratorExpiryBeforeFirstRecord(t *testing.T) {
	clock := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(clock))
	s.put(shard0, "old")
	clock.Advance(2 * time.Second) // T0 is a Date: see stream.settle
	renewed := make(chan IteratorRenewed, 4)
	ih := newInitHook()
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		WithHooks(ih, renewHook(renewed)))
	ih.wait(t)
	before := s.f.Calls(kinesistest.OpGetRecords)
	for s.f.Calls(kinesistest.OpGetRecords) < before+2 {
		time.Sleep(5 * time.Millisecond)
	}
	// The iterator held by the loop expires; a record arrives meanwhile.
	clock.Advance(6 * time.Minute)
	s.put(shard0, "during")
	select {
	case e := <-renewed:
		if !strings.HasPrefix(e.From, "AFTER_SEQUENCE_NUMBER:") {
			t.Errorf("renewed from %s, want the resolved AFTER_SEQUENCE_NUMBER position", e.From)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no iterator renewal")
	}
	rec.waitFor(t, "during")
	r.stop(t)
	if diff := cmp.Diff([]string{"during"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

type renewHook chan IteratorRenewed

func (h renewHook) OnIteratorRenewed(e IteratorRenewed) { h <- e }

type throttleCounter struct{ n chan struct{} }

func (h throttleCounter) OnThrottled(Throttled) {
	select {
	case h.n <- struct{}{}:
	default:
	}
}

// A storm of throttling errors is ridden out: every record is delivered
// once, in order.
func TestThrottlingStorm(t *testing.T) {
	s := newFakeStream(t, 1)
	store := memStore(t, journal.NewMemory())
	ih := newInitHook()
	rec := newRecorder()
	throttled := throttleCounter{n: make(chan struct{}, 100)}
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2},
		WithClient(s.f), WithStore(store), WithHooks(ih, throttled),
		withTune(func(rc *readerConfig) {
			rc.minInterval = time.Millisecond
			rc.readBytesPerSecond = -1
			rc.throttle.Base, rc.throttle.Max = time.Millisecond, 5*time.Millisecond
		}))
	want := names("r", 9)
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded for shard")}})
	for _, d := range want {
		s.put(shard0, d)
	}
	ih.wait(t)
	for range 10 {
		select {
		case <-throttled.n:
		case <-time.After(10 * time.Second):
			t.Fatal("the storm did not throttle the loop")
		}
	}
	if got := rec.delivered(); len(got) != 0 {
		t.Fatalf("delivered %q during the storm", got)
	}
	remove()
	rec.waitFor(t, want...)
	r.stop(t)
	if diff := cmp.Diff(want, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
