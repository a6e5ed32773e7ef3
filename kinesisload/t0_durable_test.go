package kinesisload

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// A first Run stopped hard after Kinesis's first answer, before it lists
// the shards: T0 (the moment the Run began) was its first durable write, so
// the next Run resolves at it and delivers what arrived in between. (Before
// the fix T0 was journaled only after two ListShards, and the restart took
// a T0 of its own, after those records.)
func TestLatestFirstRunStoppedBeforeListingKeepsItsT0(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "history")
	s.settle()
	j := journal.NewMemory()
	entered := make(chan struct{}, 1)
	remove := s.f.Inject(kinesistest.Fault{Op: kinesistest.OpListShards, Nth: 1, Entered: entered, Block: make(chan struct{})})
	ctx, cancel := context.WithCancel(context.Background())
	first := start(t, ctx, Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)))
	awaitEntered(t, entered, first, "the first ListShards")
	want := append(s.putDuring(shard0, "during-0", 5), s.putDuring(shard1, "during-1", 5)...)
	cancel()
	first.wait(t)
	remove()
	s.settle() // a T0 taken now would be after the records above

	rec := newRecorder()
	start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, j)), WithResolver(fastResolver(t)), WithHooks(rec))
	rec.waitFor(t, want...)
	notDelivered(t, rec, "history")
}

// dateless is a Kinesis whose answers carry no server time (no HTTP Date),
// as a client that drops the SDK's response metadata would.
type dateless struct{ *kinesistest.Fake }

func (d dateless) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	out, err := d.Fake.DescribeStreamSummary(ctx, in, opts...)
	if out != nil {
		out.ResultMetadata = middleware.Metadata{}
	}
	return out, err
}

// Without a Date from Kinesis, T0 is the host's wall clock when Run began
// (WithClock's) minus scan.HostClockBound: a host whose clock is an hour
// slow takes a T0 an hour and five minutes back, never after the start.
func TestT0WithoutKinesisDateIsTheHostClockMinusTheBound(t *testing.T) {
	s := newFakeStream(t, 1)
	const skew = -time.Hour
	clock := func() time.Time { return time.Now().Add(skew) }
	hook := newInitHook()
	before := time.Now().Add(skew - scan.HostClockBound).Truncate(time.Millisecond)
	start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder()}, WithClient(dateless{s.f}),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithHooks(hook), WithClock(clock))
	got := hook.wait(t).T0
	after := time.Now().Add(skew - scan.HostClockBound)
	if got.Before(before) || got.After(after) {
		t.Fatalf("T0 = %v, want the host's clock at Run's start minus %v, in [%v, %v]", got, scan.HostClockBound, before, after)
	}
}

// A start-up with nothing pending in the store (a fleet's init item, which
// held T0, deleted by hand; a later Run with shards to resolve) takes T0
// at the moment this Run began, not when the start-up began: a host that
// waited for a fleet's initialisation lock for 30 s would otherwise take
// the records of those 30 s for "before the start" (found by the
// simulation).
func TestStartTimeWithNothingPendingIsWhenTheRunBegan(t *testing.T) {
	s := newFakeStream(t, 1)
	l, err := New(Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now().Add(-30 * time.Second)
	se := &session{l: l, client: s.f, resolver: fastResolver(t), store: l.opt.store, began: began, beganWall: began}
	t0, err := se.startTime(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if latest := began.Add(time.Second); t0.After(latest) {
		t.Fatalf("T0 = %v, want at most %v: the Run began 30 s ago", t0, latest)
	}
}
