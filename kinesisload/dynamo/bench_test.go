package dynamo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// Flags of the fleet benchmarks. The defaults are the CI-cheap form
// (go test -run '^$' -bench . -benchtime 1x); BENCHMARKS.md gives the
// settings of the reported runs.
var (
	benchLease = flag.Duration("fleet.lease", 3*time.Second,
		"LeaseDuration of the failover and balance benchmarks (the package default is 10s)")
	benchRenewDiv = flag.Int("fleet.renewdiv", 0,
		"RenewInterval of the failover and balance benchmarks as LeaseDuration/n (0: the package default, /10)")
	benchCostLease = flag.Duration("fleet.costlease", DefaultLeaseDuration,
		"LeaseDuration of the coordination-cost benchmark")
	benchWindow = flag.Duration("fleet.window", 10*time.Second,
		"how long the coordination-cost benchmark counts calls, idle and at load")
	benchCheckpoint = flag.Duration("fleet.checkpoint", 10*time.Second,
		"CheckpointInterval of the coordination-cost benchmark at load")
	benchShards = flag.Int("fleet.costshards", 1000, "shards of the coordination-cost benchmark")
	benchMiB    = flag.Int("fleet.mib", 4, "MiB of backlog per shard of the throughput benchmark")
)

// counter is an http.RoundTripper in front of one host's DynamoDB client
// that counts calls by operation and the bytes of Query answers.
type counter struct {
	base       http.RoundTripper
	mu         sync.Mutex
	ops        map[string]int64
	queryBytes int64
	queryRCU   float64
}

func newCounter(base http.RoundTripper) *counter {
	return &counter{base: base, ops: map[string]int64{}}
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	t := req.Header.Get("X-Amz-Target")
	op := t[strings.LastIndexByte(t, '.')+1:]
	if op == "Query" && req.Body != nil {
		// Ask for the read capacity the Query consumed (dynalite
		// computes it from the items' sizes as DynamoDB does); the
		// emulator does not check the signature of the changed body.
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if !bytes.Contains(body, []byte("ReturnConsumedCapacity")) {
			body = append([]byte(`{"ReturnConsumedCapacity":"TOTAL",`), body[1:]...)
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	resp, err := c.base.RoundTrip(req)
	c.mu.Lock()
	c.ops[op]++
	c.mu.Unlock()
	if err == nil && op == "Query" {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			ConsumedCapacity struct{ CapacityUnits float64 }
		}
		_ = json.Unmarshal(body, &out)
		c.mu.Lock()
		c.queryBytes += int64(len(body))
		c.queryRCU += out.ConsumedCapacity.CapacityUnits
		c.mu.Unlock()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return nil, rerr
		}
	}
	return resp, err
}

// take returns the counts so far (calls by operation, bytes and read
// capacity units of the Query answers) and resets them.
func (c *counter) take() (map[string]int64, int64, float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, qb, rcu := c.ops, c.queryBytes, c.queryRCU
	c.ops, c.queryBytes, c.queryRCU = map[string]int64{}, 0, 0
	return ops, qb, rcu
}

// shardTally is what one shard delivered.
type shardTally struct {
	host        string // the host of the last delivery
	last        time.Time
	first       time.Time
	firstBytes  int64
	bytes       int64
	byHost      map[string]time.Time // first delivery by each host
	deliveredBy map[string]int64     // records by host
}

// benchFleet is a fake stream read by Loaders on real clocks whose
// Coordinators share a dynalite table, for the benchmarks.
type benchFleet struct {
	tb       testing.TB
	fake     *kinesistest.Fake
	endpoint string
	table    string
	cfg      Config
	loader   func(*kinesisload.Config)
	inspect  *Coordinator
	keys     []string // a hash key of each shard, in shard order
	ids      []string

	mu     sync.Mutex
	tally  map[string]*shardTally
	hosts  map[string]*benchHost
	closed map[string]bool
}

type benchHost struct {
	c      *Coordinator
	faults *faults
	count  *counter
	l      *kinesisload.Loader
	cancel context.CancelFunc
	done   chan error
}

