package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// testWindows, when set, gives a Config that sets no window of its own
// (and whose Sink is no MultiSink) windows in start: the guarantee tests
// run in windowed modes too (TestWindowGuarantees). The package's tests do
// not run in parallel.
var testWindows func(*Config)

// windowsSeen counts the windows delivered by Loaders that start gave
// windows of testWindows.
var windowsSeen atomic.Int64

type windowCounter struct{}

func (windowCounter) OnWindowDelivered(WindowDelivered) { windowsSeen.Add(1) }

// withTestWindows applies testWindows to cfg.
func withTestWindows(cfg Config, opts []Option) (Config, []Option) {
	if testWindows == nil || cfg.MaxBatchRecords != 0 || cfg.MaxBatchBytes != 0 || cfg.MaxBatchWait != 0 {
		return cfg, opts
	}
	if _, ok := cfg.Sink.(MultiSink); ok {
		return cfg, opts
	}
	testWindows(&cfg)
	return cfg, append(opts, WithHooks(windowCounter{}))
}

// asMulti makes s a MultiSink (a TransactionalMultiSink if s is a
// TransactionalSink) whose DeliverMulti delivers each batch in turn: not
// one transaction, but what the Loader's side of the contract needs.
func asMulti(s Sink) Sink {
	if tx, ok := s.(TransactionalSink); ok {
		return txMulti{tx}
	}
	return plainMulti{s}
}

type plainMulti struct{ Sink }

func (m plainMulti) DeliverMulti(ctx context.Context, bs []Batch) error {
	return deliverEach(ctx, m.Sink, bs)
}

type txMulti struct{ TransactionalSink }

func (m txMulti) DeliverMulti(ctx context.Context, bs []Batch) error {
	return deliverEach(ctx, m.TransactionalSink, bs)
}

func deliverEach(ctx context.Context, s Sink, bs []Batch) error {
	for _, b := range bs {
		if err := s.Deliver(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// windowLog records the windows delivered.
type windowLog struct {
	mu      sync.Mutex
	windows []WindowDelivered
	batches []BatchDelivered
}

func (h *windowLog) OnWindowDelivered(e WindowDelivered) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.windows = append(h.windows, e)
}

func (h *windowLog) OnBatchDelivered(e BatchDelivered) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches = append(h.batches, e)
}

func (h *windowLog) snapshot() ([]WindowDelivered, []BatchDelivered) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.windows), slices.Clone(h.batches)
}

// batchSizes returns the records of each batch the recorder accepted, in
// order.
func (r *recorder) batchSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	last := -1
	for _, e := range r.log {
		if e.kind != "deliver" {
			continue
		}
		if e.batch != last {
			out = append(out, 0)
			last = e.batch
		}
		out[len(out)-1]++
	}
	return out
}

// Pages of one record accumulate into windows of MaxBatchRecords, each
// one Deliver with one checkpoint (after its last record) and one commit.
func TestWindowsCloseOnRecords(t *testing.T) {
	s := newFakeStream(t, 1)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("r%02d", i))
		s.put(shard0, want[i])
	}
	rec, hk := newRecorder(), &windowLog{}
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 1, MaxBatchRecords: 5, MaxBatchWait: time.Hour}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk, rec))
	rec.waitFor(t, want...)
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
	if got := rec.delivered(); !slices.Equal(got, want) {
		t.Errorf("delivered %q, want %q in order", got, want)
	}
	if got := rec.batchSizes(); !slices.Equal(got, []int{5, 5, 5, 5}) {
		t.Errorf("batches of %v records, want 4 of 5", got)
	}
	ws, bs := hk.snapshot()
	for _, w := range ws {
		if w.Reason != WindowRecords || w.Records != 5 || w.Pages != 5 || w.Shards != 1 || w.Attempts != 1 {
			t.Errorf("window %+v, want 5 records in 5 pages of one shard, closed by records", w)
		}
	}
	if len(ws) != 4 || len(bs) != 4 {
		t.Errorf("%d windows and %d batches reported, want 4 of each", len(ws), len(bs))
	}
	st := r.l.Stats()
	if st.Windows != 4 || st.WindowsBy[WindowRecords] != 4 {
		t.Errorf("Stats.Windows %d, WindowsBy %v; want 4 closed by records", st.Windows, st.WindowsBy)
	}
}

