package kinesisload_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/kinesisload/sinktest"
	"github.com/tidemark/tidemark/scan"
)

// oneShard is a fake stream of one shard holding n records r1..rn.
func oneShard(t *testing.T, n int) (*kinesistest.Fake, []string) {
	t.Helper()
	f := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, f, "orders", 1)
	var seqs []string
	for i := 1; i <= n; i++ {
		out, err := f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("orders"), PartitionKey: aws.String("k"), Data: fmt.Appendf(nil, "r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, *out.SequenceNumber)
	}
	return f, seqs
}

const shard0 = "shardId-000000000000"

// runJournal runs a Loader on dir until done reports true (then Close), or
// until Run returns; it returns Run's error (nil after a Close).
func runJournal(t *testing.T, f *kinesistest.Fake, dir string, sink kinesisload.Sink, done func() bool) error {
	t.Helper()
	l, err := kinesisload.New(kinesisload.Config{Stream: "orders", Dir: dir, Sink: sink, StartPosition: scan.TrimHorizon(), IdleWait: 200 * time.Millisecond},
		kinesisload.WithClient(f), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- l.Run(context.Background()) }()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-ran:
			return err
		case <-deadline:
			t.Fatal("the condition never held in 20 s")
		case <-time.After(10 * time.Millisecond):
		}
		if done() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := l.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-ran; !errors.Is(err, kinesisload.ErrClosed) {
				return err
			}
			return nil
		}
	}
}

// rewindJournal rewinds shard 0 of dir's stream to pos, as cmd/tidemark
// does (with no Loader holding the directory).
func rewindJournal(t *testing.T, dir string, pos scan.Position) {
	t.Helper()
	j, err := journal.Open(dir, journal.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Rewind(context.Background(), "orders", kinesisload.Rewind{ID: "rw1", By: "ops", At: time.Now()}, map[string]scan.Position{shard0: pos}); err != nil {
		t.Fatal(err)
	}
}

func journalRewinds(t *testing.T, dir string) map[string]kinesisload.Rewind {
	t.Helper()
	j, err := journal.OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := kinesisload.NewJournalStore(context.Background(), j, 0)
	if err != nil {
		t.Fatal(err)
	}
	rws, err := st.Rewinds(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	return rws
}

func storedData(m *sinktest.Memory) []string {
	var out []string
	for _, r := range m.Stored("orders", shard0) {
		out = append(out, string(r.Data))
	}
	return out
}

// onlyTx is a TransactionalSink that is not a Rewinder.
type onlyTx struct{ m *sinktest.Memory }

func (s onlyTx) Deliver(ctx context.Context, b kinesisload.Batch) error { return s.m.Deliver(ctx, b) }
func (s onlyTx) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	return s.m.Checkpoints(ctx, stream)
}

// A journal rewound while a TransactionalSink holds further checkpoints:
// a Rewinder's checkpoint is set back before the shard is read, so the
// records after the rewind's position are delivered (and stored) again,
// and the rewind is recorded as settled; a Sink that is not a Rewinder
// stops Run with a RewindError naming the shard and the checkpoint to
// reset, delivering nothing, until the operator resets it.
func TestRewindOfAJournalReachesATransactionalSink(t *testing.T) {
	f, seqs := oneShard(t, 6)
	all := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
	caughtUp := func(m *sinktest.Memory) func() bool {
		return func() bool {
			cp, ok := m.Checkpoint("orders", shard0)
			return ok && cp.Position.Equal(scan.AfterSequence(seqs[5]))
		}
	}

	t.Run("Rewinder", func(t *testing.T) {
		dir, mem := t.TempDir(), sinktest.NewMemory()
		if err := runJournal(t, f, dir, mem, caughtUp(mem)); err != nil {
			t.Fatal(err)
		}
		rewindJournal(t, dir, scan.AfterSequence(seqs[2]))
		if err := runJournal(t, f, dir, mem, func() bool { return len(storedData(mem)) == 9 && caughtUp(mem)() }); err != nil {
			t.Fatal(err)
		}
		want := append(append([]string{}, all...), "r4", "r5", "r6")
		if got := storedData(mem); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("stored %v, want %v (r4..r6 again after the rewind)", got, want)
		}
		if rw := journalRewinds(t, dir)[shard0]; rw.ID != "rw1" || rw.SinkPending {
			t.Errorf("the rewind after the run: %+v, want settled", rw)
		}
	})

	t.Run("not a Rewinder", func(t *testing.T) {
		dir, mem := t.TempDir(), sinktest.NewMemory()
		if err := runJournal(t, f, dir, onlyTx{mem}, caughtUp(mem)); err != nil {
			t.Fatal(err)
		}
		rewindJournal(t, dir, scan.AfterSequence(seqs[2]))
		err := runJournal(t, f, dir, onlyTx{mem}, func() bool { return false })
		var re *kinesisload.RewindError
		var run *kinesisload.RunError
		if !errors.As(err, &re) || !errors.As(err, &run) || !errors.Is(err, kinesisload.ErrSink) || !errors.Is(err, kinesisload.ErrRewindPending) ||
			re.Rewind.Shard != shard0 || !re.Checkpoint.Equal(scan.AfterSequence(seqs[5])) || !strings.Contains(err.Error(), "set the sink's checkpoint of stream orders shard "+shard0) {
			t.Fatalf("Run = %v, want a RunError of ErrSink with a RewindError naming shard 0 and its checkpoint", err)
		}
		if got := storedData(mem); len(got) != 6 {
			t.Fatalf("stored %v after the refusal, want nothing more", got)
		}
		if !journalRewinds(t, dir)[shard0].SinkPending {
			t.Fatal("the refused rewind was recorded as settled")
		}
		// The operator resets the Sink's checkpoint, as the error says.
		if err := mem.RewindCheckpoint(context.Background(), "orders", shard0, scan.AfterSequence(seqs[2]), 0); err != nil {
			t.Fatal(err)
		}
		if err := runJournal(t, f, dir, onlyTx{mem}, func() bool { return len(storedData(mem)) == 9 }); err != nil {
			t.Fatal(err)
		}
		if rw := journalRewinds(t, dir)[shard0]; rw.SinkPending {
			t.Errorf("the rewind after the reset and a run: %+v, want settled", rw)
		}
	})

	t.Run("plain Sink", func(t *testing.T) {
		dir, rec := t.TempDir(), &fleetSink{}
		sink := rec.forHost("h")
		if err := runJournal(t, f, dir, sink, func() bool { return len(rec.deliveries()) == 6 }); err != nil {
			t.Fatal(err)
		}
		rewindJournal(t, dir, scan.AtSequence(seqs[4]))
		if err := runJournal(t, f, dir, sink, func() bool { return len(rec.deliveries()) == 8 }); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range rec.deliveries()[6:] {
			got = append(got, d.data)
		}
		if strings.Join(got, " ") != "r5 r6" {
			t.Errorf("after a rewind to AT r5: delivered %v, want r5 r6", got)
		}
	})
}

