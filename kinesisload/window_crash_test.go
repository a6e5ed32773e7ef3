package kinesisload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

var errCrash = errors.New("simulated crash")

// crashingJournal dies at its failAt-th append: before the append is
// durable, or just after (after). From then on every append fails.
type crashingJournal struct {
	journal.Journal
	failAt int
	after  bool

	mu      sync.Mutex
	appends int
}

func (c *crashingJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	c.mu.Lock()
	c.appends++
	n := c.appends
	c.mu.Unlock()
	switch {
	case n > c.failAt:
		return 0, errCrash
	case n == c.failAt && c.after:
		if _, err := c.Journal.Append(ctx, recs...); err != nil {
			return 0, err
		}
		return 0, errCrash
	case n == c.failAt:
		return 0, errCrash
	}
	return c.Journal.Append(ctx, recs...)
}

// Exactly once with windows across shards: sinktest.Memory stores each
// window (every shard's records and checkpoint) in one transaction, and
// the Loader commits the shards to its journal after. A crash at every
// journal write, before it is durable and after (the Sink's transaction
// done, the commit lost, or landed but unanswered), then a restart on
// what survived: every record is stored exactly once, in shard order,
// the parent's records and its children's included. With -short, each
// point crashes once: before its write is durable at odd points, after it
// at even ones.
func TestWindowsExactlyOnceThroughCrashes(t *testing.T) {
	points := 0
	for failAt := 1; ; failAt++ {
		var reached bool
		switch {
		case !testing.Short():
			before := windowCrashScenario(t, failAt, false)
			after := windowCrashScenario(t, failAt, true)
			reached = before || after
		default:
			reached = windowCrashScenario(t, failAt, failAt%2 == 0)
		}
		if !reached {
			break
		}
		points++
	}
	if points < 6 {
		t.Fatalf("only %d crash points: the scenario should write the journal more often", points)
	}
	t.Logf("%d crash points (short: %v)", points, testing.Short())
}

// windowCrashScenario runs a Loader that crashes at the failAt-th journal
// append, then another on what survived, and checks what the Sink holds.
// It returns false when the first made fewer appends than failAt.
func windowCrashScenario(t *testing.T, failAt int, after bool) bool {
	t.Helper()
	f := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, f, "orders", 3)
	ctx := context.Background()
	want := map[string][]string{} // shard -> data, in order
	put := func(shard, data string) {
		out, err := f.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String(data),
			ExplicitHashKey: aws.String(startKey(t, f, shard)), Data: []byte(data)})
		if err != nil {
			t.Fatal(err)
		}
		want[aws.ToString(out.ShardId)] = append(want[aws.ToString(out.ShardId)], data)
	}
	for i := range 5 {
		for s := range 3 {
			put(fmt.Sprintf("shardId-%012d", s), fmt.Sprintf("s%d-%d", s, i))
		}
	}
	split(t, f, "shardId-000000000000")
	for i := range 3 {
		put("shardId-000000000003", fmt.Sprintf("s3-%d", i))
		put("shardId-000000000004", fmt.Sprintf("s4-%d", i))
	}
	total := 0
	for _, d := range want {
		total += len(d)
	}
	mem := sinktest.NewMemory()
	inner := journal.NewMemory()
	cfg := kinesisload.Config{Stream: "orders", Sink: mem, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2,
		MaxBatchWait: 5 * time.Millisecond, IdleWait: 200 * time.Millisecond, ListShardsInterval: 50 * time.Millisecond}
	run := func(j journal.Journal) (*kinesisload.Loader, chan error) {
		store, err := kinesisload.NewJournalStore(ctx, j, 0)
		if err != nil {
			t.Fatal(err)
		}
		l, err := kinesisload.New(cfg, kinesisload.WithClient(f), kinesisload.WithStore(store), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		return l, done
	}
	stored := func() int {
		n := 0
		for _, s := range mem.Shards("orders") {
			n += len(mem.Stored("orders", s))
		}
		return n
	}
	l1, done1 := run(&crashingJournal{Journal: inner, failAt: failAt, after: after})
	var err1 error
	deadline := time.Now().Add(20 * time.Second)
	for err1 == nil {
		select {
		case err1 = <-done1:
		case <-time.After(20 * time.Millisecond):
			if stored() == total && l1.Stats().Shards != nil && allCompletedOrIdle(l1) {
				// No crash: failAt is past this run's last append.
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = l1.Close(cctx)
				cancel()
				if err := <-done1; !errors.Is(err, kinesisload.ErrClosed) && !errors.Is(err, errCrash) {
					t.Fatalf("crash at append %d (after %v): Run = %v", failAt, after, err)
				}
				return false
			}
			if time.Now().After(deadline) {
				t.Fatalf("crash at append %d (after %v): run 1 neither crashed nor stored everything", failAt, after)
			}
		}
	}
	if !errors.Is(err1, errCrash) {
		t.Fatalf("crash at append %d (after %v): Run = %v, want the crash", failAt, after, err1)
	}
	l2, done2 := run(inner)
	for deadline := time.Now().Add(20 * time.Second); stored() < total; {
		if time.Now().After(deadline) {
			t.Fatalf("crash at append %d (after %v): %d of %d records stored after the restart", failAt, after, stored(), total)
		}
		select {
		case err := <-done2:
			t.Fatalf("crash at append %d (after %v): run 2 stopped: %v", failAt, after, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l2.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done2; !errors.Is(err, kinesisload.ErrClosed) {
		t.Fatalf("crash at append %d (after %v): run 2 = %v", failAt, after, err)
	}
	for shard, w := range want {
		var got []string
		for _, r := range mem.Stored("orders", shard) {
			got = append(got, string(r.Data))
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("crash at append %d (after %v): shard %s stores %q, want %q: each record once, in order", failAt, after, shard, got, w)
		}
	}
	return true
}

// allCompletedOrIdle reports whether every shard the Loader reads has
// nothing waiting in windows.
func allCompletedOrIdle(l *kinesisload.Loader) bool {
	for _, sh := range l.Stats().Shards {
		if sh.WindowRecords > 0 {
			return false
		}
	}
	return true
}

func startKey(t *testing.T, f *kinesistest.Fake, shard string) string {
	t.Helper()
	lo, _ := keyRange(t, f, shard)
	return lo.String()
}

func keyRange(t *testing.T, f *kinesistest.Fake, shard string) (lo, hi *big.Int) {
	t.Helper()
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Shards {
		if aws.ToString(s.ShardId) == shard {
			lo, _ = new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
			hi, _ = new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
			return lo, hi
		}
	}
	t.Fatalf("no shard %s", shard)
	return nil, nil
}

// split splits shard in the middle of its hash key range: its children
// are the next two shard IDs.
func split(t *testing.T, f *kinesistest.Fake, shard string) {
	t.Helper()
	lo, hi := keyRange(t, f, shard)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := f.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"),
		ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatal(err)
	}
}
