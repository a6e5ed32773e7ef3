package sinktest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Harness is what the conformance suite needs of a
// [kinesisload.TransactionalSink]: handles on one store, and a way to read
// back what is stored.
type Harness interface {
	// Sink returns host's handle on the store. Every handle of one
	// Harness shares the store (one database): the suite delivers a
	// zombie's batches through one ("a") and a new owner's through
	// another ("b"), concurrently in some cases. The handles may be
	// one and the same Sink only when the store is in the process (as
	// Memory's): for a database, give each host a Sink of its own, as
	// each process of a fleet has, or the concurrent cases pass a Sink
	// whose lock is a mutex of the process, which holds no other host.
	Sink(host string) kinesisload.TransactionalSink
	// Stored returns the records stored for shard of stream, one entry
	// per stored copy (a record stored twice, if the store allows it,
	// appears twice), in any order: the suite sorts them by sequence and
	// sub-sequence number. Each needs SequenceNumber,
	// SubSequenceNumber, PartitionKey and Data as delivered; the other
	// fields are not compared.
	Stored(ctx context.Context, stream, shard string) ([]kinesisload.Record, error)
}

// Harness returns m as a [Harness] for [Run]: every host's handle is m.
func (m *Memory) Harness() Harness { return memoryHarness{m} }

type memoryHarness struct{ m *Memory }

func (h memoryHarness) Sink(string) kinesisload.TransactionalSink { return h.m }

func (h memoryHarness) Stored(_ context.Context, stream, shard string) ([]kinesisload.Record, error) {
	var out []kinesisload.Record
	for _, s := range h.m.Stored(stream, shard) {
		out = append(out, s.Record)
	}
	return out, nil
}

// Run runs the conformance suite of the [kinesisload.TransactionalSink]
// contract: each case as a subtest, on a Harness from newHarness. Every
// case uses a stream name of its own ("sinktest-<case>"), so newHarness
// may return handles on one store for every case (a database created
// once) as well as a fresh one.
//
// Both forms of the contract pass: the one epoch stored with the
// checkpoint (as [Memory]), and the sooner fence of a second, highest
// delivered epoch raised by check (a) (as kinesisload/pgsink): where they
// differ (a host that lost the lease delivers the batch after the new
// owner's first one, which was stored whole) the suite accepts the batch
// stored or refused with ErrLeaseLost, and checks that every record is
// stored once either way.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if _, ok := h.Sink("a").(multiSink); c.multi && !ok {
				t.Skipf("the Sink (%T) has no DeliverMulti: not a kinesisload.TransactionalMultiSink", h.Sink("a"))
			}
			if _, ok := h.Sink("a").(kinesisload.Rewinder); c.rewinder && !ok {
				t.Skipf("the Sink (%T) has no RewindCheckpoint: not a kinesisload.Rewinder", h.Sink("a"))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := c.run(ctx, h); err != nil {
				t.Error(err)
			}
		})
	}
}

// suiteCase is one case of the suite: run returns its first failure.
// A multi case runs only on a Sink that has DeliverMulti.
type suiteCase struct {
	name     string
	run      func(ctx context.Context, h Harness) error
	multi    bool
	rewinder bool // runs only on a Sink that is a kinesisload.Rewinder
}

// multiSink is what the multi cases deliver through.
type multiSink interface {
	DeliverMulti(ctx context.Context, batches []kinesisload.Batch) error
}

// cases are the cases of Run, in order.
var cases = []suiteCase{
	{"StartBatch", testStartBatch, false, false},
	{"Redelivery", testRedelivery, false, false},
	{"LowerEpochRefused", testLowerEpoch, false, false},
	{"NewOwnerOverlap", testNewOwnerOverlap, false, false},
	{"NewOwnerLagging", testNewOwnerLagging, false, false},
	{"ZombieAfterNoOp", testZombieAfterNoOp, false, false},
	{"SameEpochOverlap", testSameEpochOverlap, false, false},
	{"SingleProcess", testSingleProcess, false, false},
	{"ShardEnd", testShardEnd, false, false},
	{"Aggregated", testAggregated, false, false},
	{"ConcurrentZombie", testConcurrentZombie, false, false},
	{"ConcurrentFirstBatch", testConcurrentFirstBatch, false, false},
	{"SequenceLength", testSequenceLength, false, false},
	{"RealSequenceNumbers", testRealSequenceNumbers, false, false},
	{"StartPositions", testStartPositions, false, false},
	{"Checkpoints", testCheckpoints, false, false},
	{"StartOverGeneration", testStartOverGeneration, false, false},
	{"MultiStoresAll", testMultiStoresAll, true, false},
	{"MultiFencedShard", testMultiFencedShard, true, false},
	{"MultiAllOrNothing", testMultiAllOrNothing, true, false},
	{"MultiNewOwner", testMultiNewOwner, true, false},
	{"MultiConcurrentZombie", testMultiConcurrentZombie, true, false},
	{"Rewind", testRewind, false, true},
}

// The cases deliver hand-made batches: record i of a shard has sequence
// number seq(i) and data "r-<i>" (an aggregate's user record j:
// "r-<i>.<j>").

const shard0, shard1, shard2, shard3 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002", "shardId-000000000003"

func seq(i int) string { return strconv.Itoa(49_000_000 + 10*i) }

// arrival is every record's ArrivalTime: whole milliseconds, as Kinesis
// gives it.
var arrival = time.UnixMilli(1_700_000_000_000).UTC()

func record(i int) kinesisload.Record {
	return kinesisload.Record{Data: fmt.Appendf(nil, "r-%03d", i), PartitionKey: "pk-" + strconv.Itoa(i%7),
		SequenceNumber: seq(i), ArrivalTime: arrival}
}

// aggregate returns the n user records of the KPL aggregate at record i.
func aggregate(i, n int) []kinesisload.Record {
	var out []kinesisload.Record
	for j := range n {
		out = append(out, kinesisload.Record{Data: fmt.Appendf(nil, "r-%03d.%d", i, j), PartitionKey: "pk-" + strconv.Itoa(j),
			SequenceNumber: seq(i), SubSequenceNumber: int64(j), Aggregated: true, ArrivalTime: arrival})
	}
	return out
}