func newBenchFleet(tb testing.TB, endpoint string, fake *kinesistest.Fake, shards int, cfg Config, loader func(*kinesisload.Config)) *benchFleet {
	tb.Helper()
	kinesistest.NewStream(tb, fake, "orders", shards)
	r := &benchFleet{tb: tb, fake: fake, endpoint: endpoint, table: fmt.Sprintf("tidemark-bench-%d", tableSeq.Add(1)), cfg: cfg, loader: loader,
		tally: map[string]*shardTally{}, hosts: map[string]*benchHost{}, closed: map[string]bool{}}
	cfg.Table, cfg.HostID, cfg.CreateTable = r.table, "inspector", true
	insp, err := New(newClient(endpoint, newFaults()), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	r.inspect = insp
	var token *string
	for {
		in := &kinesis.ListShardsInput{StreamName: aws.String("orders")}
		if token != nil {
			in = &kinesis.ListShardsInput{NextToken: token}
		}
		out, err := fake.ListShards(context.Background(), in)
		if err != nil {
			tb.Fatal(err)
		}
		for _, s := range out.Shards {
			r.ids = append(r.ids, aws.ToString(s.ShardId))
			r.keys = append(r.keys, aws.ToString(s.HashKeyRange.StartingHashKey))
		}
		if out.NextToken == nil {
			break
		}
		token = out.NextToken
	}
	tb.Cleanup(func() {
		var wg sync.WaitGroup
		for id := range r.hosts {
			wg.Go(func() { r.close(id) })
		}
		wg.Wait()
	})
	return r
}

func (r *benchFleet) sink(host string) kinesisload.Sink {
	return kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		now := time.Now()
		var n int64
		for _, rec := range b.Records {
			n += int64(len(rec.Data))
		}
		r.mu.Lock()
		t := r.tally[b.ShardID]
		if t == nil {
			t = &shardTally{byHost: map[string]time.Time{}, deliveredBy: map[string]int64{}, first: now, firstBytes: n}
			r.tally[b.ShardID] = t
		}
		if _, ok := t.byHost[host]; !ok {
			t.byHost[host] = now
		}
		t.host, t.last = host, now
		t.bytes += n
		t.deliveredBy[host] += int64(len(b.Records))
		r.mu.Unlock()
		return nil
	})
}

