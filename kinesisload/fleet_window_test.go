package kinesisload_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// txMultiHost is one host's handle on the shared txSink as a
// TransactionalMultiSink: its windows are stored by sinktest.Memory in
// one transaction, and the shards of every call are recorded.
type txMultiHost struct {
	txHost
	calls *callRecord
}

var _ kinesisload.TransactionalMultiSink = txMultiHost{}

// callRecord keeps the shards of each DeliverMulti call of a host.
type callRecord struct {
	mu    sync.Mutex
	calls [][]string
}

func (c *callRecord) all() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

func (h txMultiHost) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	var ids []string
	h.s.mu.Lock()
	for _, b := range bs {
		ids = append(ids, b.ShardID)
		for _, r := range b.Records {
			h.s.offered = append(h.s.offered, delivery{host: h.host, shard: b.ShardID, seq: r.SequenceNumber, data: string(r.Data), epoch: b.Epoch})
		}
	}
	h.s.mu.Unlock()
	h.calls.mu.Lock()
	h.calls.calls = append(h.calls.calls, ids)
	h.calls.mu.Unlock()
	_, err := h.s.mem.StoreMulti(ctx, bs)
	return err
}

// windowRecords sums the records a host's Stats show waiting in windows.
func windowRecords(l *kinesisload.Loader) int {
	n := 0
	for _, sh := range l.Stats().Shards {
		n += sh.WindowRecords
	}
	return n
}

// A host's lease is lost while its records wait in windows (MaxBatchWait
// an hour): it is paused past its lease, and the new owner reads the
// shards from the fleet's progress and stores every record. When the
// paused host wakes, it fences itself and drops what its windows held:
// it never hands those records to the Sink, and every record is stored
// exactly once. Per shard and with a MultiSink.
func TestFleetLeaseLostMidWindow(t *testing.T) {
	for _, multi := range []bool{false, true} {
		name := "per shard"
		if multi {
			name = "multi"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newFleetRig(t, 2)
				sink := newTxSink()
				lost := newLostLog()
				r.hooks = map[string]kinesisload.Hook{"a": lost}
				r.hostConfig = func(host string, c *kinesisload.Config) {
					var h kinesisload.Sink = txHost{s: sink, host: host}
					if multi {
						h = txMultiHost{txHost: txHost{s: sink, host: host}, calls: &callRecord{}}
					}
					c.Sink = h
					if host == "a" {
						c.MaxBatchWait = time.Hour
					}
				}
				r.start("a")
				waitInitialised(t, r.loads["a"])
				all := r.putBatch(20)
				waitFor(t, "a's windows hold every record", func() bool { return windowRecords(r.loads["a"]) == len(all) })
				r.fleet.Pause("a")
				t.Cleanup(func() { r.fleet.Resume("a") }) // before the rig closes a, if a check fails
				r.start("b")
				sink.waitStored(t, all)
				r.fleet.Resume("a")
				waitFor(t, "a lost both leases", func() bool {
					lost.mu.Lock()
					defer lost.mu.Unlock()
					return len(lost.lost) == 2
				})
				waitFor(t, "a's windows are empty", func() bool { return windowRecords(r.loads["a"]) == 0 })
				// a would take a shard back (its windows wait an hour): b reads
				// on alone.
				r.close("a")
				more := r.putBatch(10)
				sink.waitStored(t, append(all, more...))
				r.close("b")
				sink.checkStoredOnce(t, append(all, more...))
				_, offered, _ := sink.snapshot()
				for _, d := range offered {
					if d.host == "a" {
						t.Errorf("host a handed the sink record %s after its lease was lost mid-window", d.data)
					}
				}
			})
		})
	}
}