// records returns records from to to (inclusive).
func records(from, to int) []kinesisload.Record {
	var out []kinesisload.Record
	for i := from; i <= to; i++ {
		out = append(out, record(i))
	}
	return out
}

// checker runs the steps of one case on one stream and keeps the first
// failure: once one step failed, the others do nothing.
type checker struct {
	ctx    context.Context
	h      Harness
	stream string
	err    error
}

func newChecker(ctx context.Context, h Harness, name string) *checker {
	return &checker{ctx: ctx, h: h, stream: "sinktest-" + strings.ToLower(name)}
}

func (c *checker) failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("stream %s: "+format, append([]any{c.stream}, args...)...)
	}
}

// batch is the batch of records from to to of shard at epoch, its
// checkpoint after the last.
func (c *checker) batch(shard string, epoch uint64, from, to int) kinesisload.Batch {
	return c.of(shard, epoch, scan.AfterSequence(seq(to)), records(from, to))
}

// of is the batch of rs of shard at epoch with checkpoint cp.
func (c *checker) of(shard string, epoch uint64, cp scan.Position, rs []kinesisload.Record) kinesisload.Batch {
	return kinesisload.Batch{Stream: c.stream, ShardID: shard, Records: rs, Checkpoint: cp, Epoch: epoch}
}

// start is the start batch of shard: no records, epoch 0.
func (c *checker) start(shard string, cp scan.Position) kinesisload.Batch {
	return c.of(shard, 0, cp, nil)
}

// startAt is the start batch of shard in a fleet's generation whose start
// epoch is epoch (see [kinesisload.StartEpocher]).
func (c *checker) startAt(shard string, cp scan.Position, epoch uint64) kinesisload.Batch {
	return c.of(shard, epoch, cp, nil)
}

// outcome is what a step expects of Deliver.
type outcome int

const (
	stored        outcome = iota // nil
	leaseLost                    // an error wrapping ErrLeaseLost
	refusedBug                   // an error that does not wrap ErrLeaseLost
	storedOrFence                // nil, or an error wrapping ErrLeaseLost (the sooner fence)
)

// deliver delivers b through host's handle and checks the outcome; it
// returns Deliver's error.
func (c *checker) deliver(host string, b kinesisload.Batch, want outcome, what string) error {
	if c.err != nil {
		return c.err
	}
	err := c.h.Sink(host).Deliver(c.ctx, b)
	lost := errors.Is(err, kinesisload.ErrLeaseLost)
	desc := fmt.Sprintf("%s: host %s delivering shard %s, %d records ending at %v at epoch %d", what, host, b.ShardID, len(b.Records), b.Checkpoint, b.Epoch)
	switch want {
	case stored:
		if err != nil {
			c.failf("%s: Deliver = %v, want nil", desc, err)
		}
	case leaseLost:
		if !lost {
			c.failf("%s: Deliver = %v, want an error wrapping kinesisload.ErrLeaseLost (the sender lost the lease: check (b))", desc, err)
		}
	case refusedBug:
		if err == nil || lost || !errors.Is(err, kinesisload.ErrPermanent) {
			c.failf("%s: Deliver = %v, want a permanent error (kinesisload.Permanent) that does not wrap kinesisload.ErrLeaseLost (an overlap at the stored epoch is a bug: check (d))", desc, err)
		}
	case storedOrFence:
		if err != nil && !lost {
			c.failf("%s: Deliver = %v, want nil or an error wrapping kinesisload.ErrLeaseLost", desc, err)
		}
	}
	return err
}

// key is how the suite compares a stored record with a delivered one.
func key(r kinesisload.Record) string {
	return fmt.Sprintf("%s/%d %q (partition key %q)", r.SequenceNumber, r.SubSequenceNumber, r.Data, r.PartitionKey)
}

// expectStored checks that shard holds exactly want, each once.
func (c *checker) expectStored(shard string, want []kinesisload.Record, when string) {
	if c.err != nil {
		return
	}
	got, err := c.h.Stored(c.ctx, c.stream, shard)
	if err != nil {
		c.failf("%s: reading what shard %s stores: %v", when, shard, err)
		return
	}
	slices.SortStableFunc(got, func(a, b kinesisload.Record) int {
		if c := scan.CompareSequence(a.SequenceNumber, b.SequenceNumber); c != 0 {
			return c
		}
		return int(a.SubSequenceNumber - b.SubSequenceNumber)
	})
	g, w := keys(got), keys(want)
	if !slices.Equal(g, w) {
		c.failf("%s: shard %s stores %d records, want %d (each once, whole):\n  got:  %s\n  want: %s",
			when, shard, len(g), len(w), strings.Join(g, ", "), strings.Join(w, ", "))
	}
}

func keys(rs []kinesisload.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = key(r)
	}
	return out
}

// checkpoints returns Checkpoints of the case's stream.
func (c *checker) checkpoints() map[string]scan.Position {
	if c.err != nil {
		return nil
	}
	got, err := c.h.Sink("a").Checkpoints(c.ctx, c.stream)
	if err != nil {
		c.failf("Checkpoints: %v", err)
	}
	return got
}

// expectCheckpoint checks that Checkpoints holds want for shard.
func (c *checker) expectCheckpoint(shard string, want scan.Position, when string) {
	got := c.checkpoints()
	if c.err != nil {
		return
	}
	if p, ok := got[shard]; !ok || !p.Equal(want) {
		c.failf("%s: Checkpoints()[%s] = %v (present %v), want %v", when, shard, p, ok, want)
	}
}

// A start batch is stored as the shard's checkpoint; a start batch for a
// shard that has a checkpoint is a no-op (check (a)), at epoch 0 also when
// the shard is stored at a higher epoch: (a) comes before (b).
func testStartBatch(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "StartBatch")
	c.deliver("a", c.start(shard0, scan.TrimHorizon()), stored, "a start batch")
	c.expectCheckpoint(shard0, scan.TrimHorizon(), "after the start batch")
	c.expectStored(shard0, nil, "after the start batch")
	latest := scan.AfterSequence(seq(0)) // a resolved LATEST
	c.deliver("a", c.start(shard1, latest), stored, "a start batch (a resolved LATEST)")
	c.expectCheckpoint(shard1, latest, "after the start batch")

	c.deliver("a", c.batch(shard0, 0, 1, 3), stored, "the first records")
	c.deliver("a", c.start(shard0, scan.TrimHorizon()), stored, "the start batch again")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(3)), "after a start batch for a shard with a checkpoint (a no-op)")
	c.expectStored(shard0, records(1, 3), "after a start batch for a shard with a checkpoint")

	c.deliver("b", c.batch(shard1, 2, 1, 2), stored, "a lease's first batch")
	c.deliver("a", c.start(shard1, latest), stored, "a start batch at epoch 0 for a shard stored at epoch 2 (check (a) before (b))")
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(2)), "after a start batch for a shard with a checkpoint")
	c.expectStored(shard1, records(1, 2), "after a start batch for a shard with a checkpoint")
	return c.err
}

