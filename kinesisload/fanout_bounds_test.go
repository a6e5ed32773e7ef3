package kinesisload

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// revEvents is a Subscriber over the fake whose events are rewritten by
// fn before the Loader sees them (fn may return nil to drop one).
type revEvents struct {
	*kinesistest.Fake
	fn func(ev *types.SubscribeToShardEvent) *types.SubscribeToShardEvent
}

func (u revEvents) SubscribeToShard(ctx context.Context, in *kinesis.SubscribeToShardInput, optFns ...func(*kinesis.Options)) (kinesis.SubscribeToShardEventStreamReader, error) {
	es, err := u.Fake.SubscribeToShard(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	w := &revReader{SubscribeToShardEventStreamReader: es, ch: make(chan types.SubscribeToShardEventStream), done: make(chan struct{})}
	go w.pipe(ctx, u.fn)
	return w, nil
}

type revReader struct {
	kinesis.SubscribeToShardEventStreamReader
	ch   chan types.SubscribeToShardEventStream
	done chan struct{}
}

func (w *revReader) Events() <-chan types.SubscribeToShardEventStream { return w.ch }

func (w *revReader) Close() error {
	err := w.SubscribeToShardEventStreamReader.Close()
	<-w.done
	return err
}

func (w *revReader) pipe(ctx context.Context, fn func(*types.SubscribeToShardEvent) *types.SubscribeToShardEvent) {
	defer close(w.done)
	defer close(w.ch)
	for ev := range w.SubscribeToShardEventStreamReader.Events() {
		if e, ok := ev.(*types.SubscribeToShardEventStreamMemberSubscribeToShardEvent); ok {
			v := e.Value
			v.Records = append([]types.Record(nil), v.Records...)
			nv := fn(&v)
			if nv == nil {
				continue
			}
			ev = &types.SubscribeToShardEventStreamMemberSubscribeToShardEvent{Value: *nv}
		}
		select {
		case w.ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// a subscription whose every event with records is odd (a record
// without a sequence number) must stop Run after KinesisMaxAttempts, as a
// polling reader does after as many odd pages: each event reset the count
// of failed subscriptions before it was checked, so Run retried for ever.
func TestFanOutOddEventsAreBoundedByMaxAttempts(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	sub := revEvents{Fake: s.f, fn: func(ev *types.SubscribeToShardEvent) *types.SubscribeToShardEvent {
		if len(ev.Records) > 0 {
			ev.Records[0].SequenceNumber = nil
		}
		return ev
	}}
	cfg := fanOutConfig(s, newRecorder())
	cfg.KinesisMaxAttempts = 3
	r := start(t, context.Background(), cfg, WithClient(sub), WithStore(memStore(t, journal.NewMemory())))
	select {
	case err := <-r.done:
		r.done <- err
		var re *RunError
		if !errors.As(err, &re) || re.Shard != shard0 || !errors.Is(err, ErrKinesis) {
			t.Fatalf("Run = %v, want a *RunError of ErrKinesis naming %s", err, shard0)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Run still retrying odd events after 5 s with KinesisMaxAttempts = 3 (polling stops after 3 odd pages)")
	}
}

var _ = aws.String

// a shard's loop started again within 5 s of its last successful
// subscription (Pause and Resume; a lease taken back; another host taking
// the shard over) is refused with ResourceInUseException until Kinesis's
// 5 s have passed. That refusal is expected, not a failure: with
// KinesisMaxAttempts = 3 and a short KinesisBackoff, the three paced tries
// (one a second) all fell within the 5 s and Run stopped.
func TestAFanOutResubscribeWithinFiveSecondsOfAResumeDoesNotStopRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeStream(t, 1, kinesistest.WithLimits(kinesistest.Limits{SubscribeToShardPerSecond: 1, ResubscribeWindow: 5 * time.Second}))
		s.put(shard0, "a")
		rec := newRecorder()
		cfg := fanOutConfig(s, rec)
		cfg.KinesisMaxAttempts = 3
		retries := &subscribeRetries{}
		r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), realPacing, WithHooks(retries))
		rec.waitFor(t, "a")
		defer func() {
			t.Logf("retried: %q; subscribe calls %d refused %d", retries.ops(), s.stats(shard0).SubscribeCalls, s.stats(shard0).SubscribeRefused)
		}()
		r.l.Pause()
		time.Sleep(100 * time.Millisecond)
		r.l.Resume()
		s.put(shard0, "b")
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("Run = %v after a Resume within 5 s of the last subscription", err)
		case <-time.After(7 * time.Second):
		}
		rec.waitFor(t, "b")
	})
}

// the event that ends a split parent lists no ChildShards
// (an empty list): the end is confirmed by ListShards, the parent
// completes and its children are read after it.
func TestAFanOutEndEventWithAnEmptyChildListIsConfirmed(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "p1")
	sub := revEvents{Fake: s.f, fn: func(ev *types.SubscribeToShardEvent) *types.SubscribeToShardEvent {
		if ev.ContinuationSequenceNumber == nil {
			ev.ChildShards = []types.ChildShard{}
		}
		return ev
	}}
	rec := newRecorder()
	cfg := fanOutConfig(s, rec)
	cfg.ListShardsInterval = 50 * time.Millisecond
	r := start(t, context.Background(), cfg, WithClient(sub), WithStore(memStore(t, journal.NewMemory())))
	rec.waitFor(t, "p1")
	s.put(shard0, "p2")
	rec.waitFor(t, "p2")
	s.split(shard0)
	kids := s.openShards()
	for i, k := range kids {
		s.put(k, "c"+string(rune('1'+i)))
	}
	rec.waitFor(t, "c1", "c2")
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
}
