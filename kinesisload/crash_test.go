package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

var errCrash = errors.New("simulated crash")

// crashJournal simulates a process that dies at its failAt-th journal
// append: before the append is durable, or just after. From then on every
// append fails, as nothing runs in a dead process.
type crashJournal struct {
	journal.Journal
	failAt int
	after  bool // the fatal append becomes durable before the crash

	mu      sync.Mutex
	appends int
	crashed bool
}

func (c *crashJournal) Append(ctx context.Context, recs ...[]byte) (uint64, error) {
	c.mu.Lock()
	c.appends++
	n, crashed := c.appends, c.crashed
	if n == c.failAt {
		c.crashed = true
	}
	c.mu.Unlock()
	switch {
	case crashed:
		return 0, errCrash
	case n == c.failAt && c.after:
		if _, err := c.Journal.Append(ctx, recs...); err != nil {
			return 0, err
		}
		return 0, errCrash
	case n == c.failAt:
		return 0, errCrash
	}
	return c.Journal.Append(ctx, recs...)
}

func (c *crashJournal) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.appends
}

// txSink is a transactional Sink over an in-memory "database" that
// survives the Loader's crashes: records and checkpoints change together.
type txSink struct {
	recorder
	cmu sync.Mutex
	cps map[string]scan.Position
}

func (s *txSink) Deliver(ctx context.Context, b Batch) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if err := s.recorder.Deliver(ctx, b); err != nil {
		return err
	}
	if s.cps == nil {
		s.cps = map[string]scan.Position{}
	}
	s.cps[b.ShardID] = b.Checkpoint
	return nil
}

func (s *txSink) Checkpoints(ctx context.Context, stream string) (map[string]scan.Position, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return maps.Clone(s.cps), nil
}

// crashScenario runs a Loader that crashes at one journal append, then a
// second Loader on what the first left durable, and checks the guarantee.
// It returns false when the run made fewer appends than failAt.
func crashScenario(t *testing.T, failAt int, after, transactional bool) bool {
	t.Helper()
	s := newFakeStream(t, 2)
	s.put(shard0, "history-0")
	s.put(shard1, "history-1")
	s.settle()
	inner := journal.NewMemory()

	var (
		wantMu  sync.Mutex
		want    []string
		putOnce sync.Once
	)
	ih := newInitHook()
	ih.run = func(InitResolved) {
		putOnce.Do(func() {
			wantMu.Lock()
			defer wantMu.Unlock()
			for i := range 3 {
				for _, sh := range []string{shard0, shard1} {
					d := fmt.Sprintf("%s-%d", sh[len(sh)-1:], i)
					s.put(sh, d)
					want = append(want, d)
				}
			}
			s.split(shard0)
			for _, c := range s.openShards() {
				if c == shard1 {
					continue
				}
				for i := range 2 {
					d := fmt.Sprintf("%s-%d", c[len(c)-1:], i)
					s.put(c, d)
					want = append(want, d)
				}
			}
		})
	}

	var sink1, sink2 Sink
	var rec1, rec2 *recorder
	var tx *txSink
	if transactional {
		tx = &txSink{recorder: *newRecorder()}
		sink1, sink2, rec1, rec2 = tx, tx, &tx.recorder, &tx.recorder
	} else {
		rec1, rec2 = newRecorder(), newRecorder()
		sink1, sink2 = rec1, rec2
	}
	cfg := Config{Stream: s.name, RecordsPerCall: 2}

	cj := &crashJournal{Journal: inner, failAt: failAt, after: after}
	cfg.Sink = sink1
	r1 := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, cj)), WithHooks(ih, rec1))
	// Run 1 crashes, or delivers everything and stops writing: then
	// failAt is past its last append.
	var err1 error
	quiet, lastCount := 0, -1
	for err1 == nil && quiet < 15 {
		select {
		case err1 = <-r1.done:
			r1.done <- err1
		case <-time.After(20 * time.Millisecond):
			wantMu.Lock()
			all := len(want) > 0 && len(rec1.delivered()) >= len(want)
			wantMu.Unlock()
			if n := cj.count(); n == lastCount && all {
				quiet++
			} else {
				quiet, lastCount = 0, n
			}
		}
	}
	if err1 == nil {
		// No crash: failAt is past the last append of this run.
		r1.stop(t)
		return false
	}
	if !errors.Is(err1, errCrash) {
		t.Fatalf("crash at append %d (after=%v): Run = %v, want the crash", failAt, after, err1)
	}
	run1 := rec1.events()
	// What run 1 committed durably: a record at or before its shard's
	// stored position must never be delivered again.
	store2 := memStore(t, inner)
	durable, _ := store2.Load(context.Background(), s.name)
	committedData := map[string]bool{}
	for _, e := range run1 {
		if e.kind != "deliver" {
			continue
		}
		p := durable[e.shard].Position
		if p.Kind == scan.KindShardEnd || (p.Kind == scan.KindAfterSequence && scan.CompareSequence(e.seq, p.Sequence) <= 0) {
			committedData[e.data] = true
		}
	}

	cfg.Sink = sink2
	for len(ih.ch) > 0 {
		<-ih.ch // run 1's initialisation, if it got that far
	}
	r2 := start(t, context.Background(), cfg, WithClient(s.f), WithStore(store2), WithHooks(ih, rec2))
	ih.wait(t) // run 2's: the records are put by now, whichever run put them
	wantMu.Lock()
	wantNow := slices.Clone(want)
	wantMu.Unlock()
	var remaining []string
	for _, w := range wantNow {
		if transactional || !committedData[w] {
			remaining = append(remaining, w)
		}
	}
	rec2.waitFor(t, remaining...)
	r2.stop(t)

	var all []event
	if transactional {
		all = rec2.events() // one sink: its log holds both runs
	} else {
		all = append(run1, rec2.events()...)
	}
	seen := map[string]int{}
	for _, e := range all {
		if e.kind == "deliver" {
			seen[e.data]++
		}
	}
	for _, w := range wantNow {
		if seen[w] == 0 {
			t.Errorf("crash at append %d (after=%v): record %s lost", failAt, after, w)
		}
	}
	for d, n := range seen {
		if !slices.Contains(wantNow, d) {
			t.Errorf("crash at append %d (after=%v): record %s from before the resolved start delivered", failAt, after, d)
		}
		if n > 1 && transactional {
			t.Errorf("crash at append %d (after=%v): transactional sink got %s %d times", failAt, after, d, n)
		}
		if n > 1 && committedData[d] {
			t.Errorf("crash at append %d (after=%v): %s delivered again although its batch was committed", failAt, after, d)
		}
	}
	checkOrder(t, fmt.Sprintf("crash at append %d (after=%v), run 2", failAt, after), rec2.events())
	return true
}