// A batch delivered again (the answer to its COMMIT was lost) is a no-op,
// the last one or an earlier one, in a fleet and without.
func testRedelivery(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "Redelivery")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "the first batch")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "the first batch again")
	c.expectStored(shard0, records(1, 3), "after a re-delivery")
	c.deliver("a", c.batch(shard0, 1, 4, 6), stored, "the second batch")
	c.deliver("a", c.batch(shard0, 1, 4, 6), stored, "the second batch again")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "the first batch once more")
	c.expectStored(shard0, records(1, 6), "after re-deliveries")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(6)), "after re-deliveries")

	c.deliver("a", c.batch(shard1, 0, 1, 2), stored, "a batch without a fleet")
	c.deliver("a", c.batch(shard1, 0, 1, 2), stored, "the batch again without a fleet")
	c.expectStored(shard1, records(1, 2), "after a re-delivery without a fleet")
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(2)), "after a re-delivery without a fleet")
	return c.err
}

// A batch at an epoch below the stored one is refused with ErrLeaseLost
// and stores nothing, whether it follows the checkpoint or overlaps it.
func testLowerEpoch(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "LowerEpochRefused")
	c.deliver("a", c.batch(shard0, 1, 1, 2), stored, "a's batch")
	c.deliver("b", c.batch(shard0, 2, 3, 4), stored, "the new owner's first batch")
	c.deliver("a", c.batch(shard0, 1, 5, 6), leaseLost, "the zombie's next batch")
	c.deliver("a", c.batch(shard0, 1, 3, 5), leaseLost, "a zombie's batch overlapping the checkpoint")
	c.expectStored(shard0, records(1, 4), "after the refusals")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(4)), "after the refusals")
	c.deliver("b", c.batch(shard0, 2, 5, 6), stored, "the new owner's next batch")
	c.expectStored(shard0, records(1, 6), "after the new owner's next batch")
	return c.err
}

// A new owner's first batch that overlaps the stored checkpoint stores only
// the records after it.
func testNewOwnerOverlap(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "NewOwnerOverlap")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a's batch")
	c.deliver("b", c.batch(shard0, 2, 2, 5), stored, "the new owner's overlapping first batch")
	c.expectStored(shard0, records(1, 5), "after the overlap")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(5)), "after the overlap")
	c.deliver("b", c.batch(shard0, 2, 6, 6), stored, "the new owner's next batch")
	c.expectStored(shard0, records(1, 6), "after the next batch")

	c.deliver("a", c.start(shard1, scan.TrimHorizon()), stored, "a start batch")
	c.deliver("b", c.batch(shard1, 3, 1, 2), stored, "a lease's first batch after the start")
	c.expectStored(shard1, records(1, 2), "after a lease's first batch")
	return c.err
}

// A new owner whose table lags by more than one batch: its batches stored
// whole are no-ops, the one that overlaps stores only what follows, and it
// is never refused (the epoch compared is the one stored with the
// checkpoint, not one raised by a no-op).
func testNewOwnerLagging(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "NewOwnerLagging")
	for i := 1; i <= 5; i += 2 {
		c.deliver("a", c.batch(shard0, 1, i, i+1), stored, "a's batch")
	}
	c.deliver("b", c.batch(shard0, 2, 1, 2), stored, "the new owner's first batch, stored whole")
	c.deliver("b", c.batch(shard0, 2, 3, 4), stored, "the new owner's second batch, stored whole")
	c.deliver("b", c.batch(shard0, 2, 5, 7), stored, "the new owner's third batch, overlapping")
	c.deliver("b", c.batch(shard0, 2, 8, 9), stored, "the new owner's fourth batch")
	c.expectStored(shard0, records(1, 9), "after the lagging owner caught up")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(9)), "after the lagging owner caught up")

	// Batch boundaries of the new owner differ from the old one's.
	c.deliver("a", c.batch(shard1, 4, 1, 3), stored, "a's batch")
	c.deliver("a", c.batch(shard1, 4, 4, 6), stored, "a's batch")
	c.deliver("b", c.batch(shard1, 7, 1, 2), stored, "the new owner's first batch, stored whole")
	c.deliver("b", c.batch(shard1, 7, 3, 4), stored, "the new owner's second batch, stored whole")
	c.deliver("b", c.batch(shard1, 7, 5, 8), stored, "the new owner's third batch, overlapping")
	c.expectStored(shard1, records(1, 8), "after the lagging owner caught up")
	return c.err
}

// A host that lost the lease delivers the batch after the new owner's
// first one, which was stored whole (a no-op): it is stored (the one
// epoch) or refused (a sooner fence); the new owner then stores only what
// follows, the zombie is refused once the new owner stored a batch, and
// every record is stored once.
func testZombieAfterNoOp(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "ZombieAfterNoOp")
	c.deliver("a", c.batch(shard0, 1, 1, 2), stored, "a's batch")
	c.deliver("b", c.batch(shard0, 2, 1, 2), stored, "the new owner's first batch, stored whole")
	c.deliver("a", c.batch(shard0, 1, 3, 3), storedOrFence, "the zombie's next batch after the new owner's no-op")
	c.deliver("b", c.batch(shard0, 2, 3, 4), stored, "the new owner's second batch")
	c.deliver("a", c.batch(shard0, 1, 4, 5), leaseLost, "the zombie's batch after the new owner stored")
	c.expectStored(shard0, records(1, 4), "in the end")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(4)), "in the end")
	return c.err
}