func (r *benchFleet) start(host string) {
	r.tb.Helper()
	f := newFaults()
	cnt := newCounter(f)
	cfg := r.cfg
	cfg.Table, cfg.CreateTable, cfg.HostID = r.table, true, host
	c, err := New(newClient(r.endpoint, cnt), cfg)
	if err != nil {
		r.tb.Fatal(err)
	}
	lc := kinesisload.Config{Stream: "orders", Sink: r.sink(host), StartPosition: scan.TrimHorizon(),
		IdleWait: 200 * time.Millisecond, ListShardsInterval: 5 * time.Second}
	if r.loader != nil {
		r.loader(&lc)
	}
	l, err := kinesisload.New(lc, kinesisload.WithClient(r.fake), kinesisload.WithCoordinator(c), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		r.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	r.mu.Lock()
	r.hosts[host] = &benchHost{c: c, faults: f, count: cnt, l: l, cancel: cancel, done: done}
	r.mu.Unlock()
}

// close stops host gracefully (a planned move); a killed host's Run is
// already over.
func (r *benchFleet) close(host string) {
	r.mu.Lock()
	h, done := r.hosts[host], r.closed[host]
	r.closed[host] = true
	r.mu.Unlock()
	if h == nil || done {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.l.Close(ctx); err != nil {
		r.tb.Errorf("host %s: Close: %v", host, err)
	}
	if err := <-h.done; !errors.Is(err, kinesisload.ErrClosed) && !errors.Is(err, context.Canceled) {
		r.tb.Errorf("host %s: Run = %v", host, err)
	}
	h.cancel()
}

// kill stops host abruptly: every DynamoDB call of it fails from now on
// (its heartbeats stop, it releases nothing) and its Run is cancelled
// without Close.
func (r *benchFleet) kill(host string) {
	r.mu.Lock()
	h := r.hosts[host]
	r.closed[host] = true
	r.mu.Unlock()
	h.faults.set(func(f *faults) { f.killed = true })
	h.cancel()
	<-h.done
}

// owners reads the table: the shards each host owns.
func (r *benchFleet) owners() (map[string][]string, StreamInfo) {
	r.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := r.inspect.Inspect(ctx, "orders")
	if err != nil {
		r.tb.Fatal(err)
	}
	out := map[string][]string{}
	for id, sh := range info.Shards {
		if sh.Owner != "" {
			out[sh.Owner] = append(out[sh.Owner], id)
		}
	}
	return out, info
}

// fair reports whether every host of hosts owns within one shard of its
// fair share of shards (and nothing is owned by anyone else).
func fair(owned map[string][]string, hosts []string, shards int) bool {
	share := float64(shards) / float64(len(hosts))
	n := 0
	for _, h := range hosts {
		if math.Abs(float64(len(owned[h]))-share) > 1 {
			return false
		}
		n += len(owned[h])
	}
	return n == shards
}

// waitFair polls the table until the hosts are within one shard of their
// fair share, and returns how long that took from start.
func (r *benchFleet) waitFair(start time.Time, hosts []string, limit time.Duration) time.Duration {
	r.tb.Helper()
	for {
		owned, _ := r.owners()
		if fair(owned, hosts, len(r.ids)) {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			counts := map[string]int{}
			for h, s := range owned {
				counts[h] = len(s)
			}
			r.tb.Fatalf("hosts %v not within one shard of fair share after %v: %v", hosts, limit, counts)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produce puts one record of size bytes into every shard every interval
// until stop is closed.
func (r *benchFleet) produce(stop <-chan struct{}, interval time.Duration, size int) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		data := make([]byte, size)
		for {
			for i := 0; i < len(r.keys); i += 500 {
				var recs []types.PutRecordsRequestEntry
				for _, k := range r.keys[i:min(i+500, len(r.keys))] {
					recs = append(recs, types.PutRecordsRequestEntry{PartitionKey: aws.String("p"), ExplicitHashKey: aws.String(k), Data: data})
				}
				if _, err := r.fake.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: recs}); err != nil {
					r.tb.Error(err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	return &wg
}

// backlog writes perShard records of size bytes into every shard.
func (r *benchFleet) backlog(perShard, size int) {
	r.tb.Helper()
	data := make([]byte, size)
	for i, k := range r.keys {
		for n := 0; n < perShard; n += 100 {
			var recs []types.PutRecordsRequestEntry
			for range min(100, perShard-n) {
				recs = append(recs, types.PutRecordsRequestEntry{PartitionKey: aws.String("p"), ExplicitHashKey: aws.String(k), Data: data})
			}
			out, err := r.fake.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: recs})
			if err != nil || aws.ToInt32(out.FailedRecordCount) != 0 {
				r.tb.Fatalf("backlog of shard %d: %v", i, err)
			}
		}
	}
}

// fleetConfig is the Config of the failover and balance benchmarks.
func fleetConfig(lease time.Duration) Config {
	cfg := Config{LeaseDuration: lease}
	if *benchRenewDiv > 0 {
		cfg.RenewInterval = lease / time.Duration(*benchRenewDiv)
	}
	return cfg
}

func ratio(d, lease time.Duration) float64 { return float64(d) / float64(lease) }

// BenchmarkFleetFailover: 3 hosts share 48 shards (16 each) while every
// shard receives a record every 100 ms; one host is killed (its
// DynamoDB calls fail from then on, its Run is cancelled without Close:
// no Leave, no Release). Reported: the time until each of its shards
// delivers again from another host, p50 and max, as multiples of
// LeaseDuration (-fleet.lease). Goal: max <= 2.
func BenchmarkFleetFailover(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	lease := *benchLease
	var p50, worst float64
	for b.Loop() {
		r := newBenchFleet(b, e.Endpoint, kinesistest.New(kinesistest.WithoutLimits()), 48, fleetConfig(lease), nil)
		stop := make(chan struct{})
		wg := r.produce(stop, 100*time.Millisecond, 100)
		hosts := []string{"a", "b", "c"}
		for _, h := range hosts {
			r.start(h)
		}
		r.waitFair(time.Now(), hosts, 20*lease+time.Minute)
		time.Sleep(lease / 2) // every host delivering
		owned, _ := r.owners()
		victim := owned["b"]
		killed := time.Now()
		r.kill("b")
		var took []time.Duration
		deadline := killed.Add(10*lease + 30*time.Second)
		for len(took) < len(victim) {
			took = took[:0]
			r.mu.Lock()
			for _, id := range victim {
				t := r.tally[id]
				var first time.Time
				for h, at := range t.byHost {
					if h != "b" && at.After(killed) && (first.IsZero() || at.Before(first)) {
						first = at
					}
				}
				if !first.IsZero() {
					took = append(took, first.Sub(killed))
				}
			}
			r.mu.Unlock()
			if time.Now().After(deadline) {
				b.Fatalf("%d of the killed host's %d shards never delivered again", len(victim)-len(took), len(victim))
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		slices.Sort(took)
		p50, worst = ratio(took[len(took)/2], lease), ratio(took[len(took)-1], lease)
		b.Logf("lease %v: the killed host held %d shards; again delivering after %v (p50) .. %v (max)", lease, len(victim), took[len(took)/2], took[len(took)-1])
	}
	b.ReportMetric(lease.Seconds(), "lease-s")
	b.ReportMetric(p50, "p50-leases")
	b.ReportMetric(worst, "max-leases")
}

// BenchmarkFleetBalance: 48 shards receiving a record each every 100 ms;
// 3 hosts balanced, then a fourth joins, then it leaves by Close (a
// planned move), then a host is killed (an unplanned leave). Reported:
// the time from each event until every live host owns within one shard of
// its fair share, as multiples of LeaseDuration (-fleet.lease). Goal:
// <= 3.
func BenchmarkFleetBalance(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	lease := *benchLease
	var join, leave, kill time.Duration
	for b.Loop() {
		r := newBenchFleet(b, e.Endpoint, kinesistest.New(kinesistest.WithoutLimits()), 48, fleetConfig(lease), nil)
		stop := make(chan struct{})
		wg := r.produce(stop, 100*time.Millisecond, 100)
		for _, h := range []string{"a", "b", "c"} {
			r.start(h)
		}
		limit := 20*lease + time.Minute
		r.waitFair(time.Now(), []string{"a", "b", "c"}, limit)
		time.Sleep(lease)

		at := time.Now()
		r.start("d")
		join = r.waitFair(at, []string{"a", "b", "c", "d"}, limit)
		time.Sleep(lease)

		at = time.Now()
		r.close("d")
		leave = r.waitFair(at, []string{"a", "b", "c"}, limit)
		time.Sleep(lease)

		at = time.Now()
		r.kill("c")
		kill = r.waitFair(at, []string{"a", "b"}, limit)
		close(stop)
		wg.Wait()
		b.Logf("lease %v: join %v, leave (Close) %v, kill %v", lease, join, leave, kill)
	}
	b.ReportMetric(lease.Seconds(), "lease-s")
	b.ReportMetric(ratio(join, lease), "join-leases")
	b.ReportMetric(ratio(leave, lease), "leave-leases")
	b.ReportMetric(ratio(kill, lease), "kill-leases")
}

// BenchmarkFleetCoordinationCost: 4 hosts share -fleet.costshards shards
// (1,000); once they are balanced, every DynamoDB call of every host is
// counted for -fleet.window while the stream is idle, then as long while
// every shard receives a record every 500 ms (each shard commits all the
// time), with CheckpointInterval -fleet.checkpoint. Reported: writes
// (PutItem, UpdateItem, DeleteItem) per second, KCL's model with the same
// settings, their ratio, and the reads: GetItem and Query calls, and the
// Queries' read capacity units as the emulator computes them (asked for
// with ReturnConsumedCapacity, which the Coordinator does not set: a
// strongly consistent read costs one unit per 4 KB of items read) and the
// bytes of their answers.
//
// KCL's model: every lease is renewed (one write) every LeaseDuration/3,
// and every shard writes a checkpoint once per CheckpointInterval at load
// (none when idle): shards*3/LeaseDuration + shards/CheckpointInterval.
func BenchmarkFleetCoordinationCost(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	lease, window, ckpt, shards := *benchCostLease, *benchWindow, *benchCheckpoint, *benchShards
	type phase struct {
		writes, gets, queries, queryBytes int64
		queryRCU                          float64
	}
	var idle, load phase
	for b.Loop() {
		fake := kinesistest.New(kinesistest.WithoutLimits(), kinesistest.WithShardLimit(shards+10))
		r := newBenchFleet(b, e.Endpoint, fake, shards, Config{LeaseDuration: lease, CheckpointInterval: ckpt},
			func(c *kinesisload.Config) { c.ListShardsInterval = 0 }) // the default: a Loader also reads the table when it lists
		hosts := []string{"a", "b", "c", "d"}
		for _, h := range hosts {
			r.start(h)
		}
		r.waitFair(time.Now(), hosts, 10*time.Minute)
		measure := func() phase {
			for _, h := range hosts {
				r.hosts[h].count.take()
			}
			time.Sleep(window)
			var p phase
			for _, h := range hosts {
				ops, qb, rcu := r.hosts[h].count.take()
				p.queryRCU += rcu
				p.writes += ops["PutItem"] + ops["UpdateItem"] + ops["DeleteItem"]
				p.gets += ops["GetItem"]
				p.queries += ops["Query"]
				p.queryBytes += qb
			}
			return p
		}
		time.Sleep(ckpt + lease) // the initial positions are written
		idle = measure()
		stop := make(chan struct{})
		wg := r.produce(stop, 500*time.Millisecond, 100)
		time.Sleep(ckpt) // every shard is committing
		load = measure()
		close(stop)
		wg.Wait()
		if owned, _ := r.owners(); !fair(owned, hosts, shards) {
			b.Logf("not balanced at the end of the measure")
		}
	}
	s := window.Seconds()
	kclIdle := float64(shards) * 3 / lease.Seconds()
	kclLoad := kclIdle + float64(shards)/ckpt.Seconds()
	b.ReportMetric(float64(idle.writes)/s, "idle-writes/s")
	b.ReportMetric(kclIdle, "kcl-idle-writes/s")
	b.ReportMetric(kclIdle/(float64(idle.writes)/s), "idle-kcl/ours")
	b.ReportMetric(float64(load.writes)/s, "load-writes/s")
	b.ReportMetric(kclLoad, "kcl-load-writes/s")
	b.ReportMetric(kclLoad/(float64(load.writes)/s), "load-kcl/ours")
	b.ReportMetric(float64(idle.queries)/s, "idle-queries/s")
	b.ReportMetric(float64(idle.queryBytes)/s/1024, "idle-query-KiB/s")
	b.ReportMetric(idle.queryRCU/s, "idle-query-RCU/s")
	b.ReportMetric(float64(idle.gets)/s, "idle-getitems/s")
	b.ReportMetric(float64(load.queries)/s, "load-queries/s")
	b.ReportMetric(float64(load.queryBytes)/s/1024, "load-query-KiB/s")
	b.ReportMetric(load.queryRCU/s, "load-query-RCU/s")
	b.ReportMetric(float64(load.gets)/s, "load-getitems/s")
}

// BenchmarkFleetThroughput: 16 shards of the fake with the real read
// limits (5 GetRecords calls and 2 MiB per second per shard; the write
// limits off so that the backlog is written at once) read by 1 host and
// by 4 hosts sharing them through dynalite. The hosts are balanced before
// the backlog (-fleet.mib MiB of 10 KiB records per shard) is written.
// Reported: each one's mean rate per shard (bytes after the first batch
// over the time from the first batch to the last), its lowest shard's,
// and 4 hosts over 1. Goal: the same (ratio about 1).
func BenchmarkFleetThroughput(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	const shards, size = 16, 10 << 10
	perShard := *benchMiB << 20 / size
	rate := map[int][2]float64{}
	for b.Loop() {
		for _, n := range []int{1, 4} {
			l := kinesistest.DefaultLimits()
			l.WriteBytesPerSecond, l.WriteRecordsPerSecond = 0, 0
			r := newBenchFleet(b, e.Endpoint, kinesistest.New(kinesistest.WithLimits(l)), shards, Config{},
				func(c *kinesisload.Config) { c.RecordsPerCall = 41 }) // 420 KB pages, a fifth of the budget
			var hosts []string
			for i := range n {
				hosts = append(hosts, string(rune('a'+i)))
				r.start(hosts[i])
			}
			r.waitFair(time.Now(), hosts, 10*time.Minute)
			r.backlog(perShard, size)
			deadline := time.Now().Add(10 * time.Minute)
			for {
				r.mu.Lock()
				done := len(r.tally) == shards
				for _, t := range r.tally {
					done = done && t.bytes == int64(perShard*size)
				}
				r.mu.Unlock()
				if done {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d hosts: backlog not delivered in 10 minutes", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
			var sum, low float64
			r.mu.Lock()
			for _, t := range r.tally {
				v := float64(t.bytes-t.firstBytes) / t.last.Sub(t.first).Seconds()
				sum += v
				if low == 0 || v < low {
					low = v
				}
				if len(t.deliveredBy) != 1 {
					b.Logf("%d hosts: a shard moved during the measure: %v", n, t.deliveredBy)
				}
			}
			r.mu.Unlock()
			rate[n] = [2]float64{sum / shards, low}
			for _, h := range hosts {
				r.close(h)
			}
		}
	}
	const budget = 2 << 20
	b.ReportMetric(rate[1][0]/budget, "1host-of-budget")
	b.ReportMetric(rate[1][1]/budget, "1host-lowest-shard-of-budget")
	b.ReportMetric(rate[4][0]/budget, "4hosts-of-budget")
	b.ReportMetric(rate[4][1]/budget, "4hosts-lowest-shard-of-budget")
	b.ReportMetric(rate[4][0]/rate[1][0], "4hosts/1host")
}
