package pgsink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/pgsink/pgtest"
	"github.com/tidemark/tidemark/scan"
)

// The benchmarks of BENCHMARKS.md ("Batches for the destination"): real
// PostgreSQL (pgtest), the in-memory Kinesis with its limits, a Loader
// per configuration, side by side in one run. They run only with
// -pgbench:
//
//	go test -run TestBench -pgbench -v -timeout 30m ./
var (
	pgbench        = flag.Bool("pgbench", false, "run the PostgreSQL benchmarks of BENCHMARKS.md (minutes)")
	pgbenchMeasure = flag.Duration("pgbench.measure", 20*time.Second, "how long each configuration is measured, after its warm-up")
)

// benchCounter is what a benchmark Sink counts while measuring.
type benchCounter struct {
	measuring atomic.Bool
	fetched   atomic.Int64 // records read by GetRecords while measuring
	mu        sync.Mutex
	txs       int64 // Sink calls that stored (each one transaction)
	records   int64
	latencies []time.Duration // arrival to the call of the Sink, per record
}

func (c *benchCounter) count(bs []kinesisload.Batch, called time.Time) {
	if !c.measuring.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.txs++
	for _, b := range bs {
		c.records += int64(len(b.Records))
		for _, r := range b.Records {
			c.latencies = append(c.latencies, called.Sub(r.ArrivalTime))
		}
	}
}

// OnFetched counts the records read while measuring.
func (c *benchCounter) OnFetched(e kinesisload.Fetched) {
	if c.measuring.Load() {
		c.fetched.Add(int64(e.Records))
	}
}

// benchPerShard is a Sink delivering each batch alone (Deliver), counted.
type benchPerShard struct {
	c     *benchCounter
	inner kinesisload.Sink
}

func (s benchPerShard) Deliver(ctx context.Context, b kinesisload.Batch) error {
	called := time.Now()
	err := s.inner.Deliver(ctx, b)
	if err == nil && len(b.Records) > 0 {
		s.c.count([]kinesisload.Batch{b}, called)
	}
	return err
}

// benchMulti is a MultiSink, counted.
type benchMulti struct {
	benchPerShard
	inner kinesisload.MultiSink
}

func (s benchMulti) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	called := time.Now()
	err := s.inner.DeliverMulti(ctx, bs)
	if err == nil {
		s.c.count(bs, called)
	}
	return err
}

// noopSink stores nothing: the Loader's own cost, without a database.
type noopSink struct{}

func (noopSink) Deliver(context.Context, kinesisload.Batch) error        { return nil }
func (noopSink) DeliverMulti(context.Context, []kinesisload.Batch) error { return nil }

// insertSink is the per-page Sink many programs start with: per batch,
// one transaction of an INSERT per record (pipelined) and an upsert of
// the shard's checkpoint.
type insertSink struct{ db *pgxpool.Pool }