// A batch of the stored epoch that overlaps the stored checkpoint (but is
// not stored whole) is an error that does not wrap ErrLeaseLost, and
// stores nothing; in a fleet and without.
func testSameEpochOverlap(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "SameEpochOverlap")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a batch")
	c.deliver("a", c.batch(shard0, 1, 3, 5), refusedBug, "an overlapping batch of the same lease")
	c.expectStored(shard0, records(1, 3), "after the overlap")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(3)), "after the overlap")
	c.deliver("a", c.batch(shard0, 1, 4, 5), stored, "the batch that follows")
	c.expectStored(shard0, records(1, 5), "after the batch that follows")

	c.deliver("a", c.batch(shard1, 0, 1, 3), stored, "a batch without a fleet")
	c.deliver("a", c.batch(shard1, 0, 2, 4), refusedBug, "an overlapping batch without a fleet")
	c.expectStored(shard1, records(1, 3), "after the overlap without a fleet")
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(3)), "after the overlap without a fleet")
	return c.err
}

// Without a fleet every epoch is 0: a start, batches in sequence, the end
// of the shard, each stored with its checkpoint.
func testSingleProcess(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "SingleProcess")
	c.deliver("a", c.start(shard0, scan.TrimHorizon()), stored, "the start batch")
	for _, b := range [][2]int{{1, 3}, {4, 4}, {5, 9}} {
		c.deliver("a", c.batch(shard0, 0, b[0], b[1]), stored, "a batch")
		c.expectCheckpoint(shard0, scan.AfterSequence(seq(b[1])), "after a batch")
		c.expectStored(shard0, records(1, b[1]), "after a batch")
	}
	c.deliver("a", c.start(shard0, scan.ShardEnd()), stored, "the batch that ends the shard")
	c.expectCheckpoint(shard0, scan.ShardEnd(), "after the end of the shard")
	c.expectStored(shard0, records(1, 9), "after the end of the shard")
	return c.err
}

// SHARD_END is stored, with records or without, and after it nothing is:
// every later batch is a no-op (SHARD_END is the last position).
func testShardEnd(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "ShardEnd")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a batch")
	c.deliver("a", c.of(shard0, 1, scan.ShardEnd(), records(4, 5)), stored, "the last batch, with records")
	c.expectCheckpoint(shard0, scan.ShardEnd(), "after the last batch")
	c.expectStored(shard0, records(1, 5), "after the last batch")
	c.deliver("a", c.of(shard0, 1, scan.ShardEnd(), records(4, 5)), stored, "the last batch again")
	c.deliver("b", c.of(shard0, 2, scan.ShardEnd(), records(4, 5)), stored, "a new owner's last batch")
	c.deliver("b", c.batch(shard0, 2, 6, 7), stored, "a batch after SHARD_END")
	c.expectCheckpoint(shard0, scan.ShardEnd(), "after batches after SHARD_END")
	c.expectStored(shard0, records(1, 5), "after batches after SHARD_END")

	c.deliver("a", c.batch(shard1, 1, 1, 2), stored, "a batch")
	c.deliver("a", c.of(shard1, 1, scan.ShardEnd(), nil), stored, "the batch with no records that ends the shard")
	c.expectCheckpoint(shard1, scan.ShardEnd(), "after the end of the shard")
	c.deliver("a", c.start(shard1, scan.TrimHorizon()), stored, "a start batch after SHARD_END")
	c.expectCheckpoint(shard1, scan.ShardEnd(), "after a start batch after SHARD_END")
	c.expectStored(shard1, records(1, 2), "after the end of the shard")

	c.deliver("a", c.start(shard2, scan.ShardEnd()), stored, "the start batch of a closed shard with nothing to read")
	c.expectCheckpoint(shard2, scan.ShardEnd(), "after the start batch SHARD_END")
	c.expectStored(shard2, nil, "after the start batch SHARD_END")
	return c.err
}

// The user records of a KPL aggregate share a sequence number and are
// stored whole (every sub-sequence number); a new owner's overlap drops a
// stored aggregate whole and keeps the next whole.
func testAggregated(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "Aggregated")
	first := append(append([]kinesisload.Record{record(1)}, aggregate(2, 4)...), aggregate(3, 3)...)
	c.deliver("a", c.of(shard0, 1, scan.AfterSequence(seq(3)), first), stored, "a batch of two aggregates")
	c.expectStored(shard0, first, "after the aggregates")
	next := append(append(aggregate(4, 2), record(5)), aggregate(6, 3)...)
	overlap := append(aggregate(3, 3), next...)
	c.deliver("b", c.of(shard0, 2, scan.AfterSequence(seq(6)), overlap), stored, "a new owner's batch overlapping by an aggregate")
	c.expectStored(shard0, append(first, next...), "after the new owner's overlap")
	c.deliver("b", c.of(shard0, 2, scan.AfterSequence(seq(6)), overlap), stored, "the new owner's batch again")
	c.expectStored(shard0, append(first, next...), "after a re-delivery")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(6)), "after the aggregates")
	return c.err
}

// A zombie (epoch 1) and the new owner (epoch 2, from the shard's start)
// deliver at once on several shards: the new owner is never refused, the
// zombie only with ErrLeaseLost (and then stops, as the Loader does), and
// every record is stored once.
func testConcurrentZombie(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "ConcurrentZombie")
	const n = 30
	shards := []string{shard0, shard1, shard2, shard3}
	for i, s := range shards {
		for from := 1; from <= 2*i+1; from += 2 {
			c.deliver("a", c.batch(s, 1, from, from+1), stored, "a's batch before it is paused")
		}
	}
	if c.err != nil {
		return c.err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	begin := make(chan struct{})
	for i, s := range shards {
		wg.Go(func() { // the zombie: batches of 2 after what it stored
			<-begin
			for from := 2*i + 3; from <= n; from += 2 {
				b := c.batch(s, 1, from, min(from+1, n))
				err := h.Sink("a").Deliver(ctx, b)
				if errors.Is(err, kinesisload.ErrLeaseLost) {
					return
				}
				if err != nil {
					report(fmt.Errorf("the zombie's batch of shard %s ending at %v: Deliver = %v, want nil or an error wrapping ErrLeaseLost", s, b.Checkpoint, err))
					return
				}
			}
		})
		wg.Go(func() { // the new owner: batches of 3 from the start
			<-begin
			for from := 1; from <= n; from += 3 {
				b := c.batch(s, 2, from, min(from+2, n))
				if err := h.Sink("b").Deliver(ctx, b); err != nil {
					report(fmt.Errorf("the new owner's batch of shard %s ending at %v: Deliver = %v, want nil", s, b.Checkpoint, err))
					return
				}
			}
		})
	}
	close(begin)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("stream %s: %w", c.stream, errors.Join(errs...))
	}
	for _, s := range shards {
		c.expectStored(s, records(1, n), "after the zombie and the new owner")
		c.expectCheckpoint(s, scan.AfterSequence(seq(n)), "after the zombie and the new owner")
	}
	return c.err
}

