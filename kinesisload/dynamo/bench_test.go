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
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
		"CheckpointInterval of the coordination-cost benchmark (0: the package default)")
	benchShards = flag.Int("fleet.costshards", 1000, "shards of the coordination-cost benchmark")
	benchHosts  = flag.Int("fleet.costhosts", 4, "hosts of the coordination-cost benchmark")
	benchRate   = flag.Float64("fleet.rate", 2,
		"records per second put into every shard at load in the coordination-cost benchmark (and the small fleet's)")
	benchKCLCheckpoint = flag.Duration("fleet.kclcheckpoint", 0,
		"the checkpoint interval of KCL's model at load (0: -fleet.checkpoint, or RenewInterval when that is 0)")
	benchSmallRate       = flag.Float64("fleet.smallrate", 10, "records per second put into every shard of the small fleet")
	benchSmallWindow     = flag.Duration("fleet.smallwindow", time.Minute, "how long the small fleet's calls are counted")
	benchSmallCheckpoint = flag.Duration("fleet.smallcheckpoint", 0, "CheckpointInterval of the small fleet (0: the package default)")
	benchMiB             = flag.Int("fleet.mib", 4, "MiB of backlog per shard of the throughput benchmark")
)

// counter is an http.RoundTripper in front of one host's DynamoDB client
// that counts its calls by operation, the capacity units each consumed
// (asked for with ReturnConsumedCapacity, which the coordinator does not
// set: dynalite computes them from the items' sizes as DynamoDB does:
// a strongly consistent read one unit per 4 KB, rounded up once per
// Query; a write one unit per KB of the larger of the item before and
// after), the bytes of the answers, and the units by partition key.
type counter struct {
	base  http.RoundTripper
	mu    sync.Mutex
	ops   map[string]*opCount
	parts map[string]*partCount
}

// opCount is what the calls of one operation cost.
type opCount struct {
	calls int64
	units float64
	bytes int64 // of the answers
}

// partCount is the capacity units spent on one partition key.
type partCount struct{ rcu, wcu float64 }

// isRead reports whether op reads (its units are read units).
func isRead(op string) bool { return op == "GetItem" || op == "Query" }

// isCounted reports whether op is a call of the protocol whose units are
// counted (not the table's creation or description).
func isCounted(op string) bool {
	switch op {
	case "GetItem", "Query", "PutItem", "UpdateItem", "DeleteItem":
		return true
	}
	return false
}

func newCounter(base http.RoundTripper) *counter {
	return &counter{base: base, ops: map[string]*opCount{}, parts: map[string]*partCount{}}
}

// requestPartition is the partition key a request's body names.
func requestPartition(body []byte) string {
	type attr struct{ S string }
	var in struct {
		Key struct {
			Stream attr `json:"stream"`
		}
		Item struct {
			Stream attr `json:"stream"`
		}
		ExpressionAttributeValues struct {
			S attr `json:":s"`
		}
	}
	_ = json.Unmarshal(body, &in)
	for _, p := range []string{in.Key.Stream.S, in.Item.Stream.S, in.ExpressionAttributeValues.S.S} {
		if p != "" {
			return p
		}
	}
	return "?"
}

func (c *counter) RoundTrip(req *http.Request) (*http.Response, error) {
	t := req.Header.Get("X-Amz-Target")
	op := t[strings.LastIndexByte(t, '.')+1:]
	part := ""
	if isCounted(op) && req.Body != nil {
		// Ask for the capacity the call consumed; the emulator does
		// not check the signature of the changed body.
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		part = requestPartition(body)
		if !bytes.Contains(body, []byte("ReturnConsumedCapacity")) {
			body = append([]byte(`{"ReturnConsumedCapacity":"TOTAL",`), body[1:]...)
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	resp, err := c.base.RoundTrip(req)
	var units float64
	var n int64
	if err == nil && isCounted(op) {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			ConsumedCapacity struct{ CapacityUnits float64 }
		}
		_ = json.Unmarshal(body, &out)
		units, n = out.ConsumedCapacity.CapacityUnits, int64(len(body))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return nil, rerr
		}
	}
	c.mu.Lock()
	o := c.ops[op]
	if o == nil {
		o = &opCount{}
		c.ops[op] = o
	}
	o.calls++
	o.units += units
	o.bytes += n
	if part != "" {
		pc := c.parts[part]
		if pc == nil {
			pc = &partCount{}
			c.parts[part] = pc
		}
		if isRead(op) {
			pc.rcu += units
		} else {
			pc.wcu += units
		}
	}
	c.mu.Unlock()
	return resp, err
}