// The Sink holds shard 0 under an epoch above the lease's (the Sink's
// epochs belong to another lease table, say): it refuses the window's
// batch of shard 0 and names only it (*ShardsFencedError). The host stops
// shard 0 as a lost lease of reason LostSinkFenced and delivers shard 1's
// batch again at once, alone, which is stored exactly once; Run goes on.
func TestFleetMultiSinkFencedShardIsDroppedFromTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		sink := newTxSink()
		ctx := context.Background()
		if _, err := sink.mem.Store(ctx, kinesisload.Batch{Stream: "orders", ShardID: txShard0, Checkpoint: scan.TrimHorizon(), Epoch: 1 << 62}); err != nil {
			t.Fatal(err)
		}
		// Both shards' records are on the stream before a reads: one window
		// holds them all (MaxBatchRecords), whichever shard is read first.
		all := r.putBatch(20)
		var inShard0 []string
		for _, s := range []string{txShard0} {
			inShard0 = append(inShard0, recordsOf(t, r, s)...)
		}
		if len(inShard0) == 0 || len(inShard0) == len(all) {
			t.Fatalf("%d of the %d records on shard 0: want both shards to have some", len(inShard0), len(all))
		}
		calls := &callRecord{}
		lost := newLostLog()
		r.hooks = map[string]kinesisload.Hook{"a": lost}
		r.hostConfig = func(host string, c *kinesisload.Config) {
			c.Sink = txMultiHost{txHost: txHost{s: sink, host: host}, calls: calls}
			c.MaxBatchRecords, c.MaxBatchWait = len(all), time.Hour
		}
		r.start("a")
		var inShard1 []string
		for _, d := range all {
			if !slices.Contains(inShard0, d) {
				inShard1 = append(inShard1, d)
			}
		}
		sink.waitStored(t, inShard1)
		var e kinesisload.LeaseLost
		select {
		case e = <-lost.ch:
		case <-time.After(30 * time.Second):
			t.Fatal("shard 0's lease was never reported lost")
		}
		if e.ShardID != txShard0 || e.Reason != kinesisload.LostSinkFenced {
			t.Errorf("OnLeaseLost(%s, %v), want (%s, %v)", e.ShardID, e.Reason, txShard0, kinesisload.LostSinkFenced)
		}
		got := calls.all()
		if len(got) < 2 || len(got[0]) != 2 || !slices.Equal(got[1], []string{"shardId-000000000001"}) {
			t.Errorf("DeliverMulti calls %v: want the window of both shards, then shard 1's batch alone", got)
		}
		select {
		case err := <-r.done["a"]:
			t.Fatalf("host a's Run returned %v after the sink fenced one shard", err)
		default:
		}
		r.close("a")
		stored, _, _ := sink.snapshot()
		n := map[string]int{}
		for _, d := range stored {
			n[d.data]++
		}
		for _, d := range inShard1 {
			if n[d] != 1 {
				t.Errorf("record %s of shard 1 stored %d times, want once", d, n[d])
			}
		}
		for _, d := range inShard0 {
			if n[d] != 0 {
				t.Errorf("record %s of the fenced shard 0 stored %d times, want none", d, n[d])
			}
		}
	})
}

// recordsOf returns the data of the records on shard, from its start.
func recordsOf(t *testing.T, r *fleetRig, shard string) []string {
	t.Helper()
	ctx := context.Background()
	it, err := r.fake.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String("orders"), ShardId: aws.String(shard),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.fake.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, rec := range out.Records {
		data = append(data, string(rec.Data))
	}
	return data
}

// waitFor polls cond until it holds, failing after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dupFenced is txMultiHost whose refusals name each fenced shard twice
// (a Sink that appends a shard once per check that failed).
type dupFenced struct{ txMultiHost }

func (h dupFenced) DeliverMulti(ctx context.Context, bs []kinesisload.Batch) error {
	err := h.txMultiHost.DeliverMulti(ctx, bs)
	if sf, ok := errors.AsType[*kinesisload.ShardsFencedError](err); ok {
		dup := &kinesisload.ShardsFencedError{Stream: sf.Stream, Err: sf.Err}
		for _, id := range sf.Shards {
			dup.Shards = append(dup.Shards, id, id)
		}
		return dup
	}
	return err
}

// A MultiSink's refusal that names a fenced shard twice drops the shard
// from the window once, and the others are delivered: the windower looked
// for the shard again after dropping it, and panicked (the host process
// with it). Found by a review.
func TestFleetMultiSinkRefusalNamingAShardTwiceDropsItOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		sink := newTxSink()
		if _, err := sink.mem.Store(context.Background(), kinesisload.Batch{Stream: "orders", ShardID: txShard0, Checkpoint: scan.TrimHorizon(), Epoch: 1 << 62}); err != nil {
			t.Fatal(err)
		}
		all := r.putBatch(20)
		inShard0 := recordsOf(t, r, txShard0)
		var inShard1 []string
		for _, d := range all {
			if !slices.Contains(inShard0, d) {
				inShard1 = append(inShard1, d)
			}
		}
		r.hostConfig = func(host string, c *kinesisload.Config) {
			c.Sink = dupFenced{txMultiHost{txHost: txHost{s: sink, host: host}, calls: &callRecord{}}}
			c.MaxBatchRecords, c.MaxBatchWait = len(all), time.Hour
		}
		r.start("a")
		sink.waitStored(t, inShard1)
		select {
		case err := <-r.done["a"]:
			t.Fatalf("host a's Run returned %v after the sink fenced one shard", err)
		default:
		}
		r.close("a")
	})
}