// A zombie (epoch 1) and the new owner (epoch 2) deliver the first batch
// of shards that have no row yet (a child born after the starts were
// stored, read from TRIM_HORIZON by both) at once: the shard's lock must
// hold a row that does not exist yet (a SELECT ... FOR UPDATE that finds
// no row locks nothing: lock or create it), or both batches are stored
// whole. Whichever comes first, every record is stored once.
func testConcurrentFirstBatch(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "ConcurrentFirstBatch")
	const shards, rounds = 8, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	begin := make(chan struct{})
	var ids []string
	for r := range rounds {
		for i := range shards {
			id := fmt.Sprintf("shardId-%012d", 100+r*shards+i)
			ids = append(ids, id)
			wg.Go(func() { // the zombie: records 1 to 2
				<-begin
				b := c.batch(id, 1, 1, 2)
				if err := h.Sink("a").Deliver(ctx, b); err != nil && !errors.Is(err, kinesisload.ErrLeaseLost) {
					report(fmt.Errorf("the zombie's first batch of shard %s: Deliver = %v, want nil or an error wrapping ErrLeaseLost", id, err))
				}
			})
			wg.Go(func() { // the new owner: records 1 to 3
				<-begin
				b := c.batch(id, 2, 1, 3)
				if err := h.Sink("b").Deliver(ctx, b); err != nil {
					report(fmt.Errorf("the new owner's first batch of shard %s: Deliver = %v, want nil", id, err))
				}
			})
		}
	}
	close(begin)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("stream %s: %w", c.stream, errors.Join(errs...))
	}
	for _, id := range ids {
		c.expectStored(id, records(1, 3), "after the zombie's and the new owner's first batches")
		c.expectCheckpoint(id, scan.AfterSequence(seq(3)), "after the zombie's and the new owner's first batches")
	}
	return c.err
}

// Sequence numbers are decimal numbers of any length (up to 128 bits), not
// text: one with more digits is further along. A new owner's overlap
// across a sequence number that gains a digit keeps only the records after
// the checkpoint, and a batch of the same lease that overlaps it is
// refused.
func testSequenceLength(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "SequenceLength")
	seqs := []string{"999999990", "999999995", "1000000000", "1000000005", "1000000010"}
	rs := make([]kinesisload.Record, len(seqs))
	for i, s := range seqs {
		rs[i] = kinesisload.Record{Data: fmt.Appendf(nil, "s-%d", i), PartitionKey: "pk", SequenceNumber: s, ArrivalTime: arrival}
	}
	upTo := func(i int) scan.Position { return scan.AfterSequence(seqs[i]) }
	c.deliver("a", c.of(shard0, 1, upTo(3), rs[:4]), stored, "a's batch across a sequence number that gains a digit")
	c.deliver("b", c.of(shard0, 2, upTo(4), rs), stored, "the new owner's first batch, overlapping")
	c.expectStored(shard0, rs, "after the new owner's overlap")
	c.expectCheckpoint(shard0, upTo(4), "after the new owner's overlap")

	c.deliver("a", c.of(shard1, 1, upTo(2), rs[:3]), stored, "a batch")
	c.deliver("a", c.of(shard1, 1, upTo(4), rs[1:]), refusedBug, "an overlapping batch of the same lease")
	c.expectStored(shard1, rs[:3], "after the overlap")
	return c.err
}

// Kinesis sequence numbers have 56 digits and two records of one shard
// may differ only in the last ones: a Sink must compare them exactly (as
// numbers of any length), not as float64 (or SQL's seq::float8), where
// they collide and (a) takes a new batch for one stored already.
func testRealSequenceNumbers(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "RealSequenceNumbers")
	const base = "49590338271490256608559692538361571095921575989136588"
	rs := make([]kinesisload.Record, 8)
	for i := range rs {
		rs[i] = kinesisload.Record{Data: fmt.Appendf(nil, "k-%d", i), PartitionKey: "pk", SequenceNumber: fmt.Sprintf("%s%03d", base, 100+10*i), ArrivalTime: arrival}
	}
	upTo := func(i int) scan.Position { return scan.AfterSequence(rs[i].SequenceNumber) }
	c.deliver("a", c.of(shard0, 1, upTo(2), rs[:3]), stored, "a batch of 56-digit sequence numbers")
	c.deliver("a", c.of(shard0, 1, upTo(4), rs[3:5]), stored, "the next batch")
	c.expectStored(shard0, rs[:5], "after two batches")
	c.expectCheckpoint(shard0, upTo(4), "after two batches")
	c.deliver("b", c.of(shard0, 2, upTo(6), rs[3:7]), stored, "the new owner's first batch, overlapping")
	c.expectStored(shard0, rs[:7], "after the new owner's overlap")
	c.deliver("b", c.of(shard0, 2, upTo(6), rs[5:7]), stored, "the new owner's batch again")
	c.deliver("b", c.of(shard0, 2, upTo(7), rs[7:]), stored, "the new owner's next batch")
	c.expectStored(shard0, rs, "in the end")
	c.expectCheckpoint(shard0, upTo(7), "in the end")
	return c.err
}