// get returns o, or zero counts for nil.
func (o *opCount) get() opCount {
	if o == nil {
		return opCount{}
	}
	return *o
}

// take returns the counts so far (by operation, by partition key) and
// resets them.
func (c *counter) take() (map[string]*opCount, map[string]*partCount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, parts := c.ops, c.parts
	c.ops, c.parts = map[string]*opCount{}, map[string]*partCount{}
	return ops, parts
}

// tally is the calls of several hosts over a window, added up.
type tally struct {
	window time.Duration
	ops    map[string]*opCount
	parts  map[string]*partCount
}

func newTally(window time.Duration) *tally {
	return &tally{window: window, ops: map[string]*opCount{}, parts: map[string]*partCount{}}
}

func (t *tally) add(ops map[string]*opCount, parts map[string]*partCount) {
	for op, o := range ops {
		s := t.ops[op]
		if s == nil {
			s = &opCount{}
			t.ops[op] = s
		}
		s.calls, s.units, s.bytes = s.calls+o.calls, s.units+o.units, s.bytes+o.bytes
	}
	for p, pc := range parts {
		s := t.parts[p]
		if s == nil {
			s = &partCount{}
			t.parts[p] = s
		}
		s.rcu, s.wcu = s.rcu+pc.rcu, s.wcu+pc.wcu
	}
}

// sum adds up the operations that read (reads) or write (!reads).
func (t *tally) sum(reads bool) opCount {
	var s opCount
	for op, o := range t.ops {
		if isCounted(op) && isRead(op) == reads {
			s.calls, s.units, s.bytes = s.calls+o.calls, s.units+o.units, s.bytes+o.bytes
		}
	}
	return s
}

// per returns n per second of the window.
func (t *tally) per(n float64) float64 { return n / t.window.Seconds() }

// hottest returns the partition key of the most read units and the one
// of the most write units, with their units per second.
func (t *tally) hottest() (rp string, rcu float64, wp string, wcu float64) {
	for _, p := range slices.Sorted(maps.Keys(t.parts)) {
		pc := t.parts[p]
		if pc.rcu > rcu {
			rp, rcu = p, pc.rcu
		}
		if pc.wcu > wcu {
			wp, wcu = p, pc.wcu
		}
	}
	return rp, t.per(rcu), wp, t.per(wcu)
}

// log writes the tally, one line per operation, then the totals and the
// hottest partition keys.
func (t *tally) log(tb testing.TB, name string) {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, over %v:\n", name, t.window)
	for _, op := range slices.Sorted(maps.Keys(t.ops)) {
		o := t.ops[op]
		fmt.Fprintf(&b, "  %-12s %8.2f calls/s %9.2f units/s %9.1f KiB/s of answers\n", op, t.per(float64(o.calls)), t.per(o.units), t.per(float64(o.bytes))/1024)
	}
	r, w := t.sum(true), t.sum(false)
	rp, rcu, wp, wcu := t.hottest()
	fmt.Fprintf(&b, "  reads  %.2f calls/s, %.2f RCU/s, %.1f KiB/s read; writes %.2f calls/s, %.2f WCU/s\n", t.per(float64(r.calls)), t.per(r.units), t.per(float64(r.bytes))/1024, t.per(float64(w.calls)), t.per(w.units))
	fmt.Fprintf(&b, "  hottest partition keys: %.2f RCU/s on %q, %.2f WCU/s on %q", rcu, rp, wcu, wp)
	tb.Log(b.String())
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

	// delivered, when set, counts the records delivered; seen, when
	// set, counts the deliveries of each record (shard and sequence
	// number), under mu.
	delivered *atomic.Int64
	seen      map[string]int

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
	// The inspector's calls may wait: an emulator that the hosts keep
	// busy answers slowly.
	cfg.Table, cfg.HostID, cfg.CreateTable, cfg.CallTimeout = r.table, "inspector", true, 30*time.Second
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
		r.waitDials()
	})
	return r
}