func (s insertSink) Deliver(ctx context.Context, b kinesisload.Batch) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	batch := &pgx.Batch{}
	for _, r := range b.Records {
		batch.Queue(`INSERT INTO tidemark_records (stream, shard, seq, subseq, partition_key, data, arrival) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			b.Stream, b.ShardID, r.SequenceNumber, r.SubSequenceNumber, r.PartitionKey, r.Data, r.ArrivalTime)
	}
	batch.Queue(`INSERT INTO tidemark_checkpoints (stream, shard, position) VALUES ($1, $2, $3)
		ON CONFLICT (stream, shard) DO UPDATE SET position = EXCLUDED.position, updated_at = now()`, b.Stream, b.ShardID, b.Checkpoint.String())
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// cpu is a moment's CPU time of this process and of the PostgreSQL
// server (its postmaster and every child, and what its exited children
// used).
type cpu struct{ host, pg time.Duration }

func sampleCPU(t *testing.T, srv *pgtest.Server) cpu {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	host := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	pid, err := srv.PID()
	if err != nil {
		t.Fatal(err)
	}
	const tick = 10 * time.Millisecond // CLK_TCK 100
	var pg time.Duration
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) in parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		self, _ := strconv.Atoi(strings.Fields(s)[0])
		ppid, _ := strconv.Atoi(f[1])
		if self != pid && ppid != pid {
			continue
		}
		for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
			n, _ := strconv.ParseInt(f[i], 10, 64)
			pg += time.Duration(n) * tick
		}
	}
	return cpu{host: host, pg: pg}
}

// benchResult is one configuration's figures over the measurement.
type benchResult struct {
	name          string
	seconds       float64
	txs, records  int64
	fetched, put  int64 // records read and written while measuring
	host, pg      time.Duration
	p50, p99, max time.Duration
}

func (r benchResult) txPerSec() float64   { return float64(r.txs) / r.seconds }
func (r benchResult) rowsPerSec() float64 { return float64(r.records) / r.seconds }

// perRecord returns d per record stored.
func (r benchResult) perRecord(d time.Duration) time.Duration {
	if r.records == 0 {
		return 0
	}
	return d / time.Duration(r.records)
}

func (r benchResult) String() string {
	return fmt.Sprintf("%-38s %9.1f tx/s %9.0f rows/s (read %.0f/s, written %.0f/s)  host CPU %5.2f cores  PostgreSQL CPU %5.2f cores  latency p50 %v p99 %v max %v",
		r.name, r.txPerSec(), r.rowsPerSec(), float64(r.fetched)/r.seconds, float64(r.put)/r.seconds, r.host.Seconds()/r.seconds, r.pg.Seconds()/r.seconds,
		r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond))
}

// benchRun is one configuration: a Loader into sink.
type benchRun struct {
	name   string
	sink   func(c *benchCounter) kinesisload.Sink
	config func(*kinesisload.Config)
}

// measure runs r: the producer puts records with put (until the run
// ends; it adds what it put to written), the Loader reads them; after
// warm it counts for measure.
func measure(t *testing.T, srv *pgtest.Server, fake *kinesistest.Fake, stream string, r benchRun, put func(ctx context.Context, written *atomic.Int64), warm, measure time.Duration) benchResult {
	t.Helper()
	c := &benchCounter{}
	cfg := kinesisload.DefaultConfig()
	cfg.Stream, cfg.Sink, cfg.Dir = stream, r.sink(c), t.TempDir()
	cfg.StartPosition = scan.TrimHorizon()
	if r.config != nil {
		r.config(&cfg)
	}
	l, err := kinesisload.New(cfg, kinesisload.WithClient(fake), kinesisload.WithHooks(c), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var wg sync.WaitGroup
	var written atomic.Int64
	wg.Go(func() { put(ctx, &written) })
	select {
	case err := <-done:
		t.Fatalf("%s: Run = %v during the warm-up", r.name, err)
	case <-time.After(warm):
	}
	before := sampleCPU(t, srv)
	began := time.Now()
	putBefore := written.Load()
	c.measuring.Store(true)
	select {
	case err := <-done:
		t.Fatalf("%s: Run = %v during the measurement", r.name, err)
	case <-time.After(measure):
	}
	c.measuring.Store(false)
	after := sampleCPU(t, srv)
	res := benchResult{name: r.name, seconds: time.Since(began).Seconds(), host: after.host - before.host, pg: after.pg - before.pg,
		fetched: c.fetched.Load(), put: written.Load() - putBefore}
	cancel()
	wg.Wait()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("%s: Run = %v", r.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res.txs, res.records = c.txs, c.records
	if len(c.latencies) > 0 {
		slices.Sort(c.latencies)
		res.p50 = c.latencies[len(c.latencies)/2]
		res.p99 = c.latencies[len(c.latencies)*99/100]
		res.max = c.latencies[len(c.latencies)-1]
	}
	t.Log(res)
	return res
}

// hashKeys returns the starting hash key of every shard of stream.
func hashKeys(t *testing.T, fake *kinesistest.Fake, stream string) []string {
	t.Helper()
	var keys []string
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := fake.ListShards(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range out.Shards {
			keys = append(keys, aws.ToString(s.HashKeyRange.StartingHashKey))
		}
		if out.NextToken == nil {
			return keys
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// producer returns a put function that writes perShard records of size
// bytes to every shard each tick, until ctx ends; with tick 0 it writes
// them once and returns.
func producer(t *testing.T, fake *kinesistest.Fake, stream string, keys []string, perShard, size int, tick time.Duration) func(ctx context.Context, written *atomic.Int64) {
	data := make([]byte, size)
	for i := range data {
		data[i] = 'a' + byte(i%26)
	}
	return func(ctx context.Context, written *atomic.Int64) {
		var ticks <-chan time.Time
		if tick > 0 {
			tk := time.NewTicker(tick)
			defer tk.Stop()
			ticks = tk.C
		}
		n := 0
		for {
			var entries []types.PutRecordsRequestEntry
			for range perShard {
				for _, k := range keys {
					n++
					entries = append(entries, types.PutRecordsRequestEntry{Data: data, PartitionKey: aws.String(strconv.Itoa(n)), ExplicitHashKey: aws.String(k)})
				}
			}
			for len(entries) > 0 {
				chunk := entries[:min(500, len(entries))]
				entries = entries[len(chunk):]
				out, err := fake.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: chunk})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("PutRecords: %v", err)
					}
					return
				}
				written.Add(int64(len(chunk)) - int64(aws.ToInt32(out.FailedRecordCount)))
			}
			if tick == 0 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
		}
	}
}

// benchDB returns a pool of up to 32 connections on the server's database,
// with the Sink's tables.
func benchDB(t *testing.T) (*pgtest.Server, *pgxpool.Pool) {
	t.Helper()
	srv, _ := pgtest.Start(t)
	pc, err := pgxpool.ParseConfig(srv.DSN(pgtest.Database))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 32
	db, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := CreateSchema(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return srv, db
}

// TestBench runs the benchmarks of BENCHMARKS.md with -pgbench.
func TestBench(t *testing.T) {
	if !*pgbench {
		t.Skip("the benchmarks run with -pgbench (minutes; see BENCHMARKS.md)")
	}
	t.Run("QuietShards", benchQuietShards)
	t.Run("ReadCap", benchReadCap)
}

// 1,000 shards at 10 records/s each: transactions per second and CPU,
// per-page Deliver against a 1 s window across shards; the Loader's own
// CPU (a Sink that stores nothing) is measured in both modes, so that the
// Sink's share of the host's CPU is the difference.
func benchQuietShards(t *testing.T) {
	const shards, warm = 1000, 15 * time.Second
	srv, db := benchDB(t)
	sink, err := New(db, Config{})
	if err != nil {
		t.Fatal(err)
	}
	window := func(c *kinesisload.Config) { c.MaxBatchWait = time.Second }
	runs := []benchRun{
		{name: "per-page Deliver, no-op Sink", sink: func(c *benchCounter) kinesisload.Sink { return benchPerShard{c, noopSink{}} }},
		{name: "per-page Deliver, pgsink", sink: func(c *benchCounter) kinesisload.Sink { return benchPerShard{c, sink.PerShard()} }},
		{name: "1 s window across shards, no-op Sink", config: window, sink: func(c *benchCounter) kinesisload.Sink {
			return benchMulti{benchPerShard{c, noopSink{}}, noopSink{}}
		}},
		{name: "1 s window across shards, pgsink", config: window, sink: func(c *benchCounter) kinesisload.Sink {
			return txBenchMulti{benchMulti{benchPerShard{c, sink}, sink}, sink}
		}},
	}
	var res []benchResult
	for i, r := range runs {
		fake := kinesistest.New(kinesistest.WithShardLimit(shards))
		stream := fmt.Sprintf("quiet-%d", i)
		kinesistest.NewStream(t, fake, stream, shards)
		keys := hashKeys(t, fake, stream)
		res = append(res, measure(t, srv, fake, stream, r, producer(t, fake, stream, keys, 1, 100, 100*time.Millisecond), warm, *pgbenchMeasure))
	}
	pageNoop, page, winNoop, win := res[0], res[1], res[2], res[3]
	sinkCPU := func(r, noop benchResult) time.Duration {
		return r.perRecord(r.pg) + max(r.perRecord(r.host)-noop.perRecord(noop.host), 0)
	}
	t.Logf("transactions: %.1f/s per page, %.2f/s with windows: %.0fx fewer (goal >= 50x)", page.txPerSec(), win.txPerSec(), page.txPerSec()/win.txPerSec())
	t.Logf("Sink CPU per record (PostgreSQL + host beyond the no-op Sink): %v per page, %v with windows: %.1fx less (goal >= 5x)",
		sinkCPU(page, pageNoop), sinkCPU(win, winNoop), float64(sinkCPU(page, pageNoop))/float64(sinkCPU(win, winNoop)))
	t.Logf("PostgreSQL CPU per record: %v per page, %v with windows: %.1fx less", page.perRecord(page.pg), win.perRecord(win.pg), float64(page.perRecord(page.pg))/float64(win.perRecord(win.pg)))
	t.Logf("host CPU per record: %v per page, %v with windows", page.perRecord(page.host), win.perRecord(win.host))
}

// txBenchMulti is benchMulti that is a TransactionalSink too: the
// Loader's exactly-once path (start batches, Checkpoints).
type txBenchMulti struct {
	benchMulti
	tx kinesisload.TransactionalSink
}

func (s txBenchMulti) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return s.tx.Checkpoints(ctx, stream)
}

// 16 shards at the 2 MiB/s read cap: rows per second stored with COPY
// windows across shards against per-page INSERT (and per-page COPY,
// pgsink's Deliver). Twice: from a backlog written before the Loader
// starts, which it reads at the cap (what the Sink keeps up with), and
// with records written live at the cap (the latency from arrival to
// Deliver; the producer shares this machine's CPU).
func benchReadCap(t *testing.T) {
	const shards, size, warm = 16, 1024, 10 * time.Second
	srv, db := benchDB(t)
	sink, err := New(db, Config{})
	if err != nil {
		t.Fatal(err)
	}
	base := func(c *kinesisload.Config) {
		c.RecordsPerCall = 2000 // a page of about 2 MiB: one a second at the cap
		// Every GetRecords call reserves the largest page (10 MiB): 16
		// shards reserve 166 MiB, beside the pages in windows.
		c.MaxBufferedBytes = 512 << 20
	}
	runs := []benchRun{
		{name: "per-page INSERT", config: base, sink: func(c *benchCounter) kinesisload.Sink { return benchPerShard{c, insertSink{db}} }},
		{name: "per-page COPY (pgsink.PerShard)", config: base, sink: func(c *benchCounter) kinesisload.Sink {
			return benchPerShard{c, sink.PerShard()}
		}},
		{name: "1 s COPY window across shards", config: func(c *kinesisload.Config) { base(c); c.MaxBatchWait = time.Second }, sink: func(c *benchCounter) kinesisload.Sink {
			return txBenchMulti{benchMulti{benchPerShard{c, sink}, sink}, sink}
		}},
		{name: "1 s / 16 MiB COPY window", config: func(c *kinesisload.Config) {
			base(c)
			c.MaxBatchWait, c.MaxBatchBytes = time.Second, 16<<20
		}, sink: func(c *benchCounter) kinesisload.Sink {
			return txBenchMulti{benchMulti{benchPerShard{c, sink}, sink}, sink}
		}},
	}
	// The fake's write limits are off (Kinesis takes 1 MiB/s per shard; a
	// backlog is read just as fast), its read limits on.
	limits := kinesistest.DefaultLimits()
	limits.WriteBytesPerSecond, limits.WriteRecordsPerSecond = 0, 0
	perSecond := (2 << 20) / (size + 6)    // records per shard per second at the cap
	capRows := float64(shards * perSecond) // the read cap in rows/s
	for i, r := range runs {
		fake := kinesistest.New(kinesistest.WithLimits(limits))
		stream := fmt.Sprintf("backlog-%d", i)
		kinesistest.NewStream(t, fake, stream, shards)
		keys := hashKeys(t, fake, stream)
		// The backlog: what the cap reads during the warm-up and the
		// measurement, and 5 s more.
		var written atomic.Int64
		backlog := int((warm + *pgbenchMeasure + 5*time.Second).Seconds()) * perSecond
		producer(t, fake, stream, keys, backlog, size, 0)(context.Background(), &written)
		r.name += ", backlog"
		res := measure(t, srv, fake, stream, r, func(context.Context, *atomic.Int64) {}, warm, *pgbenchMeasure)
		t.Logf("%s: %.0f rows/s stored: %.1f%% of the read cap (%.0f rows/s; goal >= 95%%)", r.name, res.rowsPerSec(), 100*res.rowsPerSec()/capRows, capRows)
	}
	for i, r := range runs {
		fake := kinesistest.New(kinesistest.WithLimits(limits))
		stream := fmt.Sprintf("live-%d", i)
		kinesistest.NewStream(t, fake, stream, shards)
		keys := hashKeys(t, fake, stream)
		r.name += ", live"
		res := measure(t, srv, fake, stream, r, producer(t, fake, stream, keys, perSecond/10, size, 100*time.Millisecond), warm, *pgbenchMeasure)
		t.Logf("%s: %.0f rows/s stored: %.1f%% of the read cap, %.1f%% of what was written (%.0f rows/s)",
			r.name, res.rowsPerSec(), 100*res.rowsPerSec()/capRows, 100*float64(res.records)/float64(res.put), float64(res.put)/res.seconds)
	}
}