// A kinesisload.Rewinder: RewindCheckpoint stores the rewind's position as
// the checkpoint, back or forward, with the epoch of the lease the shard
// is read under (a host of an earlier epoch is refused as before, check
// (b)); called twice it changes nothing more; the records delivered again
// from it are taken (at least once: a Sink keyed on sequence numbers
// stores each once), and the records after the old checkpoint once.
func testRewind(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "Rewind")
	r, _ := h.Sink("b").(kinesisload.Rewinder)
	rewind := func(shard string, to scan.Position, epoch uint64) {
		for range 2 {
			if c.err == nil {
				if err := r.RewindCheckpoint(c.ctx, c.stream, shard, to, epoch); err != nil {
					c.failf("RewindCheckpoint(%s, %v, %d) = %v, want nil", shard, to, epoch, err)
				}
			}
		}
	}
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a's batch")
	c.deliver("a", c.batch(shard0, 1, 4, 6), stored, "a's next batch")
	rewind(shard0, scan.AfterSequence(seq(2)), 2)
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(2)), "after a rewind back")
	c.deliver("a", c.batch(shard0, 1, 7, 8), leaseLost, "the previous owner's next batch after the rewind")
	c.deliver("b", c.batch(shard0, 2, 3, 4), stored, "records delivered again after the rewind")
	c.deliver("b", c.batch(shard0, 2, 5, 8), stored, "records delivered again, then new ones")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(8)), "after the records delivered again")
	if c.err == nil {
		got, err := c.h.Stored(c.ctx, c.stream, shard0)
		if err != nil {
			c.failf("reading what shard %s stores: %v", shard0, err)
		} else {
			n := map[string]int{}
			for _, rec := range got {
				n[key(rec)]++
			}
			for i := 1; i <= 8; i++ {
				k := key(record(i))
				if n[k] == 0 || i > 6 && n[k] != 1 {
					c.failf("after the rewind: shard %s stores record %d %d times, want it (once, for a record after the old checkpoint)", shard0, i, n[k])
				}
			}
		}
	}

	// The Sink stored SHARD_END but the store that was rewound had not
	// committed it (the host died in between): everything delivered
	// again is stored already, and must be taken, not refused.
	c.deliver("a", c.of(shard2, 1, scan.ShardEnd(), records(1, 3)), stored, "a's last batch of a closed shard")
	rewind(shard2, scan.AfterSequence(seq(1)), 2)
	c.expectCheckpoint(shard2, scan.AfterSequence(seq(1)), "after a rewind back from SHARD_END")
	c.deliver("b", c.batch(shard2, 2, 2, 3), stored, "records delivered again after a rewind from SHARD_END")
	c.deliver("b", c.of(shard2, 2, scan.ShardEnd(), nil), stored, "the end of the shard again")
	c.expectCheckpoint(shard2, scan.ShardEnd(), "after the end of the shard again")

	c.deliver("a", c.batch(shard1, 1, 1, 2), stored, "a's batch")
	rewind(shard1, scan.AfterSequence(seq(5)), 2)
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(5)), "after a rewind forward")
	c.deliver("b", c.batch(shard1, 2, 6, 7), stored, "the records after a rewind forward")
	c.expectStored(shard1, append(records(1, 2), records(6, 7)...), "after a rewind forward")
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(7)), "after a rewind forward")
	return c.err
}

// A shard's start may be any start position (Config.Shards): after an
// AT_SEQUENCE_NUMBER start the record at it is the first to store, after
// AT_TIMESTAMP or TRIM_HORIZON every record is; for the lease that reads
// from the start (the same epoch, (d)) and for a new owner ((c)).
func testStartPositions(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "StartPositions")
	at := scan.AtSequence(seq(1))
	c.deliver("a", c.start(shard0, at), stored, "an AT_SEQUENCE_NUMBER start")
	c.deliver("a", c.batch(shard0, 0, 1, 3), stored, "the first batch from an AT_SEQUENCE_NUMBER start, without a fleet")
	c.expectStored(shard0, records(1, 3), "after the first batch from an AT_SEQUENCE_NUMBER start")

	c.deliver("a", c.start(shard1, at), stored, "an AT_SEQUENCE_NUMBER start")
	c.deliver("b", c.batch(shard1, 2, 1, 3), stored, "a lease's first batch from an AT_SEQUENCE_NUMBER start")
	c.expectStored(shard1, records(1, 3), "after a lease's first batch from an AT_SEQUENCE_NUMBER start")

	ts := scan.AtTimestamp(arrival)
	c.deliver("a", c.start(shard2, ts), stored, "an AT_TIMESTAMP start")
	c.deliver("a", c.start(shard2, scan.TrimHorizon()), stored, "a TRIM_HORIZON start batch after it (a no-op)")
	c.expectCheckpoint(shard2, ts, "after the start batches")
	c.deliver("b", c.batch(shard2, 2, 1, 2), stored, "a lease's first batch from an AT_TIMESTAMP start")
	c.deliver("b", c.batch(shard2, 2, 3, 4), stored, "its next batch")
	c.expectStored(shard2, records(1, 4), "after batches from an AT_TIMESTAMP start")
	c.expectCheckpoint(shard2, scan.AfterSequence(seq(4)), "after batches from an AT_TIMESTAMP start")
	return c.err
}

// Checkpoints returns the last checkpoint of every shard of the stream,
// and only of that stream; an empty map for a stream with none.
func testCheckpoints(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "Checkpoints")
	c.deliver("a", c.batch(shard0, 1, 1, 2), stored, "a batch")
	c.deliver("a", c.batch(shard0, 1, 3, 4), stored, "a batch")
	c.deliver("a", c.start(shard1, scan.TrimHorizon()), stored, "a start batch")
	c.deliver("a", c.batch(shard2, 0, 1, 1), stored, "a batch")
	c.deliver("a", c.of(shard2, 0, scan.ShardEnd(), nil), stored, "the end of a shard")
	c.deliver("a", c.batch(shard3, 1, 1, 3), stored, "a batch")
	c.deliver("b", c.batch(shard3, 2, 2, 6), stored, "a new owner's overlapping batch")
	other := *c
	other.stream = c.stream + "-other"
	other.deliver("a", other.batch(shard0, 1, 1, 9), stored, "a batch of another stream")
	other.deliver("a", other.batch(shard3, 1, 1, 9), stored, "a batch of another stream")
	if other.err != nil {
		return other.err
	}
	want := map[string]scan.Position{
		shard0: scan.AfterSequence(seq(4)),
		shard1: scan.TrimHorizon(),
		shard2: scan.ShardEnd(),
		shard3: scan.AfterSequence(seq(6)),
	}
	got := c.checkpoints()
	if c.err == nil && !maps.EqualFunc(got, want, scan.Position.Equal) {
		c.failf("Checkpoints = %v, want %v", got, want)
	}
	none := *c
	none.stream = c.stream + "-none"
	if got := none.checkpoints(); none.err == nil && len(got) != 0 {
		none.failf("Checkpoints of a stream with none stored = %v, want an empty map", got)
	}
	if c.err == nil {
		c.err = none.err
	}
	return c.err
}

