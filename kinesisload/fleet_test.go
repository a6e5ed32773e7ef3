package kinesisload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/coordtest"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// delivery is one record a host's Sink accepted.
type delivery struct {
	host, shard, seq, data string
	epoch                  uint64 // the batch's Epoch
}

// fleetSink records what every host accepted, in one order.
type fleetSink struct {
	mu  sync.Mutex
	log []delivery
	// block, when set, is called in the Sink after the batch is recorded.
	block func(ctx context.Context, host string, b kinesisload.Batch)
}

func (s *fleetSink) forHost(host string) kinesisload.Sink {
	return kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		s.mu.Lock()
		for _, r := range b.Records {
			s.log = append(s.log, delivery{host: host, shard: b.ShardID, seq: r.SequenceNumber, data: string(r.Data), epoch: b.Epoch})
		}
		block := s.block
		s.mu.Unlock()
		// A Sink that takes a moment: batches are in flight when leases move.
		time.Sleep(5 * time.Millisecond)
		if block != nil {
			block(ctx, host, b)
		}
		return nil
	})
}

func (s *fleetSink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.log...)
}

// fleetRig is one fake stream read by Loaders sharing an in-memory fleet
// whose time runs on its own goroutine.
type fleetRig struct {
	t     *testing.T
	fake  *kinesistest.Fake
	fleet *coordtest.Fleet
	sink  *fleetSink
	runs  map[string]context.CancelFunc
	done  map[string]chan error
	loads map[string]*kinesisload.Loader
	n     int
	// hooks, when set for a host, are given to its Loader.
	hooks map[string]kinesisload.Hook
	// configure, when set, changes every host's Config.
	configure func(*kinesisload.Config)
	// hostConfig, when set, changes each host's Config after configure
	// (such as its Sink).
	hostConfig func(host string, c *kinesisload.Config)
	// coords, when set for a host, is its Coordinator (default: the
	// fleet's host).
	coords map[string]kinesisload.Coordinator
	// loggers, when set for a host, is its Loader's logger (default:
	// none).
	loggers map[string]*slog.Logger
}

func newFleetRig(t *testing.T, shards int, opts ...kinesistest.Option) *fleetRig {
	f := kinesistest.New(append([]kinesistest.Option{kinesistest.WithoutLimits()}, opts...)...)
	kinesistest.NewStream(t, f, "orders", shards)
	fl, err := coordtest.New(coordtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &fleetRig{t: t, fake: f, fleet: fl, sink: &fleetSink{}, runs: map[string]context.CancelFunc{}, done: map[string]chan error{}, loads: map[string]*kinesisload.Loader{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_, renew := fl.Timing()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				fl.Advance(renew)
			}
		}
	})
	t.Cleanup(func() {
		for id := range r.runs {
			r.close(id)
		}
		close(stop)
		wg.Wait()
	})
	return r
}

