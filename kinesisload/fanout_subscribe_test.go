package kinesisload

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// A SubscribeToShard call that does not answer within CallTimeout is a
// timeout, retried like every other Kinesis call, not a failure that
// stops Run.
func TestFanOutSubscribeTimeoutIsRetried(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	never := make(chan struct{})
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: 1, Block: never})
	rec := newRecorder()
	cfg := fanOutConfig(s, rec)
	cfg.CallTimeout = 100 * time.Millisecond
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, "a")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	if diff := cmp.Diff([]string{"a"}, rec.delivered()); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}

// timedSubscriber records when (on the fake's clock) each SubscribeToShard
// call was made, including the calls a fault refused.
type timedSubscriber struct {
	*kinesistest.Fake
	mc *kinesistest.ManualClock

	mu    sync.Mutex
	calls []time.Time
}

func (s *timedSubscriber) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	s.mu.Lock()
	s.calls = append(s.calls, s.mc.Now())
	s.mu.Unlock()
	return s.Fake.SubscribeToShard(ctx, in, optFns...)
}

func (s *timedSubscriber) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls...)
}

// A throttled SubscribeToShard is retried no sooner than one second after
// the refused call: Kinesis takes one call per second per consumer and
// shard, and a call it refused for the rate counts.
func TestFanOutSubscribeRetriesKeepOnePerSecond(t *testing.T) {
	mc := kinesistest.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newFakeStream(t, 1, kinesistest.WithClock(mc))
	s.put(shard0, "a")
	for n := range 2 {
		s.f.Inject(kinesistest.Fault{Op: kinesistest.OpSubscribeToShard, Nth: n + 1, Err: &types.LimitExceededException{Message: aws.String("Rate exceeded")}})
	}
	sub := &timedSubscriber{Fake: s.f, mc: mc}
	rec := newRecorder()
	r := start(t, context.Background(), fanOutConfig(s, rec), WithClient(sub), WithStore(memStore(t, journal.NewMemory())),
		realPacing, withTune(func(rc *readerConfig) { rc.clock = waitClock{mc} }))
	waitUntil(t, "a is delivered", func() bool {
		mc.Advance(50 * time.Millisecond)
		return len(rec.delivered()) == 1
	})
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v, want ErrClosed", err)
	}
	calls := sub.times()
	if len(calls) < 3 {
		t.Fatalf("%d SubscribeToShard calls, want the two refused and one more", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if d := calls[i].Sub(calls[i-1]); d < time.Second {
			t.Errorf("SubscribeToShard call %d came %v after the previous one, want at least 1s", i+1, d)
		}
	}
}
