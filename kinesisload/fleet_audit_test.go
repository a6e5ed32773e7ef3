package kinesisload_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// deleteShardItem deletes shard's item from the rig's table by hand.
func (r *fleetRig) deleteShardItem(shard string) {
	r.t.Helper()
	ctx := context.Background()
	it, err := r.fleet.Table().Get(ctx, "orders", "shard#"+shard)
	if err != nil || !it.Exists() {
		r.t.Fatalf("no item for %s: %v", shard, err)
	}
	if err := r.fleet.Table().Delete(ctx, "orders", it.Key, it.Version); err != nil {
		r.t.Fatal(err)
	}
}

// deletions are the shard items a test deletes by hand: one of the two,
// and both (with every item gone the table holds no shard item at all,
// which the audit once took for nothing to check: a one-shard stream's
// only item deleted was never read again, in silence; found by the
// simulation, seed 3000036).
var deletions = map[string][]string{
	"one":  {"shardId-000000000001"},
	"both": {"shardId-000000000000", "shardId-000000000001"},
}

// A shard's item deleted by hand while the fleet reads: without a
// TransactionalSink that holds its checkpoint, the host stops naming it
// (MissingShardError) instead of never reading it again in silence.
// (Before the fix the shard was never granted again while Kinesis listed
// it; the only sign was a lease lost as expired.)
func TestFleetShardItemDeletedByHandStopsRunNamingIt(t *testing.T) {
	for name, deleted := range deletions {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newFleetRig(t, 2)
				want := r.put(20)
				r.start("a")
				r.waitAll(want)
				for _, id := range deleted {
					r.deleteShardItem(id)
				}
				err := r.wait("a")
				var me *kinesisload.MissingShardError
				if !errors.Is(err, kinesisload.ErrShardMissing) || !errors.As(err, &me) || !slices.Equal(me.Shards, deleted) {
					t.Fatalf("Run = %v, want a *MissingShardError naming %v", err, deleted)
				}
			})
		})
	}
}

// With a TransactionalSink, the deleted shards are saved again from the
// Sink's checkpoints, and read on from there: every record stored once.
func TestFleetShardItemDeletedByHandRecoveredFromTheSink(t *testing.T) {
	for name, deleted := range deletions {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newFleetRig(t, 2)
				sink := newTxSink()
				r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink.forHost(host) }
				want := r.put(20)
				r.start("a")
				sink.waitStored(t, want)
				for _, id := range deleted {
					r.deleteShardItem(id)
				}
				more := r.put(20)
				sink.waitStored(t, append(want, more...))
				sink.checkStoredOnce(t, append(want, more...))
				select {
				case err := <-r.done["a"]:
					t.Fatalf("Run stopped: %v", err)
				default:
				}
				for _, id := range deleted {
					if s, ok := r.fleet.Shards("orders")[id]; !ok || s.Progress.Position.Kind == 0 {
						t.Errorf("the deleted item of %s was not saved again", id)
					}
				}
			})
		})
	}
}

// Every shard item of an initialised fleet deleted by hand (with no host
// running): the next host to start does not take the stream for a first
// run, which would resolve LATEST at its own start and skip what arrived
// while no host ran (found by the simulation: a host joining while the
// items of a reshard were not saved yet skipped a shard's records). Every
// shard starts at TRIM_HORIZON, as one born later: records may come
// again, none is lost.
func TestFleetWithEveryShardItemDeletedIsNotAFirstRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
		r.start("a")
		r.waitOwning("a")
		before := r.put(10)
		r.waitAll(before)
		r.close("a")
		r.deleteShardItem("shardId-000000000000")
		r.deleteShardItem("shardId-000000000001")
		during := r.put(10)
		// More than the second by which Kinesis's Date (whole seconds) makes
		// a T0 taken now earlier than now.
		time.Sleep(1500 * time.Millisecond)
		r.start("b")
		r.waitAll(during)
	})
}

// setShardProgress writes shard's progress into its item by hand, as the
// item's JSON encodes it (prog), keeping owner and epoch.
func (r *fleetRig) setShardProgress(shard, prog string) {
	r.t.Helper()
	ctx := context.Background()
	it, err := r.fleet.Table().Get(ctx, "orders", "shard#"+shard)
	if err != nil || !it.Exists() {
		r.t.Fatalf("no item for %s: %v", shard, err)
	}
	it.Fields["prog"] = prog
	if _, err := r.fleet.Table().Put(ctx, it); err != nil {
		r.t.Fatal(err)
	}
}

// A closed shard whose item holds its end as a position (SHARD_END) but is
// not COMPLETED: a host's group-committed positions can carry the end of a
// shard whose COMPLETED commit did not land before the host fenced
// itself, and a later owner's take stores it so. Such a shard is taken and
// completed without a read, and its children are read. (Before the fix it
// was never leasable again and its children never read, in silence; found
// by the simulation, seed 8014111.)
func TestAShardItemAtItsEndButNotCompletedIsCompletedAndItsChildrenRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		before := r.put(10)
		r.start("a")
		r.waitAll(before)
		r.close("a")
		if _, err := r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"),
			ShardToSplit: aws.String("shardId-000000000000"), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
			t.Fatal(err)
		}
		r.setShardProgress("shardId-000000000000", `{"id":"shardId-000000000000","state":"DRAINING","pos":"SHARD_END"}`)
		after := r.put(10)
		r.start("b")
		r.waitAll(after)
		if got := r.fleet.Shards("orders")["shardId-000000000000"].Progress.State; got != kinesisload.StateCompleted {
			t.Errorf("the parent is %v, want COMPLETED", got)
		}
	})
}