func (r *fleetRig) start(host string) {
	r.t.Helper()
	var coord kinesisload.Coordinator = r.fleet.Host(host)
	if c := r.coords[host]; c != nil {
		coord = c
	}
	opts := []kinesisload.Option{kinesisload.WithClient(r.fake), kinesisload.WithCoordinator(coord), kinesisload.WithLogger(slog.New(slog.DiscardHandler))}
	if h := r.hooks[host]; h != nil {
		opts = append(opts, kinesisload.WithHooks(h))
	}
	if lg := r.loggers[host]; lg != nil {
		opts = append(opts, kinesisload.WithLogger(lg))
	}
	cfg := kinesisload.Config{Stream: "orders", Sink: r.sink.forHost(host), StartPosition: scan.TrimHorizon(),
		IdleWait: 200 * time.Millisecond, ListShardsInterval: 300 * time.Millisecond}
	if fleetFanOut {
		cfg.ReadMode, cfg.ConsumerName = kinesisload.ReadFanOut, "fleet"
	}
	if r.configure != nil {
		r.configure(&cfg)
	}
	if r.hostConfig != nil {
		r.hostConfig(host, &cfg)
	}
	l, err := kinesisload.New(cfg, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	r.runs[host], r.done[host], r.loads[host] = cancel, done, l
}

// close stops host gracefully: a planned move.
func (r *fleetRig) close(host string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := r.loads[host].Close(ctx); err != nil {
		r.t.Errorf("host %s: Close: %v", host, err)
	}
	if err := <-r.done[host]; !errors.Is(err, kinesisload.ErrClosed) && !errors.Is(err, context.Canceled) {
		r.t.Errorf("host %s: Run = %v", host, err)
	}
	r.runs[host]()
	delete(r.runs, host)
}

// kill stops host unplanned: its context ends without Close, and its
// heartbeats and writes stop at once.
func (r *fleetRig) kill(host string) {
	r.fleet.Kill(host)
	r.runs[host]()
	<-r.done[host]
	delete(r.runs, host)
}

// put writes n records spread over the stream and returns their data.
func (r *fleetRig) put(n int) []string {
	r.t.Helper()
	var out []string
	for range n {
		r.n++
		data := fmt.Sprintf("r%05d", r.n)
		if _, err := r.fake.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("orders"),
			PartitionKey: aws.String(data), Data: []byte(data)}); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, data)
	}
	return out
}

// waitOwning waits until every host of hosts owns a shard in the fleet's
// table.
func (r *fleetRig) waitOwning(hosts ...string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		owners := map[string]bool{}
		for _, s := range r.fleet.Shards("orders") {
			owners[s.Owner] = true
		}
		missing := 0
		for _, h := range hosts {
			if !owners[h] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of hosts %v own no shard after 60 s (owners: %v)", missing, hosts, owners)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *fleetRig) waitAll(want []string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := map[string]bool{}
		for _, d := range r.sink.deliveries() {
			got[d.data] = true
		}
		missing := 0
		for _, w := range want {
			if !got[w] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d records never delivered", missing, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// duplicates returns the records delivered more than once, with the
// deliveries of each.
func duplicates(ds []delivery) map[string][]delivery {
	by := map[string][]delivery{}
	for _, d := range ds {
		by[d.data] = append(by[d.data], d)
	}
	out := map[string][]delivery{}
	for k, v := range by {
		if len(v) > 1 {
			out[k] = v
		}
	}
	return out
}

// checkOrder fails when a record of a parent shard is delivered after a
// record of its child, or a shard's records go back in sequence.
func checkOrder(t *testing.T, f *kinesistest.Fake, ds []delivery) {
	t.Helper()
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		t.Fatal(err)
	}
	parents := map[string][]string{}
	for _, s := range out.Shards {
		for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
			if p != nil {
				parents[aws.ToString(s.ShardId)] = append(parents[aws.ToString(s.ShardId)], *p)
			}
		}
	}
	first := map[string]int{}
	last := map[string]int{}
	for i, d := range ds {
		if _, ok := first[d.shard]; !ok {
			first[d.shard] = i
		}
		last[d.shard] = i
	}
	for child, ps := range parents {
		c, ok := first[child]
		if !ok {
			continue
		}
		for _, p := range ps {
			if l, ok := last[p]; ok && l > c {
				t.Errorf("a record of parent %s was delivered (at %d) after one of its child %s (at %d)", p, l, child, c)
			}
		}
	}
}

// Three Loaders share a stream; one closes (a planned move) and another
// joins while records flow and a shard splits: nothing is lost, no parent
// comes after its child, and nothing is delivered twice.
func TestFleetPlannedMovesDeliverNothingTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 4)
		want := r.put(200)
		for _, h := range []string{"a", "b", "c"} {
			r.start(h)
		}
		r.waitAll(want)
		// Every host holds a share before the moves below: a shard of b's
		// moves when b closes, whatever the timing.
		r.waitOwning("a", "b", "c")
		want = append(want, r.put(100)...)
		r.start("e") // joins: takes its share from the others by handoffs
		want = append(want, r.put(100)...)
		r.close("b")
		want = append(want, r.put(100)...)
		r.waitAll(want)
		// Split a shard while the fleet reads: its children wait for it.
		out, err := r.fake.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
		if err != nil {
			t.Fatal(err)
		}
		sh := out.Shards[0]
		lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		_, err = r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"), ShardToSplit: sh.ShardId,
			NewStartingHashKey: aws.String(mid.String())})
		if err != nil {
			t.Fatal(err)
		}
		r.start("d")
		want = append(want, r.put(200)...)
		r.waitAll(want)
		for _, h := range []string{"a", "c", "d", "e"} {
			r.close(h)
		}
		ds := r.sink.deliveries()
		if dups := duplicates(ds); len(dups) > 0 {
			n := 0
			for k, v := range dups {
				if n++; n <= 5 {
					t.Errorf("%s delivered %d times: %v", k, len(v), v)
				}
			}
			t.Errorf("%d records delivered twice with only planned moves", len(dups))
		}
		checkOrder(t, r.fake, ds)
		hosts := map[string]map[string]bool{}
		for _, d := range ds {
			if hosts[d.shard] == nil {
				hosts[d.shard] = map[string]bool{}
			}
			hosts[d.shard][d.host] = true
		}
		moved := 0
		for _, hs := range hosts {
			if len(hs) > 1 {
				moved++
			}
		}
		if moved == 0 {
			t.Error("no shard moved between hosts: the test did not exercise a handoff")
		}
		if len(hosts) < 6 {
			t.Errorf("records came from %d shards, want the 4 and the split's 2 children", len(hosts))
		}
	})
}