// A fleet rewound while its hosts read: the host that held the shard
// loses it, and the next owner (whichever host) resumes from the rewind's
// position although its own view of the shard is further (both hosts
// started after the records were stored, so they took the Sink's
// checkpoints in), sets the TransactionalSink's checkpoint back under its
// lease's epoch and reads on: the records after the position are stored
// again, once more, in order, and the rewind is recorded as settled; the
// other shard is not touched, and records put after the rewind are
// stored once.
func TestRewindOfARunningFleetReachesItsTransactionalSink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		mem := sinktest.NewMemory()
		r.hostConfig = func(host string, c *kinesisload.Config) { c.Sink = mem }
		count := func() (n int) {
			for _, sh := range mem.Shards("orders") {
				n += len(mem.Stored("orders", sh))
			}
			return n
		}
		r.start("a")
		before := r.put(20)
		untilTrue(t, func() bool { return count() == len(before) })
		r.close("a")
		r.start("a")
		r.start("b")
		r.waitOwning("a", "b")
		shards := mem.Shards("orders")
		target := shards[0]
		stored := mem.Stored("orders", target)
		if len(stored) < 3 {
			t.Fatalf("shard %s holds %d records; want at least 3", target, len(stored))
		}
		other := len(mem.Stored("orders", shards[1]))
		rws, err := fleet.Rewind(context.Background(), r.fleet.Table(), "orders", kinesisload.Rewind{ID: "rw1", By: "ops", At: time.Now()},
			map[string]scan.Position{target: scan.AfterSequence(stored[1].SequenceNumber)})
		if err != nil || len(rws) != 1 {
			t.Fatalf("Rewind = %v, %v", rws, err)
		}
		again := len(stored) - 2
		untilTrue(t, func() bool { return len(mem.Stored("orders", target)) == len(stored)+again })
		after := r.put(6)
		untilTrue(t, func() bool { return count() == len(before)+again+len(after) })
		got := mem.Stored("orders", target)
		for i, rec := range got[len(stored) : len(stored)+again] {
			if want := stored[2+i].SequenceNumber; rec.SequenceNumber != want {
				t.Fatalf("record %d stored after the rewind is %s, want %s (the records after the rewind's position, in order)", i, rec.SequenceNumber, want)
			}
		}
		if n := len(mem.Stored("orders", shards[1])); n < other {
			t.Errorf("shard %s lost records: %d, had %d", shards[1], n, other)
		}
		rewound, err := fleet.Rewinds(context.Background(), r.fleet.Table(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		if rw := rewound[target]; rw.SinkPending {
			t.Errorf("the rewind is still pending for the Sink: %+v", rw)
		}
		cp, _ := mem.Checkpoint("orders", target)
		if info := r.fleet.Shards("orders")[target]; cp.Epoch == 0 || cp.Epoch > info.Epoch {
			t.Errorf("the Sink's epoch %d: want the epoch of a lease taken after the rewind (the table's is %d)", cp.Epoch, info.Epoch)
		}
	})
}

