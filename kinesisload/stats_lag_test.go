package kinesisload

import (
	"bytes"
	"context"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// manualClock is a clock for Stats that a test moves by hand.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// waitShard waits until cond holds for shard's stats.
func waitShard(t *testing.T, l *Loader, shard string, what string, cond func(ShardStats) bool) ShardStats {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, s := range l.Stats().Shards {
			if s.ShardID == shard && cond(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("shard %s: timed out waiting for %s; stats %+v", shard, what, l.Stats().Shards)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// While a shard cannot be read (every GetRecords fails, retried), its lag
// grows with the time it has gone unread: LagMillis and ReadAge show it,
// whatever the last page's MillisBehindLatest said. (Before the fix
// MillisBehindLatest alone stayed 0 through a 90 s outage.)
func TestStatsLagGrowsWhileAShardIsNotRead(t *testing.T) {
	s := newFakeStream(t, 1)
	clk := newManualClock()
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()},
		WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithResolver(fastResolver(t)), WithClock(clk.now))
	s.put(shard0, "a")
	rec.waitFor(t, "a")
	read := waitShard(t, r.l, shard0, "a read", func(st ShardStats) bool { return !st.LastReadAt.IsZero() })
	if read.ReadAge != 0 || read.LagMillis != max(read.MillisBehindLatest, 0) {
		t.Errorf("just read: ReadAge %v, LagMillis %d, want 0 and MillisBehindLatest (%d)", read.ReadAge, read.LagMillis, read.MillisBehindLatest)
	}

	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Err: errInternal})
	waitShard(t, r.l, shard0, "a retried GetRecords", func(st ShardStats) bool { return st.Retries > 0 })
	clk.advance(90 * time.Second)
	st := waitShard(t, r.l, shard0, "the outage", func(ShardStats) bool { return true })
	if st.ReadAge < 90*time.Second || st.LagMillis < 90_000 {
		t.Errorf("after 90 s unread: ReadAge %v, LagMillis %d; want at least 90 s", st.ReadAge, st.LagMillis)
	}
	if st.MillisBehindLatest > 1000 {
		t.Errorf("MillisBehindLatest %d: the last page's figure should be kept as it was", st.MillisBehindLatest)
	}
	s.f.ClearFaults()
	waitShard(t, r.l, shard0, "a read after the outage", func(st ShardStats) bool { return st.ReadAge < time.Second })
}

// syncWriter is a bytes.Buffer safe for the Loader's goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.b.String(), s)
}

// A producer whose aggregates all hold user records outside the shard's
// range (the awslabs aggregator does not group by shard) makes one log
// line per shard per minute, with the counts, not one per aggregate;
// Stats and the hook count every record. (Before the fix: one WARN per
// aggregate, 1,200 of 1,239 lines.)
func TestOutOfRangeLoggedOncePerIntervalAndCounted(t *testing.T) {
	s := newFakeStream(t, 2)
	_, hi0 := s.shardInfo(shard0)
	inShard1 := new(big.Int).Add(hi0, big.NewInt(1)).String()
	const aggregates = 50
	for range aggregates {
		s.putEntry(mustAggregate(t, []kinesistest.UserRecord{
			{PartitionKey: "p", ExplicitHashKey: s.startingHashKey(shard0), Data: []byte("mine")},
			{PartitionKey: "p", ExplicitHashKey: inShard1, Data: []byte("foreign")},
		}))
	}
	clk := newManualClock()
	logs := &syncWriter{}
	log := newBatchLog()
	cfg := Config{Stream: s.name, Sink: log, StartPosition: scan.TrimHorizon()}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(log), WithClock(clk.now),
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	log.waitRecords(t, 2*aggregates)
	const msg = "user records outside the shard's hash key range delivered"
	if n := logs.count(msg); n != 1 {
		t.Errorf("%d log lines for %d aggregates with records outside the range, want 1 within a minute", n, aggregates)
	}
	st := waitShard(t, r.l, shard0, "the count", func(st ShardStats) bool { return st.OutOfRange == aggregates })
	if st.OutOfRange != aggregates {
		t.Errorf("Stats: OutOfRange %d, want %d", st.OutOfRange, aggregates)
	}
	log.mu.Lock()
	hooked := len(log.outside)
	log.mu.Unlock()
	if hooked != aggregates {
		t.Errorf("the hook was called %d times, want %d (once per aggregate)", hooked, aggregates)
	}
	clk.advance(time.Minute)
	s.putEntry(mustAggregate(t, []kinesistest.UserRecord{
		{PartitionKey: "p", ExplicitHashKey: s.startingHashKey(shard0), Data: []byte("mine")},
		{PartitionKey: "p", ExplicitHashKey: inShard1, Data: []byte("foreign")},
	}))
	log.waitRecords(t, 2*aggregates+2)
	if n := logs.count(msg); n != 2 {
		t.Errorf("%d log lines after a minute and one more aggregate, want 2", n)
	}
	if n := logs.count("events=50 records=50"); n != 1 {
		t.Errorf("the first line should count its 1 aggregate, the second the 50 since: %q", logs.b.String())
	}
}
