package kinesisload_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

// txSink is a [sinktest.Memory] (one database shared by the hosts of a
// fleet, keeping the contract of TransactionalSink) that also records who
// delivered what, and lets a test stall a host before its transaction.
type txSink struct {
	mem *sinktest.Memory

	mu sync.Mutex
	// offered is every record handed to Deliver, stored or not.
	offered []delivery
	// before, when set, is called by Deliver before its transaction
	// (it may block, like a host paused between reading and storing).
	before func(ctx context.Context, host string, b kinesisload.Batch)
	// committed, when set, is called after a transaction that stored
	// records.
	committed func(host string, b kinesisload.Batch, n int)
}

func newTxSink() *txSink { return &txSink{mem: sinktest.NewMemory()} }

// txHost is one host's handle on the shared txSink.
type txHost struct {
	s    *txSink
	host string
}

var _ kinesisload.TransactionalSink = txHost{}

func (s *txSink) forHost(host string) kinesisload.Sink { return txHost{s: s, host: host} }

func (h txHost) Deliver(ctx context.Context, b kinesisload.Batch) error {
	h.s.mu.Lock()
	before := h.s.before
	for _, r := range b.Records {
		h.s.offered = append(h.s.offered, delivery{host: h.host, shard: b.ShardID, seq: r.SequenceNumber, data: string(r.Data), epoch: b.Epoch})
	}
	h.s.mu.Unlock()
	if before != nil {
		before(ctx, h.host, b)
	}
	n, err := h.s.mem.Store(ctx, b)
	if err == nil && n > 0 {
		h.s.mu.Lock()
		committed := h.s.committed
		h.s.mu.Unlock()
		if committed != nil {
			committed(h.host, b, n)
		}
	}
	return err
}

func (h txHost) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return h.s.mem.Checkpoints(ctx, stream)
}