// checkOrder asserts shard order within one run, and that no record of a
// child comes before its parent's completion when both are in the run.
func checkOrder(t *testing.T, what string, evs []event) {
	t.Helper()
	last := map[string]string{}
	for _, e := range evs {
		if e.kind != "deliver" {
			continue
		}
		if prev, ok := last[e.shard]; ok && prev > e.data {
			t.Errorf("%s: shard %s delivered %s after %s", what, e.shard, e.data, prev)
		}
		last[e.shard] = e.data
	}
	completed := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == shard0 && e.state == StateCompleted })
	for i, e := range evs {
		if e.kind == "deliver" && e.shard != shard0 && e.shard != shard1 && completed >= 0 && i < completed {
			t.Errorf("%s: child record %s before the parent completed", what, e.data)
		}
	}
}

func TestCrashAtEveryJournalWrite(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		name := "at-least-once"
		if transactional {
			name = "exactly-once"
		}
		t.Run(name, func(t *testing.T) {
			points := 0
			for failAt := 1; ; failAt++ {
				crashedBefore := crashScenario(t, failAt, false, transactional)
				crashedAfter := crashScenario(t, failAt, true, transactional)
				if !crashedBefore && !crashedAfter {
					break
				}
				points++
			}
			if points < 8 {
				t.Fatalf("only %d crash points exercised; the scenario should write the journal more often", points)
			}
			t.Logf("%d crash points, each before and after the write is durable", points)
		})
	}
}

// With a TransactionalSink the Sink's checkpoints are the truth: a Loader
// whose journal was lost resumes exactly after the Sink's last record, and
// neither resolves LATEST again nor starts over.
func TestTransactionalSinkCheckpointsWithoutJournal(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	b := s.put(shard0, "b")
	s.put(shard0, "c")
	tx := &txSink{recorder: *newRecorder(), cps: map[string]scan.Position{shard0: scan.AfterSequence(b)}}
	ih := newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: tx}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(ih))
	if e := ih.wait(t); e.Resolved != 0 || e.Reused != 1 {
		t.Errorf("init resolved %d and reused %d, want 0 and 1 (the Sink's checkpoint)", e.Resolved, e.Reused)
	}
	tx.waitFor(t, "c")
	r.stop(t)
	if got := tx.delivered(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("delivered %q, want only c", got)
	}
}
