package dynamo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

// txSink is a sinktest.Memory (one database shared by the hosts of a
// fleet, keeping the contract of TransactionalSink) that lets a test
// stall a host before its transaction and learn when one stored records.
type txSink struct {
	mem *sinktest.Memory

	mu sync.Mutex
	// before is called by Deliver before its transaction (it may block).
	before func(host string, b kinesisload.Batch)
	// committed is called after a transaction that stored records.
	committed func(host string, b kinesisload.Batch)
}

type txHost struct {
	s    *txSink
	host string
}

var _ kinesisload.TransactionalSink = txHost{}

func (h txHost) Deliver(ctx context.Context, b kinesisload.Batch) error {
	h.s.mu.Lock()
	before, committed := h.s.before, h.s.committed
	h.s.mu.Unlock()
	if before != nil {
		before(h.host, b)
		// A transaction stalled at the database runs to its end: the
		// client's cancellation meanwhile does not undo it.
		ctx = context.WithoutCancel(ctx)
	}
	n, err := h.s.mem.Store(ctx, b)
	if err == nil && n > 0 && committed != nil {
		committed(h.host, b)
	}
	return err
}

func (h txHost) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return h.s.mem.Checkpoints(ctx, stream)
}

// stored returns the data of every record stored for shard of orders, in
// the order stored.
func (s *txSink) stored(shard string) []string {
	var out []string
	for _, r := range s.mem.Stored("orders", shard) {
		out = append(out, string(r.Data))
	}
	return out
}