// windowModes are the windowed modes the guarantee tests run in.
var windowModes = []struct {
	name string
	mode ReadMode
	set  func(*Config)
	// short: run with -short too (one of each kind: per shard, across
	// shards, fan-out); the others only without -short.
	short bool
}{
	{"records+wait", ReadPolling, func(c *Config) { c.MaxBatchRecords, c.MaxBatchWait = 3, 20*time.Millisecond }, true},
	{"nowait", ReadPolling, func(c *Config) { c.MaxBatchRecords = 4 }, false},
	{"multi", ReadPolling, func(c *Config) { c.Sink, c.MaxBatchWait = asMulti(c.Sink), 10*time.Millisecond }, true},
	{"multi-nowait", ReadPolling, func(c *Config) { c.Sink = asMulti(c.Sink) }, false},
	{"fan-out/records+wait", ReadFanOut, func(c *Config) { c.MaxBatchRecords, c.MaxBatchWait = 3, 20*time.Millisecond }, false},
	{"fan-out/multi", ReadFanOut, func(c *Config) { c.Sink, c.MaxBatchBytes, c.MaxBatchWait = asMulti(c.Sink), 64, 10*time.Millisecond }, true},
}

// TestWindowGuarantees runs the guarantee tests with windows: per shard,
// and across shards with a MultiSink, in both read modes (with -short,
// one mode of each kind).
func TestWindowGuarantees(t *testing.T) {
	for _, m := range windowModes {
		if testing.Short() && !m.short {
			continue
		}
		for _, g := range guaranteeTests {
			t.Run(m.name+"/"+g.name, func(t *testing.T) {
				old := testWindows
				testWindows = m.set
				t.Cleanup(func() { testWindows = old })
				before := windowsSeen.Load()
				inMode(t, m.mode, g.fn)
				if windowsSeen.Load() == before && !t.Failed() {
					t.Logf("no window was delivered")
				}
			})
		}
	}
}

// Without a window setting and without a MultiSink there are no windows:
// every page is its own Deliver, and no window is reported.
func TestNoWindowsByDefault(t *testing.T) {
	s := newFakeStream(t, 1)
	var want []string
	for i := range 6 {
		want = append(want, fmt.Sprintf("r%d", i))
		s.put(shard0, want[i])
	}
	rec, hk := newRecorder(), &windowLog{}
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 2}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk, rec))
	rec.waitFor(t, want...)
	r.stop(t)
	if got := rec.batchSizes(); !slices.Equal(got, []int{2, 2, 2}) {
		t.Errorf("batches of %v records, want one per page of 2", got)
	}
	ws, bs := hk.snapshot()
	if len(ws) != 0 || r.l.Stats().Windows != 0 {
		t.Errorf("%d windows reported (Stats: %d), want none", len(ws), r.l.Stats().Windows)
	}
	for _, b := range bs {
		if b.Waited != 0 {
			t.Errorf("BatchDelivered.Waited = %v without windows, want 0", b.Waited)
		}
	}
}

// MaxBatchBytes closes a window once its data and partition keys reach
// it.
func TestWindowsCloseOnBytes(t *testing.T) {
	s := newFakeStream(t, 1)
	var want []string
	for i := range 12 {
		want = append(want, fmt.Sprintf("record-%03d", i)) // 10 bytes, and key "k"
		s.put(shard0, want[i])
	}
	rec, hk := newRecorder(), &windowLog{}
	cfg := Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), RecordsPerCall: 1, MaxBatchBytes: 3 * 11, MaxBatchWait: time.Hour}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk, rec))
	rec.waitFor(t, want...)
	r.stop(t)
	if got := rec.batchSizes(); !slices.Equal(got, []int{3, 3, 3, 3}) {
		t.Errorf("batches of %v records, want 4 of 3", got)
	}
	ws, _ := hk.snapshot()
	for _, w := range ws {
		if w.Reason != WindowBytes || w.Bytes != 33 {
			t.Errorf("window %+v, want 33 bytes, closed by bytes", w)
		}
	}
}