// After a fleet-wide start-over on a stream re-created under the name (the
// operator removed the old stream's rows: the shard has none), the new
// generation's start batch carries the generation's start epoch, above
// every epoch of the old generation (kinesisload/coordtest and
// kinesisload/dynamo: N<<32). Stored with the checkpoint, it refuses a late
// batch of a host of the old generation (check (b)), whose sequence
// numbers sort after the new stream's: stored, it would make the new
// owner's records look stored already, and none of them would be.
func testStartOverGeneration(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "StartOverGeneration")
	const base = uint64(1) << 32
	c.deliver("b", c.startAt(shard0, scan.TrimHorizon(), base), stored, "the new generation's start batch")
	c.deliver("a", c.batch(shard0, 7, 1000, 1002), leaseLost, "a late batch of a host of the old generation (epoch 7)")
	c.deliver("b", c.batch(shard0, base+1, 1, 3), stored, "the new generation's first batch")
	c.expectStored(shard0, records(1, 3), "after the new generation's first batch")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(3)), "after the new generation's first batch")
	return c.err
}

// deliverMulti delivers bs in one DeliverMulti call through host's handle
// and checks the outcome: want stored (nil), refusedBug, or leaseLost,
// which must be a *kinesisload.ShardsFencedError naming exactly fenced.
func (c *checker) deliverMulti(host string, bs []kinesisload.Batch, want outcome, fenced []string, what string) error {
	if c.err != nil {
		return c.err
	}
	ms, ok := c.h.Sink(host).(multiSink)
	if !ok {
		c.failf("%s: the Sink of host %s has no DeliverMulti", what, host)
		return c.err
	}
	err := ms.DeliverMulti(c.ctx, bs)
	var shards []string
	for _, b := range bs {
		shards = append(shards, fmt.Sprintf("%s ending at %v at epoch %d", b.ShardID, b.Checkpoint, b.Epoch))
	}
	desc := fmt.Sprintf("%s: host %s delivering a window of %s", what, host, strings.Join(shards, ", "))
	switch want {
	case stored:
		if err != nil {
			c.failf("%s: DeliverMulti = %v, want nil", desc, err)
		}
	case refusedBug:
		if err == nil || errors.Is(err, kinesisload.ErrLeaseLost) || !errors.Is(err, kinesisload.ErrPermanent) {
			c.failf("%s: DeliverMulti = %v, want a permanent error that does not wrap kinesisload.ErrLeaseLost", desc, err)
		}
	case leaseLost:
		sf, ok := errors.AsType[*kinesisload.ShardsFencedError](err)
		if !ok || !errors.Is(err, kinesisload.ErrLeaseLost) {
			c.failf("%s: DeliverMulti = %v, want a *kinesisload.ShardsFencedError naming %v (check (b) of each shard)", desc, err, fenced)
			break
		}
		got := slices.Sorted(slices.Values(sf.Shards))
		if !slices.Equal(got, slices.Sorted(slices.Values(fenced))) {
			c.failf("%s: DeliverMulti refused shards %v, want exactly %v: the other shards' records must be stored when delivered again without them", desc, got, fenced)
		}
	}
	return err
}

// A window of several shards is stored whole: every shard's records and
// checkpoint, whatever the shard's row was (none, a start, a checkpoint,
// SHARD_END to store); the same window again is a no-op (a lost answer to
// its COMMIT), and a window mixing a batch stored already with new ones
// stores only the new ones.
func testMultiStoresAll(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "MultiStoresAll")
	c.deliver("a", c.start(shard1, scan.TrimHorizon()), stored, "a start batch")
	c.deliver("a", c.batch(shard2, 1, 1, 2), stored, "a batch")
	window := []kinesisload.Batch{
		c.batch(shard0, 1, 1, 3),
		c.batch(shard1, 1, 1, 2),
		c.batch(shard2, 1, 3, 5),
		c.of(shard3, 1, scan.ShardEnd(), records(1, 1)),
	}
	check := func(when string) {
		c.expectStored(shard0, records(1, 3), when)
		c.expectStored(shard1, records(1, 2), when)
		c.expectStored(shard2, records(1, 5), when)
		c.expectStored(shard3, records(1, 1), when)
		c.expectCheckpoint(shard0, scan.AfterSequence(seq(3)), when)
		c.expectCheckpoint(shard1, scan.AfterSequence(seq(2)), when)
		c.expectCheckpoint(shard2, scan.AfterSequence(seq(5)), when)
		c.expectCheckpoint(shard3, scan.ShardEnd(), when)
	}
	c.deliverMulti("a", window, stored, nil, "a window of four shards")
	check("after the window")
	c.deliverMulti("a", window, stored, nil, "the window again")
	check("after the window again")
	c.deliverMulti("a", []kinesisload.Batch{c.batch(shard0, 1, 4, 4), c.batch(shard1, 1, 1, 2), c.batch(shard2, 1, 6, 7)}, stored, nil,
		"a window with a batch stored already")
	c.expectStored(shard0, records(1, 4), "after the next window")
	c.expectStored(shard1, records(1, 2), "after the next window")
	c.expectStored(shard2, records(1, 7), "after the next window")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(4)), "after the next window")
	c.expectCheckpoint(shard2, scan.AfterSequence(seq(7)), "after the next window")
	return c.err
}

