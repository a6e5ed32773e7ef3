package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// TestLatestIsT0DuringSlowStartup: 1,000 shards (200 with -short) with
// history, the real per-shard limits on a modelled clock that runs 20
// times faster than the real one, and 8 resolver workers: the start-up
// takes minutes of Kinesis's time, and records keep arriving on every
// shard while it resolves. Every record that arrived after T0 is
// delivered, whatever shard its scan reached first; nothing from the
// history (a minute before the start) is.
func TestLatestIsT0DuringSlowStartup(t *testing.T) {
	shards := 1000
	if testing.Short() {
		shards = 200
	}
	clk := kinesistest.NewManualClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	f := kinesistest.New(kinesistest.WithClock(clk), kinesistest.WithLimits(kinesistest.DefaultLimits()), kinesistest.WithShardLimit(shards))
	kinesistest.NewStream(t, f, "orders", shards)
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders"), MaxResults: aws.Int32(int32(shards))})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range out.Shards {
		keys = append(keys, aws.ToString(s.HashKeyRange.StartingHashKey))
	}
	// putRound writes one record named prefix-round-i to every shard i.
	putRound := func(prefix string, round int) []string {
		var names []string
		for lo := 0; lo < shards; lo += 500 {
			var batch []types.PutRecordsRequestEntry
			for i := lo; i < min(lo+500, shards); i++ {
				d := fmt.Sprintf("%s-%d-%d", prefix, round, i)
				names = append(names, d)
				batch = append(batch, types.PutRecordsRequestEntry{Data: []byte(d), PartitionKey: aws.String("k"), ExplicitHashKey: aws.String(keys[i])})
			}
			res, err := f.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: batch})
			if err != nil || aws.ToInt32(res.FailedRecordCount) != 0 {
				t.Errorf("PutRecords: %v (%d failed)", err, aws.ToInt32(res.FailedRecordCount))
			}
		}
		return names
	}
	// More records per shard than the probe strategy's head read, so
	// every shard is probed, at 5 GetRecords calls per second.
	for round := range 150 {
		putRound("history", round)
		clk.Advance(10 * time.Millisecond)
	}
	clk.Advance(time.Minute)

	// The modelled clock: 20 ms of Kinesis's time per real millisecond.
	stopClock := make(chan struct{})
	var clockDone sync.WaitGroup
	clockDone.Add(1)
	go func() {
		defer clockDone.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopClock:
				return
			case <-tick.C:
				clk.Advance(20 * time.Millisecond)
			}
		}
	}()
	defer func() { close(stopClock); clockDone.Wait() }()

	// The resolver waits on the modelled clock too (its pacing of 5 calls
	// per second per shard and its backoff), as it would on Kinesis's.
	modelledSleep := func(ctx context.Context, d time.Duration) error {
		until := clk.Now().Add(d)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for clk.Now().Before(until) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		return nil
	}
	resolver, err := scan.NewResolver(scan.Config{Now: clk.Now, Sleep: modelledSleep, QueueSize: 2 * shards, Jitter: -1,
		Backoff: []time.Duration{10 * time.Millisecond}, Retries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	rec.notify = make(chan string, 100*shards)
	ih := newInitHook()
	var progressed atomic.Bool
	hook := progressHook(func(InitProgress) { progressed.Store(true) })
	began := clk.Now()
	r := start(t, context.Background(), Config{Stream: "orders", Sink: rec, IdleWait: time.Second}, WithClient(f), WithStore(memStore(t, journal.NewMemory())),
		WithResolver(resolver), WithHooks(ih, hook))

	// Produce a round on every shard every 300 ms of real time until the
	// batch is journaled: once the first shard is resolved, T0 is
	// journaled and the rest are still resolving.
	var during []string
	var ev InitResolved
	initDeadline := time.After(10 * time.Minute) // a hang guard, not a timing assertion
	for done := false; !done; {
		select {
		case ev = <-ih.ch:
			done = true
		case <-time.After(300 * time.Millisecond):
			if progressed.Load() {
				during = append(during, putRound("during", len(during)/shards)...)
			}
		case <-initDeadline:
			t.Fatal("initialisation did not finish")
		}
	}
	took := clk.Now().Sub(ev.T0)
	if len(during) == 0 {
		t.Fatalf("no record was put while the start-up resolved (it took %v of Kinesis's time); the test proves nothing", took)
	}
	if ev.T0.IsZero() || ev.T0.After(began) || began.Sub(ev.T0) > 2*time.Second {
		t.Errorf("T0 = %v, the start-up began at %v on Kinesis's clock: want at most 2 s earlier, never later", ev.T0, began)
	}
	t.Logf("start-up resolved %d shards in %v of Kinesis's time; %d records put meanwhile", ev.Resolved, took, len(during))
	afterInit := putRound("after", 0)

	want := map[string]bool{}
	for _, d := range append(during, afterInit...) {
		want[d] = true
	}
	deadline := time.After(10 * time.Minute)
	for len(want) > 0 {
		select {
		case d := <-rec.notify:
			delete(want, d)
		case <-deadline:
			t.Fatalf("%d records that arrived after T0 were never delivered", len(want))
		}
	}
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}
	for _, d := range rec.delivered() {
		if len(d) > 8 && d[:8] == "history-" {
			t.Fatalf("record %s from a minute before the start was delivered", d)
		}
	}
}