// A graceful stop delivers and commits what waits in a window (the
// window closes as "stop"), as it does a batch in flight; while it waits,
// Stats shows the shard's records in windows and how old the oldest is.
func TestWindowsStopDeliversAndCommits(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi=%v", multi), func(t *testing.T) {
			s := newFakeStream(t, 2)
			want := []string{s.put(shard0, "a"), s.put(shard0, "b"), s.put(shardN(1), "c")}
			rec, hk := newRecorder(), &windowLog{}
			var sink Sink = rec
			if multi {
				sink = asMulti(rec)
			}
			store := memStore(t, journal.NewMemory())
			cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), MaxBatchWait: time.Hour}
			r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(store), WithHooks(hk))
			waitUntil(t, "the records wait in windows", func() bool {
				st := r.l.Stats()
				return len(st.Shards) == 2 && st.Shards[0].WindowRecords == 2 && st.Shards[1].WindowRecords == 1
			})
			time.Sleep(50 * time.Millisecond)
			for _, sh := range r.l.Stats().Shards {
				if sh.WindowSince.IsZero() || sh.WindowAge < 50*time.Millisecond || sh.WindowBytes == 0 {
					t.Errorf("Stats of %s: window since %v, age %v, bytes %d; want the time of its oldest record, 50 ms or more, and its bytes", sh.ShardID, sh.WindowSince, sh.WindowAge, sh.WindowBytes)
				}
			}
			if got := rec.delivered(); len(got) != 0 {
				t.Fatalf("delivered %q before the window closed", got)
			}
			if err := r.stop(t); !errors.Is(err, ErrClosed) {
				t.Fatalf("Run = %v, want ErrClosed", err)
			}
			if got := rec.delivered(); len(got) != 3 {
				t.Errorf("delivered %q at the stop, want a, b and c", got)
			}
			stored, err := store.Load(context.Background(), s.name)
			if err != nil {
				t.Fatal(err)
			}
			if p := stored[shard0].Position; !p.Equal(scan.AfterSequence(want[1])) {
				t.Errorf("shard 0 committed at %v, want after b (%s)", p, want[1])
			}
			if p := stored[shardN(1)].Position; !p.Equal(scan.AfterSequence(want[2])) {
				t.Errorf("shard 1 committed at %v, want after c (%s)", p, want[2])
			}
			ws, _ := hk.snapshot()
			for _, w := range ws {
				if w.Reason != WindowStop {
					t.Errorf("window %+v, want closed by the stop", w)
				}
			}
			for _, sh := range r.l.Stats().Shards {
				if sh.WindowRecords != 0 || !sh.WindowSince.IsZero() {
					t.Errorf("Stats of %s after the stop: %d records in windows since %v, want none", sh.ShardID, sh.WindowRecords, sh.WindowSince)
				}
			}
		})
	}
}

func shardN(i int) string { return fmt.Sprintf("shardId-%012d", i) }