// With a plain Sink, a rewind of a running fleet's shard re-delivers the
// records after the new position, in order, also when the host that held
// it takes it again (the only host here), whose own view of the position
// is from before the rewind; nothing is lost.
func TestRewindOfARunningFleetRereadsFromTheNewPosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.start("a")
		before := r.put(20)
		r.waitAll(before)
		var target string
		var seqs []string
		for _, d := range r.sink.deliveries() {
			if target == "" {
				target = d.shard
			}
			if d.shard == target {
				seqs = append(seqs, d.seq)
			}
		}
		if len(seqs) < 3 {
			t.Fatalf("shard %s got %d records; want at least 3", target, len(seqs))
		}
		n := len(r.sink.deliveries())
		if _, err := fleet.Rewind(context.Background(), r.fleet.Table(), "orders", kinesisload.Rewind{ID: "rw1", By: "ops", At: time.Now()},
			map[string]scan.Position{target: scan.AfterSequence(seqs[0])}); err != nil {
			t.Fatal(err)
		}
		untilTrue(t, func() bool {
			again := 0
			for _, d := range r.sink.deliveries()[n:] {
				if d.shard == target {
					again++
				}
			}
			return again >= len(seqs)-1
		})
		var again []string
		for _, d := range r.sink.deliveries()[n:] {
			if d.shard == target {
				again = append(again, d.seq)
			}
		}
		if strings.Join(again[:len(seqs)-1], " ") != strings.Join(seqs[1:], " ") {
			t.Errorf("after the rewind shard %s delivered %v, want %v first (every record after the new position, in order)", target, again, seqs[1:])
		}
		after := r.put(6)
		r.waitAll(append(before, after...))
	})
}

// untilTrue polls cond for up to 30 s.
func untilTrue(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the condition never held in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statsAtAcquire records, for every lease of shard its host acquires once
// the Loader is set, the shard's position in the Loader's Stats and the
// position the hook reports, as the lease starts.
type statsAtAcquire struct {
	shard string
	l     atomic.Pointer[kinesisload.Loader]
	got   chan [2]scan.Position
}

func (h *statsAtAcquire) OnLeaseAcquired(e kinesisload.LeaseAcquired) {
	l := h.l.Load()
	if l == nil || e.ShardID != h.shard {
		return
	}
	var at scan.Position
	for _, s := range l.Stats().Shards {
		if s.ShardID == e.ShardID {
			at = s.Position
		}
	}
	select {
	case h.got <- [2]scan.Position{at, e.Position}:
	default:
	}
}

// A shard rewound while its host reads it resumes at the rewind's
// position, and the Loader's Stats say so from the lease's start: they
// kept the position read before the rewind (a merge keeps the further),
// and a planned move before the first commit reported that position to
// HookLeaseHandedOff, where the next owner does not resume (found by the
// simulation's planned-move oracle).
func TestStatsOfAShardRewoundInAFleetShowTheRewindsPosition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 1)
		h := &statsAtAcquire{got: make(chan [2]scan.Position, 1)}
		r.hooks = map[string]kinesisload.Hook{"a": h}
		r.start("a")
		before := r.put(5)
		r.waitAll(before)
		ds := r.sink.deliveries()
		h.shard = ds[0].shard
		h.l.Store(r.loads["a"])
		to := scan.AfterSequence(ds[0].seq)
		if _, err := fleet.Rewind(context.Background(), r.fleet.Table(), "orders", kinesisload.Rewind{ID: "rw1", By: "ops", At: time.Now()},
			map[string]scan.Position{h.shard: to}); err != nil {
			t.Fatal(err)
		}
		got := <-h.got
		if !got[1].Equal(to) {
			t.Fatalf("the lease after the rewind starts at %v, want %v: the test no longer makes the case it means to", got[1], to)
		}
		if !got[0].Equal(to) {
			t.Errorf("Stats show %s at %v as its lease after the rewind starts at %v", h.shard, got[0], to)
		}
	})
}
