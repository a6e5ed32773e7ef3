package kinesisload_test

import (
	"context"
	"math/big"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// The host that wins the initialisation lock saves T0 and dies before its
// commit; records are put; the host that takes the initialisation over
// resolves LATEST at the first host's T0, so those records are delivered
// (with a T0 of its own they would be "before the start" and skipped).
func TestFleetTakeOverResolvesAtTheFirstStartTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
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
		for _, d := range r.sink.deliveries() {
			if d.host != "b" {
				t.Errorf("record %s delivered by host %s, which died before its commit", d.data, d.host)
			}
		}
	})
}

// As above, and the shard splits while no host reads: the host that takes
// the initialisation over lists it CLOSED. It is resolved at the first T0
// like any other, so the records it received after T0 are delivered, then
// its children's. (Before the fix the closed shard became SHARD_END
// without being read: 0 of 20.)
func TestFleetTakeOverReadsAShardThatClosedAfterT0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
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
		splitFake(t, r.fake, "orders", "shardId-000000000000")
		time.Sleep(1100 * time.Millisecond) // past Kinesis's whole-second Date
		r.start("b")
		want = append(want, r.put(20)...) // on the children
		r.waitAll(want)
		checkOrder(t, r.fake, r.sink.deliveries())
	})
}

// splitFake splits shard of stream in the middle of its hash range.
func splitFake(t *testing.T, f *kinesistest.Fake, stream, shard string) {
	t.Helper()
	out, err := f.ListShards(context.Background(), &kinesis.ListShardsInput{StreamName: aws.String(stream)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Shards {
		if aws.ToString(s.ShardId) != shard {
			continue
		}
		lo, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
		hi, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
		mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
		if _, err := f.SplitShard(context.Background(), &kinesis.SplitShardInput{StreamName: aws.String(stream),
			ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(mid.String())}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no shard %s", shard)
}

// A first start-up that stored start batches in a TransactionalSink and
// was killed before it published, taken over by another host: the new
// holder continues that first run at its T0. (Found by the simulation,
// seed 5005484: a child's start checkpoint in the Sink made the next host
// take the stream for one read before, read the child's parent, closed
// before T0, from TRIM_HORIZON, and stop with a ParentAfterChildError,
// at every start.)
func TestAFirstStartUpKilledAfterItsStartBatchesIsContinuedAtItsT0(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		r.put(10)
		splitFake(t, r.fake, "orders", "shardId-000000000000") // closed before the start
		r.put(10)                                              // the children's starts are after these
		time.Sleep(1100 * time.Millisecond)                    // past Kinesis's whole-second Date
		sink := newTxSink()
		r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
		r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = sink.forHost(host) }
		// Host a is killed at its first start batch; then the Sink holds
		// what its start batches stored of the children and not of the
		// parent (they come in no fixed order: written here as a's
		// would be, the children's last records before T0).
		stalled := make(chan struct{})
		var once sync.Once
		sink.set(func(s *txSink) {
			s.before = func(ctx context.Context, host string, b kinesisload.Batch) {
				if host == "a" {
					once.Do(func() { close(stalled) })
					<-ctx.Done()
				}
			}
		})
		r.start("a")
		select {
		case <-stalled:
		case err := <-r.done["a"]:
			t.Fatalf("host a: Run returned before it stored the starts: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("host a never stored a start")
		}
		r.kill("a")
		stored := 0
		for _, child := range []string{"shardId-000000000001", "shardId-000000000002"} {
			if last := lastSequence(t, r.fake, "orders", child); last != "" {
				if _, err := sink.mem.Store(context.Background(), kinesisload.Batch{Stream: "orders", ShardID: child, Checkpoint: scan.AfterSequence(last)}); err != nil {
					t.Fatal(err)
				}
				stored++
			}
		}
		if stored == 0 {
			t.Fatal("no child has a record before the start: the case is not made")
		}
		r.start("b")
		want := r.put(20) // on the children, after T0
		sink.waitStored(t, want)
		select {
		case err := <-r.done["b"]:
			t.Fatalf("host b: Run = %v", err)
		default:
		}
	})
}

// lastSequence returns the sequence number of shard's last record ("" for
// none).
func lastSequence(t *testing.T, f *kinesistest.Fake, stream, shard string) string {
	t.Helper()
	ctx := context.Background()
	it, err := f.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard),
		ShardIteratorType: types.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	for iter := it.ShardIterator; iter != nil; {
		out, err := f.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range out.Records {
			last = aws.ToString(rec.SequenceNumber)
		}
		if len(out.Records) == 0 {
			break
		}
		iter = out.NextShardIterator
	}
	return last
}