// snapshot returns the records stored in stream orders (the host is not
// known: empty), those offered, and those refused with ErrLeaseLost.
func (s *txSink) snapshot() (stored, offered, refused []delivery) {
	for _, shard := range s.mem.Shards("orders") {
		for _, r := range s.mem.Stored("orders", shard) {
			stored = append(stored, delivery{shard: shard, seq: r.SequenceNumber, data: string(r.Data), epoch: r.Epoch})
		}
	}
	for _, f := range s.mem.Refused() {
		for _, r := range f.Batch.Records {
			refused = append(refused, delivery{shard: f.Batch.ShardID, seq: r.SequenceNumber, data: string(r.Data), epoch: f.Batch.Epoch})
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return stored, append([]delivery(nil), s.offered...), refused
}

func (s *txSink) set(fn func(s *txSink)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

// row returns shard's checkpoint row in stream orders.
func (s *txSink) row(shard string) sinktest.Checkpoint {
	row, _ := s.mem.Checkpoint("orders", shard)
	return row
}

// waitStored waits until every record of want is stored.
func (s *txSink) waitStored(t *testing.T, want []string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		stored, _, _ := s.snapshot()
		got := map[string]bool{}
		for _, d := range stored {
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
			t.Fatalf("%d of %d records never stored", missing, len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkStoredOnce fails unless every record of want is stored exactly
// once, and nothing else is.
func (s *txSink) checkStoredOnce(t *testing.T, want []string) {
	t.Helper()
	stored, _, _ := s.snapshot()
	n := map[string]int{}
	for _, d := range stored {
		n[d.data]++
	}
	for _, w := range want {
		if n[w] != 1 {
			t.Errorf("record %s stored %d times, want once", w, n[w])
		}
		delete(n, w)
	}
	for k, v := range n {
		t.Errorf("record %s stored %d times, never put", k, v)
	}
}

// putBatch writes n records to the one-shard stream with one PutRecords
// call, so that one GetRecords page holds them all.
func (r *fleetRig) putBatch(n int) []string {
	r.t.Helper()
	var out []string
	in := &kinesis.PutRecordsInput{StreamName: aws.String("orders")}
	for range n {
		r.n++
		data := fmt.Sprintf("r%05d", r.n)
		in.Records = append(in.Records, types.PutRecordsRequestEntry{PartitionKey: aws.String(data), Data: []byte(data)})
		out = append(out, data)
	}
	res, err := r.fake.PutRecords(context.Background(), in)
	if err != nil {
		r.t.Fatal(err)
	}
	if c := aws.ToInt32(res.FailedRecordCount); c > 0 {
		r.t.Fatalf("PutRecords: %d records failed", c)
	}
	return out
}

// waitCommitted waits until the fleet's table holds pos for shard.
func (r *fleetRig) waitCommitted(shard string, pos scan.Position) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !r.fleet.Shards("orders")[shard].Progress.Position.Equal(pos) {
		if time.Now().After(deadline) {
			r.t.Fatalf("shard %s: the table holds %v, want %v", shard, r.fleet.Shards("orders")[shard].Progress.Position, pos)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitOwner waits until the fleet's table names host as shard's owner.
func (r *fleetRig) waitOwner(shard, host string) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for r.fleet.Shards("orders")[shard].Owner != host {
		if time.Now().After(deadline) {
			r.t.Fatalf("shard %s: owner %q, want %q", shard, r.fleet.Shards("orders")[shard].Owner, host)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lostLog records a host's lost leases.
type lostLog struct {
	mu   sync.Mutex
	lost []kinesisload.LeaseLost
	ch   chan kinesisload.LeaseLost
}

func newLostLog() *lostLog { return &lostLog{ch: make(chan kinesisload.LeaseLost, 16)} }

func (l *lostLog) OnLeaseLost(e kinesisload.LeaseLost) {
	l.mu.Lock()
	l.lost = append(l.lost, e)
	l.mu.Unlock()
	select {
	case l.ch <- e:
	default:
	}
}

const txShard0 = "shardId-000000000000"

// A zombie: host a's Deliver of a batch stalls before its transaction,
// and a stops heartbeating (paused); its lease expires, host b takes the
// shard under a newer epoch and stores part of the same records. When a's
// transaction finally runs, the Sink refuses it with ErrLeaseLost: a stops
// that shard at once as a lost lease of reason LostSinkFenced (hook and
// Stats) without retrying it, its Run goes on, and in the end every record
// is stored exactly once.
func TestFleetZombieDeliveryFencedBySink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		sink := newTxSink()
		lost := newLostLog()
		r.hooks = map[string]kinesisload.Hook{"a": lost}
		r.hostConfig = func(host string, c *kinesisload.Config) {
			c.Sink = sink.forHost(host)
			c.SinkRetries, c.SinkBackoff, c.SinkMaxBackoff = 3, time.Millisecond, time.Millisecond
			if host == "b" {
				c.RecordsPerCall = 1 // b's first batch ends before a's stalled one
			}
		}
		r.start("a")
		first := r.putBatch(10)
		sink.waitStored(t, first)
		// a's commit of what it stored has landed: the table is not behind.
		r.waitCommitted(txShard0, sink.row(txShard0).Position)

		stalled := make(chan kinesisload.Batch, 1)
		gate := make(chan struct{})
		sink.set(func(s *txSink) {
			s.before = func(ctx context.Context, host string, b kinesisload.Batch) {
				if host != "a" || len(b.Records) == 0 {
					return
				}
				select {
				case stalled <- b:
					<-gate // a zombie does not notice that its lease is gone
				default:
				}
			}
		})
		second := r.putBatch(10)
		var zombie kinesisload.Batch
		select {
		case zombie = <-stalled:
		case <-time.After(30 * time.Second):
			t.Fatal("host a never delivered the second batch")
		}
		if len(zombie.Records) != len(second) {
			t.Fatalf("a's stalled batch holds %d records, want the %d put at once", len(zombie.Records), len(second))
		}
		r.fleet.Pause("a") // no more heartbeats: its lease expires in b's view

		bStored := make(chan struct{})
		bGate := make(chan struct{})
		var once, gateOnce, bGateOnce sync.Once
		// Before the rig's cleanup, also when the test fails half-way: let
		// every host go on, so that they can be closed.
		t.Cleanup(func() {
			r.fleet.Resume("a")
			gateOnce.Do(func() { close(gate) })
			bGateOnce.Do(func() { close(bGate) })
		})
		sink.set(func(s *txSink) {
			s.committed = func(host string, b kinesisload.Batch, n int) {
				if host == "b" {
					once.Do(func() {
						close(bStored)
						<-bGate // b stops after its first batch until a's refusal
					})
				}
			}
		})
		r.start("b")
		select {
		case <-bStored:
		case <-time.After(30 * time.Second):
			t.Fatalf("host b never stored a batch; the fleet's shards: %+v; a's stats %+v; b's stats %+v", r.fleet.Shards("orders"), r.loads["a"].Stats(), r.loads["b"].Stats())
		}
		if row := sink.row(txShard0); row.Epoch <= zombie.Epoch {
			t.Fatalf("b stored the shard at epoch %d, not above a's %d", row.Epoch, zombie.Epoch)
		}
		gateOnce.Do(func() { close(gate) }) // a's transaction runs now

		var e kinesisload.LeaseLost
		select {
		case e = <-lost.ch:
		case <-time.After(30 * time.Second):
			t.Fatal("host a never reported its lease of the shard lost after the sink refused its batch")
		}
		if e.ShardID != txShard0 || e.Epoch != zombie.Epoch || e.Reason != kinesisload.LostSinkFenced {
			t.Errorf("OnLeaseLost(%s, epoch %d, %v), want (%s, epoch %d, %v)", e.ShardID, e.Epoch, e.Reason, txShard0, zombie.Epoch, kinesisload.LostSinkFenced)
		}
		if got := e.Reason.String(); got != "sink_fenced" {
			t.Errorf("LostSinkFenced.String() = %q, want sink_fenced (the metric attribute)", got)
		}
		if !errors.Is(e.Err, kinesisload.ErrLeaseLost) {
			t.Errorf("LeaseLost.Err = %v, want a *LeaseLostError", e.Err)
		}
		if _, _, refused := sink.snapshot(); len(refused) != len(zombie.Records) {
			t.Errorf("the sink refused %d records of a's, want its stalled batch's %d once: a retried a refusal that cannot end", len(refused), len(zombie.Records))
		}
		// The hook is called first, then Stats counts the loss.
		st := r.loads["a"].Stats()
		for deadline := time.Now().Add(10 * time.Second); st.LeasesLost == 0 && time.Now().Before(deadline); st = r.loads["a"].Stats() {
			time.Sleep(5 * time.Millisecond)
		}
		if st.LeasesLostBy[kinesisload.LostSinkFenced] != 1 || st.LeasesLost != 1 {
			t.Errorf("a's Stats: LeasesLost %d, LeasesLostBy %v; want 1 of %v", st.LeasesLost, st.LeasesLostBy, kinesisload.LostSinkFenced)
		}
		select {
		case err := <-r.done["a"]:
			t.Fatalf("host a's Run returned %v after the sink fenced one shard", err)
		default:
		}

		r.fleet.Resume("a")
		bGateOnce.Do(func() { close(bGate) })
		third := r.putBatch(10)
		all := append(append(first, second...), third...)
		sink.waitStored(t, all)
		select {
		case err := <-r.done["a"]:
			t.Fatalf("host a's Run returned %v", err)
		default:
		}
		r.close("a")
		r.close("b")
		sink.checkStoredOnce(t, all)
	})
}

// lagCoordinator wraps a fleet host so that its leases drop every
// position-only commit, as a coordinator whose commits are coalesced
// (CheckpointInterval) and whose host dies before it writes them: the
// table stays behind what the Sink stored.
type lagCoordinator struct{ kinesisload.Coordinator }

func (c lagCoordinator) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	m, err := c.Coordinator.Join(ctx, stream)
	if err != nil {
		return nil, err
	}
	return lagMembership{m}, nil
}

type lagMembership struct{ kinesisload.Membership }

func (m lagMembership) Acquire(ctx context.Context, ready []string) ([]kinesisload.Lease, error) {
	ls, err := m.Membership.Acquire(ctx, ready)
	for i, l := range ls {
		ls[i] = lagLease{l}
	}
	return ls, err
}

type lagLease struct{ kinesisload.Lease }

func (l lagLease) Commit(ctx context.Context, u kinesisload.ShardProgress) error {
	if u.State == 0 && len(u.Parents) == 0 {
		return nil // coalesced: never written
	}
	return l.Lease.Commit(ctx, u)
}

// A new owner whose lease's progress lags what a TransactionalSink stored
// (the previous owner's commits were coalesced and it died): the Loader
// resumes the shard from the furthest of the lease's progress and the
// Sink's checkpoint, so it hands the Sink nothing it already holds, and
// every record is stored exactly once.
func TestFleetNewOwnerResumesFromSinkCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		sink := newTxSink()
		r.coords = map[string]kinesisload.Coordinator{"a": lagCoordinator{r.fleet.Host("a")}}
		r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink.forHost(host) }
		r.start("a")
		r.waitOwner(txShard0, "a")
		// b is initialised before a dies, so it takes the shard from the
		// lease's progress (an initialisation merges the Sink's checkpoints
		// into the table).
		r.start("b")
		waitInitialised(t, r.loads["b"])
		first := r.putBatch(10)
		second := r.putBatch(10)
		sink.waitStored(t, append(first, second...))
		held := sink.row(txShard0)
		if table := r.fleet.Shards("orders")[txShard0].Progress.Position; table.Equal(held.Position) {
			t.Fatalf("the table holds the sink's checkpoint %v: the coordinator did not lag", table)
		}
		if owner := r.fleet.Shards("orders")[txShard0].Owner; owner != "a" {
			t.Fatalf("the shard's owner is %q, want a", owner)
		}
		r.kill("a") // an unplanned move: b takes the shard when a's lease expires
		third := r.putBatch(10)
		all := append(append(first, second...), third...)
		sink.waitStored(t, all)
		r.close("b")
		sink.checkStoredOnce(t, all)
		_, offered, _ := sink.snapshot()
		for _, d := range offered {
			if d.host != "b" {
				continue
			}
			if c, err := scan.Compare(scan.AfterSequence(d.seq), held.Position); err != nil || c <= 0 {
				t.Errorf("b handed the sink record %s (seq %s) again, at or before the sink's checkpoint %v when it took the shard", d.data, d.seq, held.Position)
			}
		}
	})
}

func waitInitialised(t *testing.T, l *kinesisload.Loader) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !l.Stats().Initialised {
		if time.Now().After(deadline) {
			t.Fatal("the Loader never initialised")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// After a fleet-wide start-over (the stream re-created, its checkpoints
// removed from the Sink by the operator), a late transaction of a host of
// the old generation lands after the new generation's start batch: the
// start batch carries the generation's start epoch, so the Sink refuses
// the late batch, and the new stream's records are all stored. (Before the
// fix start batches had epoch 0: the late batch was stored over the start,
// its old sequence number sorted after the new stream's, and 0 of 100 of
// the new owner's records were stored.)
func TestFleetStartOverFencesALateBatchOfTheOldGeneration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		sink := newTxSink()
		r.hostConfig = func(host string, c *kinesisload.Config) {
			c.Sink = sink.forHost(host)
			c.OnStreamRecreated = kinesisload.StreamRecreatedStartOver
			c.ListShardsInterval = 50 * time.Millisecond
		}
		r.start("a")
		old := r.putBatch(5)
		sink.waitStored(t, old)
		// The old generation's owner's next batch, as a host paused in its
		// transaction would commit it later: at its lease's epoch, with
		// sequence numbers of the old stream that sort after every one of
		// the new stream (as on AWS, where they need not start low again).
		late := kinesisload.Batch{Stream: "orders", ShardID: txShard0, Epoch: sink.row(txShard0).Epoch}
		for i := range 3 {
			late.Records = append(late.Records, kinesisload.Record{SequenceNumber: fmt.Sprintf("9%055d", i+1), PartitionKey: "k", Data: []byte("late")})
		}
		late.Checkpoint = scan.AfterSequence(late.Records[2].SequenceNumber)

		r.loads["a"].Pause()
		r.recreate(1)
		sink.mem.RemoveCheckpoints("orders")
		r.loads["a"].Resume()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if cp, ok := sink.mem.Checkpoint("orders", txShard0); ok && cp.Position.Kind == scan.KindTrimHorizon {
				if cp.Epoch != 1<<32 {
					t.Errorf("the new generation's start batch was stored at epoch %d, want 1<<32 (above every epoch of generation 0)", cp.Epoch)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the new generation's start batch was never stored")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := sink.mem.Store(context.Background(), late); !errors.Is(err, kinesisload.ErrLeaseLost) {
			t.Errorf("the old generation's late batch (epoch %d): Store = %v, want an error wrapping ErrLeaseLost", late.Epoch, err)
		}
		fresh := r.putBatch(100)
		sink.waitStored(t, fresh)
	})
}