func (s *txSink) waitStored(t *testing.T, want []string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := map[string]bool{}
		for _, d := range s.stored(zombieShard) {
			got[d] = true
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
			t.Fatalf("%d of %d records never stored", missing, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sinkRow returns shard's checkpoint row in orders.
func sinkRow(s *txSink, shard string) sinktest.Checkpoint {
	row, _ := s.mem.Checkpoint("orders", shard)
	return row
}

// zombieShard is the one shard of the zombie test's stream.
const zombieShard = "shardId-000000000000"

// zombieLost records host a's lost leases.
type zombieLost struct{ ch chan kinesisload.LeaseLost }

func (z zombieLost) OnLeaseLost(e kinesisload.LeaseLost) {
	select {
	case z.ch <- e:
	default:
	}
}

// The zombie on DynamoDB (dynalite): host a's Deliver of a batch stalls
// before its transaction and a's DynamoDB calls hang (paused), so its
// lease expires; host b takes the shard under a newer epoch and stores
// part of the same records. When a's transaction runs, the Sink refuses it
// with ErrLeaseLost: a stops that shard as a lost lease (of reason
// LostSinkFenced, or LostSelfFenced when its own fence told it first: its
// heartbeats hang), its Run goes on, and every record is stored exactly
// once.
func TestLoadersZombieDeliveryFencedBySink(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	fake := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, fake, "orders", 1)
	table := fmt.Sprintf("tidemark-zombie-%d", tableSeq.Add(1))
	sink := &txSink{mem: sinktest.NewMemory()}
	const shard = zombieShard
	n := 0
	put := func(k int) []string {
		t.Helper()
		in := &kinesis.PutRecordsInput{StreamName: aws.String("orders")}
		var out []string
		for range k {
			n++
			data := fmt.Sprintf("r%05d", n)
			in.Records = append(in.Records, types.PutRecordsRequestEntry{PartitionKey: aws.String(data), Data: []byte(data)})
			out = append(out, data)
		}
		if _, err := fake.PutRecords(context.Background(), in); err != nil {
			t.Fatal(err)
		}
		return out
	}
	type host struct {
		f    *faults
		c    *Coordinator
		l    *kinesisload.Loader
		stop context.CancelFunc
		done chan error
	}
	hosts := map[string]*host{}
	lost := zombieLost{ch: make(chan kinesisload.LeaseLost, 4)}
	start := func(id string, perCall int32, hooks ...kinesisload.Hook) {
		t.Helper()
		f := newFaults()
		c, err := New(newClient(e.Endpoint, f), Config{Table: table, CreateTable: true, HostID: id, LeaseDuration: 3 * time.Second, CallTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l, err := kinesisload.New(kinesisload.Config{Stream: "orders", Sink: txHost{s: sink, host: id}, StartPosition: scan.TrimHorizon(),
			IdleWait: 200 * time.Millisecond, ListShardsInterval: 300 * time.Millisecond, RecordsPerCall: perCall,
			SinkRetries: 3, SinkBackoff: time.Millisecond, SinkMaxBackoff: time.Millisecond},
			kinesisload.WithClient(fake), kinesisload.WithCoordinator(c), kinesisload.WithHooks(hooks...), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		h := &host{f: f, c: c, l: l, stop: cancel, done: make(chan error, 1)}
		go func() { h.done <- l.Run(ctx) }()
		hosts[id] = h
	}
	gate, bGate := make(chan struct{}), make(chan struct{})
	var gateOnce, bGateOnce sync.Once
	t.Cleanup(func() {
		if h := hosts["a"]; h != nil {
			h.f.set(func(f *faults) { f.paused = false })
		}
		gateOnce.Do(func() { close(gate) })
		bGateOnce.Do(func() { close(bGate) })
		for id, h := range hosts {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := h.l.Close(ctx); err != nil {
				t.Errorf("host %s: Close: %v", id, err)
			}
			cancel()
			if err := <-h.done; !errors.Is(err, kinesisload.ErrClosed) && !errors.Is(err, context.Canceled) {
				t.Errorf("host %s: Run = %v", id, err)
			}
			h.stop()
		}
	})

	start("a", 0, lost)
	first := put(10)
	sink.waitStored(t, first)
	// a's commit of what it stored has landed: the table is not behind.
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := hosts["a"].c.Inspect(context.Background(), "orders")
		if err == nil && info.Shards[shard].Progress.Position.Equal(sinkRow(sink, shard).Position) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's commit never landed: %v, %v", info.Shards[shard], err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	stalled := make(chan kinesisload.Batch, 1)
	sink.mu.Lock()
	sink.before = func(id string, b kinesisload.Batch) {
		if id != "a" || len(b.Records) == 0 {
			return
		}
		select {
		case stalled <- b:
			<-gate // a zombie does not notice that its lease is gone
		default:
		}
	}
	sink.mu.Unlock()
	second := put(10)
	var zombie kinesisload.Batch
	select {
	case zombie = <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("host a never delivered the second batch")
	}
	if len(zombie.Records) != len(second) {
		t.Fatalf("a's stalled batch holds %d records, want the %d put at once", len(zombie.Records), len(second))
	}
	hosts["a"].f.set(func(f *faults) { f.paused = true }) // no more heartbeats

	bStored := make(chan struct{})
	var once sync.Once
	sink.mu.Lock()
	sink.committed = func(id string, b kinesisload.Batch) {
		if id == "b" {
			once.Do(func() {
				close(bStored)
				<-bGate // b stops after its first batch until a's refusal
			})
		}
	}
	sink.mu.Unlock()
	start("b", 1) // one record per batch: b's first batch ends before a's stalled one
	select {
	case <-bStored:
	case <-time.After(60 * time.Second):
		t.Fatal("host b never stored a batch")
	}
	if row := sinkRow(sink, shard); row.Epoch <= zombie.Epoch {
		t.Fatalf("b stored the shard at epoch %d, not above a's %d", row.Epoch, zombie.Epoch)
	}
	gateOnce.Do(func() { close(gate) }) // a's transaction runs now

	select {
	case e := <-lost.ch:
		if e.ShardID != shard || e.Epoch != zombie.Epoch || e.Reason != kinesisload.LostSinkFenced && e.Reason != kinesisload.LostSelfFenced {
			t.Errorf("OnLeaseLost(%s, epoch %d, %v), want (%s, epoch %d, %v or %v)", e.ShardID, e.Epoch, e.Reason, shard, zombie.Epoch,
				kinesisload.LostSinkFenced, kinesisload.LostSelfFenced)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("host a never reported its lease lost after the sink refused its batch")
	}
	if refused := len(sink.mem.Refused()); refused != 1 {
		t.Errorf("the sink refused %d batches of a's, want its stalled batch once: a refusal as lost lease is not retried", refused)
	}
	// The hook is called first, then Stats counts the loss.
	st := hosts["a"].l.Stats()
	for deadline := time.Now().Add(10 * time.Second); st.LeasesLost == 0 && time.Now().Before(deadline); st = hosts["a"].l.Stats() {
		time.Sleep(5 * time.Millisecond)
	}
	if st.LeasesLostBy[kinesisload.LostSinkFenced]+st.LeasesLostBy[kinesisload.LostSelfFenced] != 1 {
		t.Errorf("a's Stats.LeasesLostBy = %v, want 1 of %v or %v", st.LeasesLostBy, kinesisload.LostSinkFenced, kinesisload.LostSelfFenced)
	}
	select {
	case err := <-hosts["a"].done:
		t.Fatalf("host a's Run returned %v after the sink fenced one shard", err)
	default:
	}

	hosts["a"].f.set(func(f *faults) { f.paused = false })
	bGateOnce.Do(func() { close(bGate) })
	third := put(10)
	all := append(append(first, second...), third...)
	sink.waitStored(t, all)
	select {
	case err := <-hosts["a"].done:
		t.Fatalf("host a's Run returned %v", err)
	default:
	}
	count := map[string]int{}
	for _, d := range sink.stored(shard) {
		count[d]++
	}
	for _, w := range all {
		if count[w] != 1 {
			t.Errorf("record %s stored %d times, want once", w, count[w])
		}
	}
}