// When one shard of a window was taken by a newer owner (check (b) for it
// alone), the window is refused with a *kinesisload.ShardsFencedError
// naming that shard and no other, and nothing of it is stored; delivered
// again without that shard, the others are stored.
func testMultiFencedShard(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "MultiFencedShard")
	for _, s := range []string{shard0, shard1, shard2} {
		c.deliver("a", c.batch(s, 1, 1, 2), stored, "a's batch")
	}
	c.deliver("b", c.batch(shard1, 2, 3, 4), stored, "the new owner of shard 1")
	window := []kinesisload.Batch{c.batch(shard0, 1, 3, 5), c.batch(shard1, 1, 3, 5), c.batch(shard2, 1, 3, 5)}
	c.deliverMulti("a", window, leaseLost, []string{shard1}, "a's window, shard 1 lost to b")
	c.expectStored(shard0, records(1, 2), "after the refusal (nothing of the window)")
	c.expectStored(shard1, records(1, 4), "after the refusal")
	c.expectStored(shard2, records(1, 2), "after the refusal (nothing of the window)")
	c.deliverMulti("a", []kinesisload.Batch{window[0], window[2]}, stored, nil, "a's window again, without shard 1")
	c.expectStored(shard0, records(1, 5), "after the window without shard 1")
	c.expectStored(shard2, records(1, 5), "after the window without shard 1")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(5)), "after the window without shard 1")
	c.expectCheckpoint(shard1, scan.AfterSequence(seq(4)), "after the window without shard 1")
	c.expectCheckpoint(shard2, scan.AfterSequence(seq(5)), "after the window without shard 1")

	c.deliver("b", c.batch(shard0, 3, 6, 6), stored, "the new owner of shard 0")
	c.deliver("b", c.batch(shard2, 3, 6, 6), stored, "the new owner of shard 2")
	c.deliverMulti("a", []kinesisload.Batch{c.batch(shard0, 1, 6, 7), c.batch(shard2, 1, 6, 7)}, leaseLost, []string{shard0, shard2}, "a's window, every shard lost")
	c.expectStored(shard0, records(1, 6), "after every shard was refused")
	c.expectStored(shard2, records(1, 6), "after every shard was refused")
	return c.err
}

// A window one of whose batches is a bug (an overlap at the stored epoch,
// check (d)) is refused with a permanent error, and nothing of it is
// stored: one transaction.
func testMultiAllOrNothing(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "MultiAllOrNothing")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a batch")
	c.deliver("a", c.batch(shard1, 1, 1, 3), stored, "a batch")
	c.deliverMulti("a", []kinesisload.Batch{c.batch(shard0, 1, 4, 5), c.batch(shard1, 1, 3, 5), c.batch(shard2, 1, 1, 2)}, refusedBug, nil,
		"a window whose batch of shard 1 overlaps its checkpoint")
	c.expectStored(shard0, records(1, 3), "after the refused window")
	c.expectStored(shard1, records(1, 3), "after the refused window")
	c.expectStored(shard2, nil, "after the refused window")
	c.expectCheckpoint(shard0, scan.AfterSequence(seq(3)), "after the refused window")
	if got := c.checkpoints(); c.err == nil {
		if _, ok := got[shard2]; ok {
			c.failf("after the refused window: Checkpoints has shard %s: %v", shard2, got[shard2])
		}
	}
	return c.err
}

// A new owner's window overlapping what the previous owner stored (check
// (c) for each shard), beside a shard it reads from a start: each shard
// stores only what follows its checkpoint.
func testMultiNewOwner(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "MultiNewOwner")
	c.deliver("a", c.batch(shard0, 1, 1, 3), stored, "a's batch")
	c.deliver("a", c.batch(shard1, 1, 1, 2), stored, "a's batch")
	c.deliver("a", c.start(shard2, scan.AtSequence(seq(1))), stored, "a start batch")
	c.deliverMulti("b", []kinesisload.Batch{c.batch(shard0, 2, 2, 5), c.batch(shard1, 2, 1, 4), c.batch(shard2, 2, 1, 2)}, stored, nil,
		"the new owner's first window, overlapping")
	c.expectStored(shard0, records(1, 5), "after the new owner's window")
	c.expectStored(shard1, records(1, 4), "after the new owner's window")
	c.expectStored(shard2, records(1, 2), "after the new owner's window")
	c.deliver("a", c.batch(shard0, 1, 4, 6), leaseLost, "the previous owner's next batch")
	return c.err
}

// A zombie (epoch 1) and the new owner (epoch 2) deliver windows over the
// same shards at once, each window listing its shards in a different
// order: neither blocks the other for ever (a Sink must lock the rows of a
// window in one order), the new owner is never refused, the zombie only
// with a *ShardsFencedError (and then delivers the rest again without
// those shards, as the Loader does), and every record is stored once.
func testMultiConcurrentZombie(ctx context.Context, h Harness) error {
	c := newChecker(ctx, h, "MultiConcurrentZombie")
	const n = 24
	shards := []string{shard0, shard1, shard2, shard3}
	for _, s := range shards {
		c.deliver("a", c.batch(s, 1, 1, 2), stored, "a's batch before it is paused")
	}
	if c.err != nil {
		return c.err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	begin := make(chan struct{})
	wg.Go(func() { // the zombie: windows of 2 records per shard, shards in reverse order
		<-begin
		live := slices.Clone(shards)
		slices.Reverse(live)
		for from := 3; from <= n && len(live) > 0; from += 2 {
			for {
				var bs []kinesisload.Batch
				for _, s := range live {
					bs = append(bs, c.batch(s, 1, from, min(from+1, n)))
				}
				err := h.Sink("a").(multiSink).DeliverMulti(ctx, bs)
				if err == nil {
					break
				}
				sf, ok := errors.AsType[*kinesisload.ShardsFencedError](err)
				if !ok {
					report(fmt.Errorf("the zombie's window from record %d: DeliverMulti = %v, want nil or a *ShardsFencedError", from, err))
					return
				}
				live = slices.DeleteFunc(live, func(s string) bool { return slices.Contains(sf.Shards, s) })
				if len(live) == 0 {
					return
				}
			}
		}
	})
	wg.Go(func() { // the new owner: windows of 3 records per shard from the start, shards in order
		<-begin
		for from := 1; from <= n; from += 3 {
			var bs []kinesisload.Batch
			for _, s := range shards {
				bs = append(bs, c.batch(s, 2, from, min(from+2, n)))
			}
			if err := h.Sink("b").(multiSink).DeliverMulti(ctx, bs); err != nil {
				report(fmt.Errorf("the new owner's window from record %d: DeliverMulti = %v, want nil", from, err))
				return
			}
		}
	})
	close(begin)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("stream %s: %w", c.stream, errors.Join(errs...))
	}
	for _, s := range shards {
		c.expectStored(s, records(1, n), "after the zombie and the new owner")
		c.expectCheckpoint(s, scan.AfterSequence(seq(n)), "after the zombie and the new owner")
	}
	return c.err
}