// The memory bound holds with windows: pages waiting in windows count
// against MaxBufferedBytes, and windows that would hold reading up (their
// wait is an hour, they have no other bound) close early, as "budget",
// instead of waiting for it: every shard gets through its backlog and the
// bytes held never exceed the bound.
func TestWindowsKeepTheMemoryBound(t *testing.T) {
	for _, multi := range []bool{false, true} {
		t.Run(fmt.Sprintf("multi=%v", multi), func(t *testing.T) {
			const shards, perShard, size = 6, 30, 1000
			s := newFakeStream(t, shards)
			var want []string
			for i, sh := range s.openShards() {
				for k := range perShard {
					d := fmt.Sprintf("%d-%03d-%s", i, k, string(make([]byte, size)))
					s.put(sh, d)
					want = append(want, d)
				}
			}
			const page = 5 * (size + 300)
			budget := int64(4 * page)
			rec, hk := newRecorder(), &windowLog{}
			var sink Sink = rec
			if multi {
				sink = asMulti(rec)
			}
			cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), RecordsPerCall: 5,
				MaxBufferedBytes: budget, MaxBatchWait: time.Hour}
			tune := withTune(func(rc *readerConfig) {
				rc.minInterval = time.Millisecond
				rc.readBytesPerSecond = -1
				rc.maxPage = page
			})
			r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), tune, WithHooks(hk))
			// The last pages wait in windows for an hour: every shard is
			// read to its tip (every record was put before the start), so
			// every record is delivered, in a window or on its way to the
			// Sink; then the stop delivers them. (Counting delivered and
			// window records alone is not enough: a window being delivered
			// is counted in both until its Deliver returns.)
			waitUntil(t, "every record is read", func() bool {
				n := len(rec.delivered())
				st := r.l.Stats()
				for _, sh := range st.Shards {
					if sh.MillisBehindLatest != 0 {
						return false
					}
					n += sh.WindowRecords
				}
				return len(st.Shards) == shards && n >= len(want)
			}, func() {
				b := r.l.buffered
				b.mu.Lock()
				t.Logf("budget: used %d, parked %d, waiters %d", b.used, b.parked, b.waiters.Len())
				b.mu.Unlock()
				for _, sh := range r.l.Stats().Shards {
					t.Logf("%s: %d records in windows since %v", sh.ShardID, sh.WindowRecords, sh.WindowSince)
				}
			})
			r.stop(t)
			if got := len(rec.delivered()); got != len(want) {
				t.Errorf("%d records delivered, want %d", got, len(want))
			}
			if high := r.l.buffered.highWater(); high > budget || high == 0 {
				t.Errorf("buffered bytes peaked at %d, want 1 to %d", high, budget)
			}
			if used := r.l.buffered.inUse(); used != 0 {
				t.Errorf("%d bytes still counted after Run returned, want 0", used)
			}
			ws, _ := hk.snapshot()
			for _, w := range ws {
				if w.Reason != WindowBudget && w.Reason != WindowStop {
					t.Errorf("window %+v closed by %v, want the budget (or the stop)", w, w.Reason)
				}
			}
			if n := r.l.Stats().WindowsBy[WindowBudget]; n == 0 {
				t.Errorf("no window closed for the budget; Stats.WindowsBy %v", r.l.Stats().WindowsBy)
			}
		})
	}
}

// callLog is a MultiSink over a recorder that records each DeliverMulti
// call's shards, and can refuse calls.
type callLog struct {
	*recorder
	mu     sync.Mutex
	calls  [][]string // the shards of each call, in the order given
	refuse func(bs []Batch) error
}

func newCallLog() *callLog { return &callLog{recorder: newRecorder()} }

func (c *callLog) DeliverMulti(ctx context.Context, bs []Batch) error {
	c.mu.Lock()
	var ids []string
	for _, b := range bs {
		ids = append(ids, b.ShardID)
	}
	c.calls = append(c.calls, ids)
	refuse := c.refuse
	c.mu.Unlock()
	if refuse != nil {
		if err := refuse(bs); err != nil {
			return err
		}
	}
	return deliverEach(ctx, c.recorder, bs)
}

func (c *callLog) snapshot() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// With a MultiSink, one call carries the batches of many shards, each
// shard once, its records in order. A parent's last records and its
// children's are never in one call: a child joins a window only after
// the window with its parent's last records is committed (the parent
// COMPLETED), for a split and for a merge.
func TestMultiSinkWindowsAcrossShardsKeepLineage(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "p0-0")
	s.put(shardN(1), "p1-0")
	sink := newCallLog()
	cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), MaxBatchWait: 30 * time.Millisecond,
		ListShardsInterval: 20 * time.Millisecond}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(sink.recorder))
	sink.waitFor(t, "p0-0", "p1-0")
	s.put(shard0, "p0-1")
	s.put(shardN(1), "p1-1")
	s.split(shard0) // children 2 and 3
	want := []string{"p0-0", "p1-0", "p0-1", "p1-1"}
	for _, c := range []string{shardN(2), shardN(3)} {
		for i := range 3 {
			d := fmt.Sprintf("c%s-%d", c[len(c)-1:], i)
			s.put(c, d)
			want = append(want, d)
		}
	}
	s.merge(shardN(3), shardN(1)) // child 4 of 3 and 1
	s.put(shardN(4), "m-0")
	want = append(want, "m-0")
	sink.waitFor(t, want...)
	r.stop(t)

	parents := map[string][]string{shardN(2): {shard0}, shardN(3): {shard0}, shardN(4): {shardN(3), shardN(1)}}
	calls := sink.snapshot()
	multiShard := false
	for i, call := range calls {
		if len(call) > 1 {
			multiShard = true
		}
		seen := map[string]bool{}
		for _, id := range call {
			if seen[id] {
				t.Errorf("call %d has shard %s twice: %v", i, id, call)
			}
			seen[id] = true
		}
		for child, ps := range parents {
			for _, p := range ps {
				if seen[child] && seen[p] {
					t.Errorf("call %d holds parent %s and its child %s: %v", i, p, child, call)
				}
			}
		}
	}
	if !multiShard {
		t.Errorf("no call held more than one shard: %v", calls)
	}
	evs := sink.events()
	for child, ps := range parents {
		first := indexOf(evs, func(e event) bool { return e.kind == "deliver" && e.shard == child })
		for _, p := range ps {
			done := indexOf(evs, func(e event) bool { return e.kind == "state" && e.shard == p && e.state == StateCompleted })
			if first < 0 || done < 0 || first < done {
				t.Errorf("child %s's first record at event %d, parent %s COMPLETED at %d: want the parent first", child, first, p, done)
			}
		}
	}
	checkShardOrder(t, evs)
}

