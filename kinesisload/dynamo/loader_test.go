package dynamo

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

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// delivery is one record a host's Sink accepted.
type delivery struct {
	host, shard, seq, data string
}

// fleetSink records what every host accepted, in one order.
type fleetSink struct {
	mu  sync.Mutex
	log []delivery
}

func (s *fleetSink) forHost(host string) kinesisload.Sink {
	return kinesisload.SinkFunc(func(ctx context.Context, b kinesisload.Batch) error {
		s.mu.Lock()
		for _, r := range b.Records {
			s.log = append(s.log, delivery{host: host, shard: b.ShardID, seq: r.SequenceNumber, data: string(r.Data)})
		}
		s.mu.Unlock()
		// A Sink that takes a moment: batches are in flight when leases move.
		time.Sleep(5 * time.Millisecond)
		return nil
	})
}

func (s *fleetSink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.log...)
}

// loaderRig is one fake stream read by Loaders whose Coordinators share a
// dynalite table, on real clocks.
type loaderRig struct {
	t        *testing.T
	fake     *kinesistest.Fake
	endpoint string
	table    string
	sink     *fleetSink
	faults   map[string]*faults
	coords   map[string]*Coordinator
	cancel   map[string]context.CancelFunc
	done     map[string]chan error
	loads    map[string]*kinesisload.Loader
	n        int
	// startAt is every host's StartPosition (default TRIM_HORIZON).
	startAt scan.Position
	// recreated is every host's OnStreamRecreated.
	recreated kinesisload.StreamRecreated
}

func newLoaderRig(t *testing.T, shards int) *loaderRig {
	e := emulator.Start(t, emulator.Dynalite)
	f := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, f, "orders", shards)
	r := &loaderRig{t: t, fake: f, endpoint: e.Endpoint, table: fmt.Sprintf("tidemark-loader-%d", tableSeq.Add(1)), sink: &fleetSink{},
		faults: map[string]*faults{}, coords: map[string]*Coordinator{}, cancel: map[string]context.CancelFunc{}, done: map[string]chan error{}, loads: map[string]*kinesisload.Loader{}}
	t.Cleanup(func() {
		for id := range r.cancel {
			r.close(id)
		}
	})
	return r
}