type progressHook func(InitProgress)

func (h progressHook) OnInitProgress(e InitProgress) { h(e) }

// killedBatch is a JournalStore whose batch of resolved positions fails,
// as if the process were killed after T0 was journaled and before the
// batch was.
type killedBatch struct {
	*JournalStore
}

func (k killedBatch) Save(ctx context.Context, stream string, u []ShardProgress) error {
	for _, p := range u {
		if p.Position.Kind == scan.KindAfterSequence || p.Position.Kind == scan.KindTrimHorizon {
			return errKilled
		}
	}
	return k.JournalStore.Save(ctx, stream, u)
}

var errKilled = errors.New("killed before the batch was journaled")

// TestRestartAfterT0ResolvesAtFirstT0: a first start-up journals T0 and dies
// before its batch; records arrive; a second start-up, later, on the same
// journal resolves at the first T0, so the records put in between are
// delivered; once its batch is saved, T0 is cleared.
func TestRestartAfterT0ResolvesAtFirstT0(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "history-0")
	s.put(shard1, "history-1")
	s.settle()
	j := journal.NewMemory()

	first := start(t, context.Background(), Config{Stream: s.name, Sink: newRecorder()}, WithClient(s.f), WithStore(killedBatch{memStore(t, j)}))
	if err := first.wait(t); !errors.Is(err, errKilled) {
		t.Fatalf("first Run = %v, want the killed batch", err)
	}
	t0, ok, err := memStore(t, j).LoadStart(context.Background(), s.name)
	if err != nil || !ok {
		t.Fatalf("no T0 journaled by the first start-up: %v, %v", ok, err)
	}

	s.put(shard0, "between-0")
	s.put(shard1, "between-1")
	s.settle()
	rec := newRecorder()
	ih := newInitHook()
	store := memStore(t, j)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(store), WithHooks(ih))
	if ev := ih.wait(t); !ev.T0.Equal(t0) {
		t.Errorf("restart resolved at T0 %v, want the first T0 %v", ev.T0, t0)
	}
	s.put(shard0, "after-0")
	rec.waitFor(t, "between-0", "between-1", "after-0")
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}
	for _, d := range rec.delivered() {
		if d == "history-0" || d == "history-1" {
			t.Errorf("%s from before the first T0 was delivered", d)
		}
	}
	if _, ok, _ := store.LoadStart(context.Background(), s.name); ok {
		t.Errorf("T0 still pending after the batch was saved")
	}
	// A fresh replay agrees.
	if _, ok, _ := memStore(t, j).LoadStart(context.Background(), s.name); ok {
		t.Errorf("T0 pending after a replay of the journal")
	}
}

// TestJournalStoreStartCompatible: a journal written before T0 existed
// loads (no T0 pending); the first T0 saved wins; a snapshot keeps a
// pending T0; ClearStart forgets it.
func TestJournalStoreStartCompatible(t *testing.T) {
	ctx := context.Background()
	j := journal.NewMemory()
	if _, err := j.Append(ctx, []byte(`{"stream":"s","updates":[{"id":"shardId-000000000000","state":"ACTIVE","pos":"TRIM_HORIZON"}]}`)); err != nil {
		t.Fatal(err)
	}
	s := memStore(t, j)
	if _, ok, err := s.LoadStart(ctx, "s"); ok || err != nil {
		t.Fatalf("an old journal has a T0: %v, %v", ok, err)
	}
	if p, _ := s.Load(ctx, "s"); p["shardId-000000000000"].State != StateActive {
		t.Fatalf("old journal's progress lost: %+v", p)
	}
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 123e6, time.UTC)
	if got, err := s.SaveStart(ctx, "s", t0); err != nil || !got.Equal(t0) {
		t.Fatalf("SaveStart = %v, %v", got, err)
	}
	if got, err := s.SaveStart(ctx, "s", t0.Add(time.Hour)); err != nil || !got.Equal(t0) {
		t.Fatalf("a second SaveStart = %v, %v; want the first T0 %v", got, err, t0)
	}
	// Through a snapshot.
	small, err := NewJournalStore(ctx, j, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := small.Save(ctx, "s", []ShardProgress{{ShardID: "shardId-000000000001", State: StateActive}}); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := memStore(t, j).LoadStart(ctx, "s"); !ok || !got.Equal(t0) {
		t.Fatalf("after a snapshot: T0 %v, %v; want %v", got, ok, t0)
	}
	if err := s.ClearStart(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := memStore(t, j).LoadStart(ctx, "s"); ok {
		t.Fatalf("T0 still pending after ClearStart")
	}
}