// checkShardOrder fails unless each shard's records were delivered in
// sequence order.
func checkShardOrder(t *testing.T, evs []event) {
	t.Helper()
	last := map[string]string{}
	for _, e := range evs {
		if e.kind != "deliver" {
			continue
		}
		if prev, ok := last[e.shard]; ok && scan.CompareSequence(prev, e.seq) >= 0 {
			t.Errorf("shard %s: record %s (%s) delivered after %s", e.shard, e.data, e.seq, prev)
		}
		last[e.shard] = e.seq
	}
}

// A MultiSink's refusals: a transient one is retried (reported for the
// stream: the call is about many shards) and the window delivered once it
// is accepted; a permanent one stops Run naming a shard and the window; a
// fenced shard without a fleet (epoch 0), or a refusal as from a lost
// lease that names no shard of a window of several, stops Run with
// ErrSink.
func TestMultiSinkRefusals(t *testing.T) {
	errDown := errors.New("database is down")
	tests := []struct {
		name   string
		refuse func(calls int, bs []Batch) error
		stop   bool   // Run stops with ErrSink
		says   string // in Run's error
	}{
		{"transient", func(calls int, _ []Batch) error {
			if calls <= 3 {
				return errDown
			}
			return nil
		}, false, ""},
		{"permanent", func(int, []Batch) error { return Permanent(errDown) }, true, "the window of 2 batches"},
		{"fenced without a fleet", func(_ int, bs []Batch) error {
			return &ShardsFencedError{Stream: bs[0].Stream, Shards: []string{bs[1].ShardID}}
		}, true, "carries no fleet's lease"},
		{"lease lost, no shard named", func(int, []Batch) error { return fmt.Errorf("fenced: %w", ErrLeaseLost) }, true, "without naming its shards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 2)
			s.put(shard0, "a")
			s.put(shardN(1), "b")
			sink, hk := newCallLog(), &retryLog{}
			calls := 0
			sink.refuse = func(bs []Batch) error {
				calls++
				if len(bs) < 2 {
					return nil
				}
				return tt.refuse(calls, bs)
			}
			// One window: it closes once it holds both shards' records.
			cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), MaxBatchRecords: 2, MaxBatchWait: time.Hour,
				SinkBackoff: time.Millisecond, SinkMaxBackoff: time.Millisecond}
			r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk))
			if !tt.stop {
				sink.waitFor(t, "a", "b")
				if n := hk.maxAttempt("Deliver", ""); n != 3 {
					t.Errorf("the window's Deliver retried %d times for the stream, want 3", n)
				}
				if st := r.l.Stats(); st.Retries != 3 || !strings.Contains(st.LastError, "database is down") {
					t.Errorf("Stats: %d retries, last error %q; want 3, the refusal", st.Retries, st.LastError)
				}
				if err := r.stop(t); !errors.Is(err, ErrClosed) {
					t.Errorf("Run = %v, want ErrClosed", err)
				}
				return
			}
			err := r.wait(t)
			re, ok := errors.AsType[*RunError](err)
			if !ok || !errors.Is(err, ErrSink) || re.Op != "Deliver" || re.Shard == "" || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Run = %v, want a *RunError of class ErrSink naming Deliver, a shard and %q", err, tt.says)
			}
			if got := sink.delivered(); len(got) != 0 {
				t.Errorf("delivered %q, want nothing", got)
			}
		})
	}
}