// A host killed (context ended without Close, heartbeats stopped) while a
// batch is in its Sink: its shards move after the lease expires, nothing
// is lost, and the only records delivered twice are those of batches it
// had not committed.
func TestFleetKilledHostDuplicatesOnlyTheUncommittedWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 3)
		want := r.put(90)
		r.start("a")
		r.start("b")
		r.waitAll(want)
		inSink := make(chan struct{}, 1)
		r.sink.mu.Lock()
		r.sink.block = func(ctx context.Context, host string, b kinesisload.Batch) {
			if host != "b" {
				return
			}
			select {
			case inSink <- struct{}{}:
			default:
			}
			<-ctx.Done() // accepted; its commit will not land
		}
		r.sink.mu.Unlock()
		want = append(want, r.put(90)...)
		select {
		case <-inSink:
		case <-time.After(30 * time.Second):
			t.Fatal("b never received a batch")
		}
		// What the table holds when b dies: its commits, durable within a
		// round of each (the host that takes its shards goes on from there
		// while b's process ends).
		r.fleet.Kill("b")
		committed := map[string]scan.Position{}
		for id, s := range r.fleet.Shards("orders") {
			committed[id] = s.Progress.Position
		}
		r.kill("b")
		r.sink.mu.Lock()
		r.sink.block = nil
		r.sink.mu.Unlock()
		want = append(want, r.put(30)...)
		r.waitAll(want)
		r.close("a")
		dups := duplicates(r.sink.deliveries())
		if len(dups) == 0 {
			t.Error("no record delivered twice: the batch b accepted but never committed was not delivered again")
		}
		for k, v := range dups {
			if v[0].host != "b" {
				t.Errorf("%s delivered twice, first by %s: duplicates must come from the killed host's uncommitted batches", k, v[0].host)
				continue
			}
			if c, err := scan.Compare(scan.AtSequence(v[0].seq), committed[v[0].shard]); err == nil && c <= 0 {
				t.Errorf("%s (seq %s) delivered twice although %s's commit covered it (%v)", k, v[0].seq, v[0].shard, committed[v[0].shard])
			}
		}
	})
}