func (r *loaderRig) start(host string) {
	r.t.Helper()
	f := newFaults()
	c, err := New(newClient(r.endpoint, f), Config{Table: r.table, CreateTable: true, HostID: host,
		LeaseDuration: 3 * time.Second, CallTimeout: time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	startAt := scan.TrimHorizon()
	if r.startAt.Kind != 0 {
		startAt = r.startAt
	}
	l, err := kinesisload.New(kinesisload.Config{Stream: "orders", Sink: r.sink.forHost(host), StartPosition: startAt,
		IdleWait: 200 * time.Millisecond, ListShardsInterval: 300 * time.Millisecond, OnStreamRecreated: r.recreated},
		kinesisload.WithClient(r.fake), kinesisload.WithCoordinator(c), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	r.faults[host], r.coords[host], r.cancel[host], r.done[host], r.loads[host] = f, c, cancel, done, l
}

// waitOwners waits until every host of hosts owns a shard in the table.
func (r *loaderRig) waitOwners(hosts ...string) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		info, err := r.coords[hosts[0]].Inspect(context.Background(), "orders")
		if err == nil {
			owns := map[string]bool{}
			for _, sh := range info.Shards {
				owns[sh.Owner] = true
			}
			all := true
			for _, h := range hosts {
				all = all && owns[h]
			}
			if all {
				return
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("not every host of %v owns a shard after 60 s", hosts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// close stops host gracefully: a planned move.
func (r *loaderRig) close(host string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.loads[host].Close(ctx); err != nil {
		r.t.Errorf("host %s: Close: %v", host, err)
	}
	if err := <-r.done[host]; !errors.Is(err, kinesisload.ErrClosed) && !errors.Is(err, context.Canceled) {
		r.t.Errorf("host %s: Run = %v", host, err)
	}
	r.cancel[host]()
	delete(r.cancel, host)
}

// kill stops host unplanned: every DynamoDB call of it fails from now on
// (its heartbeats stop), and its Run is cancelled without Close.
func (r *loaderRig) kill(host string) {
	r.faults[host].set(func(f *faults) { f.killed = true })
	r.cancel[host]()
	<-r.done[host]
	delete(r.cancel, host)
}

// put writes n records spread over the stream and returns their data.
func (r *loaderRig) put(n int) []string {
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

func (r *loaderRig) waitAll(want []string) {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
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

func (r *loaderRig) split() {
	r.t.Helper()
	out, err := r.fake.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	if err != nil {
		r.t.Fatal(err)
	}
	sh := out.Shards[0]
	lo, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(sh.HashKeyRange.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	_, err = r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"), ShardToSplit: sh.ShardId,
		NewStartingHashKey: aws.String(mid.String())})
	if err != nil {
		r.t.Fatal(err)
	}
}

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
// record of its child.
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
	first, last := map[string]int{}, map[string]int{}
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

func shardsByHost(ds []delivery) (shards int, moved int) {
	hosts := map[string]map[string]bool{}
	for _, d := range ds {
		if hosts[d.shard] == nil {
			hosts[d.shard] = map[string]bool{}
		}
		hosts[d.shard][d.host] = true
	}
	for _, hs := range hosts {
		if len(hs) > 1 {
			moved++
		}
	}
	return len(hosts), moved
}

// Three Loaders share a stream through dynalite; one closes (a planned
// move) and another joins while records flow and a shard splits: nothing
// is lost, no parent comes after its child, and nothing is delivered
// twice.
func TestLoadersShareAStreamPlannedMovesDeliverNothingTwice(t *testing.T) {
	r := newLoaderRig(t, 4)
	want := r.put(200)
	for _, h := range []string{"a", "b", "c"} {
		r.start(h)
	}
	r.waitAll(want)
	want = append(want, r.put(100)...)
	r.waitOwners("a", "b", "c")
	r.start("d") // joins: takes its share from the others by handoffs
	want = append(want, r.put(100)...)
	r.waitAll(want)
	r.waitOwners("a", "b", "c", "d")
	r.close("b")
	r.split()
	want = append(want, r.put(200)...)
	r.waitAll(want)
	for _, h := range []string{"a", "c", "d"} {
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
	shards, moved := shardsByHost(ds)
	if moved == 0 {
		t.Error("no shard moved between hosts: the test did not exercise a handoff")
	}
	// After every host closed: every shard free, every host left, epochs
	// moved with the owners, the split parent COMPLETED.
	info, err := r.coords["a"].Inspect(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	completed := 0
	for id, sh := range info.Shards {
		if sh.Owner != "" {
			t.Errorf("shard %s still owned by %s after every host closed", id, sh.Owner)
		}
		if sh.Epoch == 0 {
			t.Errorf("shard %s never leased (epoch 0)", id)
		}
		if sh.Progress.State == kinesisload.StateCompleted {
			completed++
		}
	}
	if completed != 1 || len(info.Shards) != 6 || !info.Initialised {
		t.Errorf("table: %d shards, %d COMPLETED, initialised %v; want 6, the split parent, true", len(info.Shards), completed, info.Initialised)
	}
	for id, hi := range info.Hosts {
		if !hi.Left {
			t.Errorf("host %s not marked left after Close", id)
		}
	}
	if shards < 6 {
		t.Errorf("records came from %d shards, want the 4 and the split's 2 children", shards)
	}
}

// A host dies (its DynamoDB calls fail, its Run ends without Close): its
// shards move to the others after its lease expires, and nothing is lost.
func TestLoadersShareAStreamKilledHostsShardsMove(t *testing.T) {
	r := newLoaderRig(t, 4)
	want := r.put(100)
	for _, h := range []string{"a", "b", "c"} {
		r.start(h)
	}
	r.waitAll(want)
	r.waitOwners("a", "b", "c")
	want = append(want, r.put(100)...)
	r.waitAll(want)
	r.kill("b")
	want = append(want, r.put(200)...)
	r.waitAll(want)
	r.split()
	want = append(want, r.put(100)...)
	r.waitAll(want)
	for _, h := range []string{"a", "c"} {
		r.close(h)
	}
	ds := r.sink.deliveries()
	checkOrder(t, r.fake, ds)
	for k, v := range duplicates(ds) {
		if v[0].host != "b" {
			t.Errorf("%s delivered twice, first by %s: duplicates must come from the killed host's uncommitted batches", k, v[0].host)
		}
	}
	if _, moved := shardsByHost(ds); moved == 0 {
		t.Error("no shard moved from the killed host")
	}
}

// The host that wins the initialisation lock saves T0 and dies before its
// commit; records are put; the host that takes the initialisation over
// resolves LATEST at the first host's T0 (read from the init item), so
// those records are delivered.
func TestLoadersTakeOverResolvesAtTheFirstStartTime(t *testing.T) {
	r := newLoaderRig(t, 2)
	r.startAt = scan.Latest()
	// Host a's first GetShardIterator (the LATEST resolution, which starts
	// after T0 is saved) says so and then waits for its context to end.
	resolving := make(chan struct{}, 1)
	r.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: 1, Entered: resolving, Block: make(chan struct{})})
	r.start("a")
	select {
	case <-resolving:
	case err := <-r.done["a"]:
		t.Fatalf("host a: Run returned before resolving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host a never began resolving LATEST")
	}
	r.kill("a")
	want := r.put(20)
	// Kinesis's Date is whole seconds: let its clock pass the records, so
	// that a T0 taken now would be after them.
	time.Sleep(1100 * time.Millisecond)
	r.start("b")
	r.waitAll(want)
	info, err := r.coords["b"].Inspect(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Initialised || info.InitLockOwner != "b" || info.StartTime.IsZero() {
		t.Errorf("the table after b's takeover: initialised %v by %q at T0 %v; want initialised by b at a's T0", info.Initialised, info.InitLockOwner, info.StartTime)
	}
	r.close("b")
	for _, d := range r.sink.deliveries() {
		if d.host != "b" {
			t.Errorf("record %s delivered by host %s, which died before its commit", d.data, d.host)
		}
	}
}