// holdRecordsOf sets *hook, a Sink's hook called in Deliver, to hold every
// batch of shard's records until the returned channel is closed (or the
// Deliver's context ends).
func holdRecordsOf(hook *func(ctx context.Context, host string, b kinesisload.Batch), shard string) chan struct{} {
	hold := make(chan struct{})
	*hook = func(ctx context.Context, _ string, b kinesisload.Batch) {
		if b.ShardID == shard && len(b.Records) > 0 {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
	}
	return hold
}

// A child's item deleted by hand while its parent is still read, with a
// TransactionalSink that holds the child's start checkpoint: the child is
// saved again from the Sink waiting for its parent (PENDING_PARENT), not
// ACTIVE, so that the next start does not take it for a child read before
// its parent. (Before the fix it was saved ACTIVE, and every later start
// stopped with a ParentAfterChildError: the parent's remaining records
// were never read; found by the simulation, seed 8014511.)
func TestFleetChildItemDeletedByHandIsSavedAgainWaitingForItsParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parent, child = "shardId-000000000000", "shardId-000000000001"
		r := newFleetRig(t, 1)
		sink := newTxSink()
		hold := holdRecordsOf(&sink.before, parent)
		r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink.forHost(host) }
		before := r.put(10)
		if _, err := r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"),
			ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
			t.Fatal(err)
		}
		r.start("a")
		for {
			if _, ok := r.fleet.Shards("orders")[child]; ok {
				if _, ok := sink.mem.Checkpoint("orders", child); ok {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.deleteShardItem(child)
		after := r.put(10)
		// The fleet's clock runs 1,000 times faster than the bubble's
		// (newFleetRig): past its ResyncInterval many times over; the
		// Loader audits at every listing (300 ms).
		time.Sleep(2 * time.Second)
		if got := r.fleet.Shards("orders")[child].Progress.State; got != kinesisload.StatePendingParent {
			t.Errorf("the child's item was saved again %v, want PENDING_PARENT", got)
		}
		r.kill("a") // while the parent's batch is still held
		r.start("b")
		time.Sleep(10 * time.Second)
		select {
		case err := <-r.done["b"]:
			delete(r.runs, "b")
			close(hold)
			t.Fatalf("the next start stopped: %v", err)
		default:
		}
		close(hold)
		sink.waitStored(t, append(before, after...))
	})
}

// A child's item deleted by hand just before its parent completes: the
// activation of the child (a state without a position) does not save a
// new item of that state alone, which no host could read from ("start
// position: unknown kind 0" at every take; found by the simulation, seed
// 10078379). Without a TransactionalSink the host stops naming the child
// (MissingShardError); with one, the child is saved again from its
// checkpoint there and read.
func TestFleetChildItemDeletedByHandAsItsParentCompletes(t *testing.T) {
	const parent, child = "shardId-000000000000", "shardId-000000000001"
	setUp := func(t *testing.T, r *fleetRig) (before []string) {
		before = r.put(10)
		if _, err := r.fake.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String("orders"),
			ShardToSplit: aws.String(parent), NewStartingHashKey: aws.String("170141183460469231731687303715884105728")}); err != nil {
			t.Fatal(err)
		}
		return before
	}
	waitChildItem := func(r *fleetRig) {
		for {
			if _, ok := r.fleet.Shards("orders")[child]; ok {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	t.Run("plain Sink", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newFleetRig(t, 1)
			hold := holdRecordsOf(&r.sink.block, parent)
			setUp(t, r)
			r.start("a")
			waitChildItem(r)
			r.deleteShardItem(child)
			close(hold)
			err := r.wait("a")
			var me *kinesisload.MissingShardError
			if !errors.As(err, &me) || !slices.Equal(me.Shards, []string{child}) {
				t.Fatalf("Run = %v, want a *MissingShardError naming %s", err, child)
			}
			if _, ok := r.fleet.Shards("orders")[child]; ok {
				t.Errorf("an item of %s was saved again without its position: %+v", child, r.fleet.Shards("orders")[child])
			}
		})
	})
	t.Run("TransactionalSink", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newFleetRig(t, 1)
			sink := newTxSink()
			hold := holdRecordsOf(&sink.before, parent)
			r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink.forHost(host) }
			before := setUp(t, r)
			r.start("a")
			waitChildItem(r)
			r.deleteShardItem(child)
			close(hold)
			after := r.put(10)
			sink.waitStored(t, append(before, after...))
			select {
			case err := <-r.done["a"]:
				delete(r.runs, "a")
				t.Fatalf("Run stopped: %v", err)
			default:
			}
		})
	})
}