// waitDials waits (at most a dial's timeout) until no connection the
// hosts' transports began dialing for a call since given up is still
// being dialed (an emulator kept busy accepts late), then closes their
// idle connections: goleak then finds nothing of them.
func (r *benchFleet) waitDials() {
	dialing := func() bool {
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				return bytes.Contains(buf[:n], []byte("net/http.(*Transport).dialConnFor"))
			}
			buf = make([]byte, 2*len(buf))
		}
	}
	for deadline := time.Now().Add(35 * time.Second); dialing() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.hosts {
		h.faults.base.(*http.Transport).CloseIdleConnections()
	}
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
		if r.seen != nil {
			for _, rec := range b.Records {
				r.seen[b.ShardID+"/"+rec.SequenceNumber]++
			}
		}
		r.mu.Unlock()
		if r.delivered != nil {
			r.delivered.Add(int64(len(b.Records)))
		}
		return nil
	})
}

func (r *benchFleet) start(host string) {
	r.tb.Helper()
	f := newFaults()
	// As many idle connections as the SDK's default client keeps (2,
	// the net/http default, makes a busy host dial a connection for
	// most calls).
	f.base.(*http.Transport).MaxIdleConnsPerHost = 10
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := r.inspect.Inspect(ctx, "orders")
	for err != nil && ctx.Err() == nil {
		time.Sleep(time.Second)
		info, err = r.inspect.Inspect(ctx, "orders")
	}
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

// openShards counts the shards of info not COMPLETED.
func openShards(info StreamInfo) int {
	n := 0
	for _, sh := range info.Shards {
		if sh.Progress.State != kinesisload.StateCompleted {
			n++
		}
	}
	return n
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
	return r.produceN(stop, interval, 1, size, nil)
}

// produceRate puts perSecond records of size bytes into every shard each
// second (in ticks of 100 ms from 10 a second up, else one record a
// tick) until stop is closed, and counts them in put (if not nil).
func (r *benchFleet) produceRate(stop <-chan struct{}, perSecond float64, size int, put *atomic.Int64) *sync.WaitGroup {
	if perSecond >= 10 {
		return r.produceN(stop, 100*time.Millisecond, int(math.Round(perSecond/10)), size, put)
	}
	return r.produceN(stop, time.Duration(float64(time.Second)/perSecond), 1, size, put)
}

// produceN puts perTick records of size bytes into every shard every
// interval until stop is closed, and counts them in put (if not nil).
func (r *benchFleet) produceN(stop <-chan struct{}, interval time.Duration, perTick, size int, put *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		data := make([]byte, size)
		var recs []types.PutRecordsRequestEntry
		for _, k := range r.keys {
			for range perTick {
				recs = append(recs, types.PutRecordsRequestEntry{PartitionKey: aws.String("p"), ExplicitHashKey: aws.String(k), Data: data})
			}
		}
		for {
			for part := range slices.Chunk(recs, 500) {
				out, err := r.fake.PutRecords(context.Background(), &kinesis.PutRecordsInput{StreamName: aws.String("orders"), Records: part})
				if err != nil {
					r.tb.Error(err)
					return
				}
				if put != nil {
					put.Add(int64(len(part)) - int64(aws.ToInt32(out.FailedRecordCount)))
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

// split splits shard id of the stream at the middle of its hash keys.
func (r *benchFleet) split(tb testing.TB, id string) {
	tb.Helper()
	out, err := r.fake.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		tb.Fatal(err)
	}
	for _, sh := range out.Shards { // the first page: id is the first shard
		if aws.ToString(sh.ShardId) != id {
			continue
		}
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		if _, err := r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"),
			ShardToSplit: sh.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
			tb.Fatal(err)
		}
		return
	}
	tb.Fatalf("no shard %s to split", id)
}

// moves counts the owner changes (lease moves) between two views of the
// table: the epochs gained by the shards in both (a shard added since
// starts its epochs near the seconds since 2000, which are no moves).
func moves(before, after StreamInfo) uint64 {
	var n uint64
	for id, sh := range after.Shards {
		if was, ok := before.Shards[id]; ok && sh.Epoch > was.Epoch {
			n += sh.Epoch - was.Epoch
		}
	}
	return n
}

// BenchmarkFleetCoordinationCost: -fleet.costhosts hosts (4) share
// -fleet.costshards shards (1,000); once they are balanced, every DynamoDB
// call of every host is counted for -fleet.window while the stream is
// idle, then as long again while one shard splits at the window's start
// (the hints of issue 19: each host reads the items the change wrote, not
// the partition), then as long while every shard receives -fleet.rate
// records a second (each shard commits all the time), with CheckpointInterval
// -fleet.checkpoint (0: the package default). The Loaders list shards at
// the default interval. Reported, idle and at load, per second: writes
// (PutItem, UpdateItem, DeleteItem) and their write capacity units,
// reads (GetItem, Query) with their read capacity units and the bytes of
// their answers, the units of the hottest partition key, the lease moves
// (owner changes) in the window, and KCL's model with its ratio to ours;
// the log has each operation's figures.
//
// KCL's model: one lease item per shard, each renewed (one write) every
// LeaseDuration/3, and at load one checkpoint write per shard per
// -fleet.kclcheckpoint (default: -fleet.checkpoint, or RenewInterval when
// that is 0: every commit durable within a round, as ours): none when
// idle. Each of its items is under 1 KB: one write unit per write.
func BenchmarkFleetCoordinationCost(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	lease, window, ckpt, shards, nhosts := *benchCostLease, *benchWindow, *benchCheckpoint, *benchShards, *benchHosts
	renew := lease / 10 // the default RenewInterval of both versions
	kclCkpt := *benchKCLCheckpoint
	if kclCkpt == 0 {
		kclCkpt = ckpt
	}
	if kclCkpt == 0 {
		kclCkpt = renew
	}
	var idle, split, load *tally
	var idleMoves, splitMoves, loadMoves uint64
	var delivered atomic.Int64
	for b.Loop() {
		fake := kinesistest.New(kinesistest.WithoutLimits(), kinesistest.WithShardLimit(shards+10), kinesistest.WithRetention(10*time.Minute))
		r := newBenchFleet(b, e.Endpoint, fake, shards, Config{LeaseDuration: lease, CheckpointInterval: ckpt},
			func(c *kinesisload.Config) { c.ListShardsInterval = 0 }) // the default: a Loader also reads the table when it lists
		r.delivered = &delivered
		var hosts []string
		for i := range nhosts {
			hosts = append(hosts, fmt.Sprintf("h%02d", i))
			r.start(hosts[i])
		}
		began := time.Now()
		r.waitFair(began, hosts, 20*time.Minute)
		b.Logf("%d hosts balanced on %d shards in %v", nhosts, shards, time.Since(began).Round(time.Second))
		measure := func(name string, change func()) (*tally, uint64) {
			_, before := r.owners()
			for _, h := range hosts {
				r.hosts[h].count.take()
			}
			change()
			time.Sleep(window)
			t := newTally(window)
			for _, h := range hosts {
				t.add(r.hosts[h].count.take())
			}
			_, after := r.owners()
			t.log(b, name)
			return t, moves(before, after)
		}
		time.Sleep(max(ckpt, renew) + lease) // the initial positions are written
		idle, idleMoves = measure("idle", func() {})
		split, splitMoves = measure("split", func() { r.split(b, r.ids[0]) })
		stop := make(chan struct{})
		wg := r.produceRate(stop, *benchRate, 100, nil)
		time.Sleep(max(ckpt, lease)) // every shard is committing
		d0 := delivered.Load()
		load, loadMoves = measure("load", func() {})
		b.Logf("at load: %.0f records/s delivered (%.0f put)", float64(delivered.Load()-d0)/window.Seconds(), float64(shards)**benchRate)
		close(stop)
		wg.Wait()
		// The split completed one shard and added two.
		if owned, info := r.owners(); !fair(owned, hosts, openShards(info)) {
			b.Logf("not balanced at the end of the measure")
		}
	}
	kclIdle := float64(shards) * 3 / lease.Seconds()
	kclLoad := kclIdle + float64(shards)/kclCkpt.Seconds()
	b.Logf("KCL's model: %.0f writes/s idle, %.0f at load (renewals every %v, a checkpoint per shard every %v)", kclIdle, kclLoad, lease/3, kclCkpt)
	for _, p := range []struct {
		name  string
		t     *tally
		moves uint64
		kcl   float64
	}{{"idle", idle, idleMoves, kclIdle}, {"split", split, splitMoves, kclIdle}, {"load", load, loadMoves, kclLoad}} {
		w, rd := p.t.sum(false), p.t.sum(true)
		_, rcu, _, wcu := p.t.hottest()
		writes := p.t.per(float64(w.calls))
		b.ReportMetric(writes, p.name+"-writes/s")
		b.ReportMetric(p.t.per(w.units), p.name+"-WCU/s")
		b.ReportMetric(p.t.per(float64(rd.calls)), p.name+"-reads/s")
		b.ReportMetric(p.t.per(rd.units), p.name+"-RCU/s")
		b.ReportMetric(p.t.per(float64(rd.bytes))/1024, p.name+"-read-KiB/s")
		b.ReportMetric(p.t.per(float64(rd.bytes+w.bytes))/1024, p.name+"-answers-KiB/s")
		b.ReportMetric(rcu, p.name+"-hot-key-RCU/s")
		b.ReportMetric(wcu, p.name+"-hot-key-WCU/s")
		b.ReportMetric(p.t.per(float64(p.moves)), p.name+"-moves/s")
		b.ReportMetric(p.kcl, p.name+"-kcl-writes/s")
		b.ReportMetric(p.kcl/writes, p.name+"-kcl/ours")
	}
	// What the split cost in reads: the split window's read units less
	// the idle window's (the same length).
	b.ReportMetric(split.sum(true).units-idle.sum(true).units, "split-extra-RU")
	b.ReportMetric(float64(split.sum(true).calls)-float64(idle.sum(true).calls), "split-extra-reads")
}

// BenchmarkFleetSmall: the small fleet issue 19 compares with other
// consumers: 3 hosts, 12 shards, -fleet.smallrate records (100 bytes) a
// second into every shard from the start, every default of the Loader
// and of the coordinator (CheckpointInterval -fleet.smallcheckpoint, 0:
// the default). Once the hosts are balanced, every DynamoDB call is
// counted for -fleet.smallwindow (a minute). Then one host is killed
// with records flowing (its DynamoDB calls fail from then on, its Run is
// cancelled without Close: no Leave, no Release); production goes on for
// 3 lease durations, and once every record put has been delivered, the
// records delivered more than once (duplicates at a plain Sink) are
// counted; the kill comes at a random moment of a RenewInterval.
// Reported: writes, reads (GetItem and Query) and KB read (their answers;
// and of every answer, the heartbeats' included, which return the
// roster) per minute, the write and read units per minute, and the
// duplicates after the kill, also as seconds of the killed host's records
// (duplicates / (its shards x the rate)).
func BenchmarkFleetSmall(b *testing.B) {
	if testing.Short() {
		b.Skip("-short")
	}
	e := emulator.Start(b, emulator.Dynalite)
	const shards = 12
	rate, window := *benchSmallRate, *benchSmallWindow
	var t *tally
	var dupsBefore, dupsAfter, victimShards int
	var recovered time.Duration
	for b.Loop() {
		var delivered, put atomic.Int64
		r := newBenchFleet(b, e.Endpoint, kinesistest.New(kinesistest.WithoutLimits()), shards, Config{CheckpointInterval: *benchSmallCheckpoint},
			func(c *kinesisload.Config) { c.IdleWait, c.ListShardsInterval = 0, 0 }) // the defaults
		r.delivered, r.seen = &delivered, map[string]int{}
		lease := DefaultLeaseDuration
		stop := make(chan struct{})
		wg := r.produceRate(stop, rate, 100, &put)
		hosts := []string{"a", "b", "c"}
		for _, h := range hosts {
			r.start(h)
		}
		r.waitFair(time.Now(), hosts, 10*time.Minute)
		time.Sleep(lease)
		for _, h := range hosts {
			r.hosts[h].count.take()
		}
		time.Sleep(window)
		t = newTally(window)
		for _, h := range hosts {
			t.add(r.hosts[h].count.take())
		}
		t.log(b, "3 hosts, 12 shards")
		dups := func() int {
			r.mu.Lock()
			defer r.mu.Unlock()
			n := 0
			for _, c := range r.seen {
				n += c - 1
			}
			return n
		}
		owned, _ := r.owners()
		victim := owned["b"]
		victimShards = len(victim)
		dupsBefore = dups()
		// The kill at a random moment of the rounds: the benchmark's
		// own pace follows the rounds (it waits for the balance they
		// make), and a kill always just after a write of the positions
		// would show fewer duplicates than a crash does.
		phase := rand.N(DefaultLeaseDuration / 10)
		time.Sleep(phase)
		killed := time.Now()
		r.kill("b")
		time.Sleep(3 * lease)
		close(stop)
		wg.Wait()
		for {
			r.mu.Lock()
			n := len(r.seen)
			r.mu.Unlock()
			if int64(n) == put.Load() {
				break
			}
			if time.Since(killed) > 5*time.Minute {
				b.Fatalf("%d of %d records put never delivered", put.Load()-int64(n), put.Load())
			}
			time.Sleep(100 * time.Millisecond)
		}
		dupsAfter = dups() - dupsBefore
		// The last of the killed host's shards to deliver again.
		recovered = 0
		r.mu.Lock()
		for _, id := range victim {
			var first time.Time
			for h, at := range r.tally[id].byHost {
				if h != "b" && at.After(killed) && (first.IsZero() || at.Before(first)) {
					first = at
				}
			}
			recovered = max(recovered, first.Sub(killed))
		}
		r.mu.Unlock()
		b.Logf("killed b holding %d shards (%v into a round of the benchmark): %d records delivered twice after the kill (%d before it), of %d put; its shards delivered again within %v",
			len(victim), phase.Round(time.Millisecond), dupsAfter, dupsBefore, put.Load(), recovered.Round(10*time.Millisecond))
	}
	perMin := func(n float64) float64 { return n / window.Minutes() }
	w, rd := t.sum(false), t.sum(true)
	b.ReportMetric(perMin(float64(w.calls)), "writes/min")
	b.ReportMetric(perMin(w.units), "WCU/min")
	b.ReportMetric(perMin(float64(rd.calls)), "reads/min")
	b.ReportMetric(perMin(float64(t.ops["Query"].get().calls)), "queries/min")
	b.ReportMetric(perMin(rd.units), "RCU/min")
	b.ReportMetric(perMin(float64(rd.bytes))/1000, "KB-read/min")
	b.ReportMetric(perMin(float64(rd.bytes+w.bytes))/1000, "KB-answers/min")
	b.ReportMetric(float64(dupsAfter), "dups-after-kill")
	b.ReportMetric(float64(dupsAfter)/(float64(victimShards)*rate), "dups-seconds")
	b.ReportMetric(recovered.Seconds(), "failover-s")
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
