package journal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// impls returns a constructor per Journal implementation; each test of
// the contract runs against all of them.
func impls() map[string]func(t *testing.T) Journal {
	return map[string]func(t *testing.T) Journal{
		"Memory": func(t *testing.T) Journal { return NewMemory() },
		"File": func(t *testing.T) Journal {
			cfg := DefaultConfig()
			cfg.SegmentSize = MinSegmentSize // roll often
			j, err := Open(t.TempDir(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return j
		},
	}
}

// entry is an Entry with Data as a string, for readable diffs.
type entry struct {
	Index    uint64
	Snapshot bool
	Data     string
}

func replayAll(t *testing.T, j Journal) []entry {
	t.Helper()
	got, err := collect(j)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return got
}

func collect(j Journal) ([]entry, error) {
	var got []entry
	err := j.Replay(context.Background(), func(e Entry) error {
		got = append(got, entry{e.Index, e.Snapshot, string(e.Data)})
		return nil
	})
	return got, err
}

func mustAppend(t *testing.T, j Journal, recs ...string) uint64 {
	t.Helper()
	bs := make([][]byte, len(recs))
	for i, r := range recs {
		bs[i] = []byte(r)
	}
	last, err := j.Append(context.Background(), bs...)
	if err != nil {
		t.Fatalf("Append(%q): %v", recs, err)
	}
	return last
}

func closeJournal(t *testing.T, j Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestContractAppendReplay(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			if got := replayAll(t, j); len(got) != 0 {
				t.Fatalf("Replay of a new journal = %v, want nothing", got)
			}
			var lasts []uint64
			lasts = append(lasts, mustAppend(t, j, "a"))
			lasts = append(lasts, mustAppend(t, j, "b", "", "d"))
			lasts = append(lasts, mustAppend(t, j, strings.Repeat("e", 3000)))
			lasts = append(lasts, mustAppend(t, j))
			if diff := cmp.Diff([]uint64{1, 4, 5, 5}, lasts); diff != "" {
				t.Errorf("Append last indexes (-want +got):\n%s", diff)
			}
			want := []entry{{1, false, "a"}, {2, false, "b"}, {3, false, ""}, {4, false, "d"}, {5, false, strings.Repeat("e", 3000)}}
			if diff := cmp.Diff(want, replayAll(t, j)); diff != "" {
				t.Errorf("Replay (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContractSnapshot(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j := newJ(t)
			defer closeJournal(t, j)
			if err := j.Snapshot(ctx, 1, []byte("s")); !errors.Is(err, ErrSnapshotIndex) {
				t.Fatalf("Snapshot(1) of an empty journal: err = %v, want ErrSnapshotIndex", err)
			}
			if err := j.Snapshot(ctx, 0, []byte("s0")); err != nil {
				t.Fatalf("Snapshot(0) of an empty journal: %v", err)
			}
			if diff := cmp.Diff([]entry{{0, true, "s0"}}, replayAll(t, j)); diff != "" {
				t.Errorf("Replay after Snapshot(0) (-want +got):\n%s", diff)
			}
			for i := 1; i <= 5; i++ {
				mustAppend(t, j, fmt.Sprintf("r%d-%s", i, strings.Repeat("x", 400)))
			}
			if err := j.Snapshot(ctx, 3, []byte("s3")); err != nil {
				t.Fatalf("Snapshot(3): %v", err)
			}
			want := []entry{{3, true, "s3"}, {4, false, "r4-" + strings.Repeat("x", 400)}, {5, false, "r5-" + strings.Repeat("x", 400)}}
			if diff := cmp.Diff(want, replayAll(t, j)); diff != "" {
				t.Errorf("Replay after Snapshot(3) (-want +got):\n%s", diff)
			}
			for _, idx := range []uint64{2, 6} {
				if err := j.Snapshot(ctx, idx, []byte("bad")); !errors.Is(err, ErrSnapshotIndex) {
					t.Errorf("Snapshot(%d) after Snapshot(3) with last 5: err = %v, want ErrSnapshotIndex", idx, err)
				}
			}
			if err := j.Snapshot(ctx, 3, []byte("s3b")); err != nil {
				t.Fatalf("Snapshot(3) again: %v", err)
			}
			want[0].Data = "s3b"
			if diff := cmp.Diff(want, replayAll(t, j)); diff != "" {
				t.Errorf("Replay after replacing Snapshot(3) (-want +got):\n%s", diff)
			}
			if err := j.Snapshot(ctx, 5, []byte("s5")); err != nil {
				t.Fatalf("Snapshot(5): %v", err)
			}
			mustAppend(t, j, "r6")
			if diff := cmp.Diff([]entry{{5, true, "s5"}, {6, false, "r6"}}, replayAll(t, j)); diff != "" {
				t.Errorf("Replay after Snapshot(5) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContractTooLarge(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			big := make([]byte, DefaultMaxRecordSize+1)
			if _, err := j.Append(context.Background(), []byte("ok"), big); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Append of a %d-byte record: err = %v, want ErrTooLarge", len(big), err)
			}
			if last := mustAppend(t, j, "after"); last != 1 {
				t.Errorf("Append after a refused call: last = %d, want 1 (nothing of the refused call appended)", last)
			}
			if got, err := j.Append(context.Background(), big[:DefaultMaxRecordSize]); err != nil || got != 2 {
				t.Errorf("Append of a record of exactly the maximum: (%d, %v), want (2, nil)", got, err)
			}
		})
	}
}

func TestContractClosed(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j := newJ(t)
			mustAppend(t, j, "a")
			closeJournal(t, j)
			if _, err := j.Append(ctx, []byte("b")); !errors.Is(err, ErrClosed) {
				t.Errorf("Append after Close: err = %v, want ErrClosed", err)
			}
			if _, err := j.Append(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Append() after Close: err = %v, want ErrClosed", err)
			}
			if _, err := collect(j); !errors.Is(err, ErrClosed) {
				t.Errorf("Replay after Close: err = %v, want ErrClosed", err)
			}
			if err := j.Snapshot(ctx, 1, nil); !errors.Is(err, ErrClosed) {
				t.Errorf("Snapshot after Close: err = %v, want ErrClosed", err)
			}
			if err := j.Close(); !errors.Is(err, ErrClosed) {
				t.Errorf("second Close: err = %v, want ErrClosed", err)
			}
		})
	}
}

func TestContractReplayStops(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			mustAppend(t, j, "a", "b", "c")
			stop := errors.New("stop")
			calls := 0
			err := j.Replay(context.Background(), func(Entry) error { calls++; return stop })
			if err != stop || calls != 1 {
				t.Errorf("Replay with fn failing: (err %v, %d calls), want (stop, 1)", err, calls)
			}
			ctx, cancel := context.WithCancel(context.Background())
			calls = 0
			err = j.Replay(ctx, func(Entry) error { calls++; cancel(); return nil })
			if !errors.Is(err, context.Canceled) || calls != 1 {
				t.Errorf("Replay cancelled in fn: (err %v, %d calls), want (context.Canceled, 1)", err, calls)
			}
		})
	}
}

func TestContractAppendDuringReplay(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			mustAppend(t, j, "a", "b")
			var got []entry
			err := j.Replay(context.Background(), func(e Entry) error {
				got = append(got, entry{e.Index, e.Snapshot, string(e.Data)})
				_, err := j.Append(context.Background(), []byte("new-"+string(e.Data)))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]entry{{1, false, "a"}, {2, false, "b"}}, got); diff != "" {
				t.Errorf("Replay that appends (-want +got):\n%s", diff)
			}
			want := []entry{{1, false, "a"}, {2, false, "b"}, {3, false, "new-a"}, {4, false, "new-b"}}
			if diff := cmp.Diff(want, replayAll(t, j)); diff != "" {
				t.Errorf("second Replay (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContractConcurrentAppends(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			const goroutines, each = 8, 40
			indexes := make([][]uint64, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						last, err := j.Append(context.Background(), []byte(fmt.Sprintf("g%d-%d", g, i)), []byte(fmt.Sprintf("g%d-%d'", g, i)))
						if err != nil {
							t.Error(err)
							return
						}
						indexes[g] = append(indexes[g], last)
					}
				})
			}
			wg.Wait()
			got := replayAll(t, j)
			if len(got) != goroutines*each*2 {
				t.Fatalf("Replay yielded %d records, want %d", len(got), goroutines*each*2)
			}
			byIndex := map[uint64]string{}
			for i, e := range got {
				if e.Index != uint64(i+1) || e.Snapshot {
					t.Fatalf("entry %d = %+v, want index %d, not a snapshot", i, e, i+1)
				}
				byIndex[e.Index] = e.Data
			}
			for g := range goroutines {
				for i, last := range indexes[g] {
					first, second := byIndex[last-1], byIndex[last]
					if w1, w2 := fmt.Sprintf("g%d-%d", g, i), fmt.Sprintf("g%d-%d'", g, i); first != w1 || second != w2 {
						t.Errorf("records at %d,%d = %q,%q, want %q,%q (a call's records are consecutive)", last-1, last, first, second, w1, w2)
					}
					if i > 0 && last <= indexes[g][i-1] {
						t.Errorf("goroutine %d: append %d got index %d after %d", g, i, last, indexes[g][i-1])
					}
				}
			}
		})
	}
}

// TestContractConcurrentReplaySnapshot appends, snapshots and replays at
// once: every Replay must yield a snapshot whose state matches its index,
// then consecutive records, each record i being "rI".
func TestContractConcurrentReplaySnapshot(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			j := newJ(t)
			defer closeJournal(t, j)
			var (
				mu   sync.Mutex
				last uint64
			)
			appended := make(chan struct{})
			var wg sync.WaitGroup
			// One appender, so that record i is "r<i>".
			wg.Go(func() {
				defer close(appended)
				for i := 1; i <= 300; i++ {
					idx, err := j.Append(ctx, []byte(fmt.Sprintf("r%d-%s", i, strings.Repeat("p", 50))))
					if err != nil || idx != uint64(i) {
						t.Errorf("Append %d = (%d, %v)", i, idx, err)
						return
					}
					mu.Lock()
					last = idx
					mu.Unlock()
				}
			})
			wg.Go(func() {
				for {
					select {
					case <-appended:
						return
					default:
					}
					mu.Lock()
					idx := last
					mu.Unlock()
					if err := j.Snapshot(ctx, idx, []byte(fmt.Sprintf("upto:%d", idx))); err != nil {
						t.Errorf("Snapshot(%d): %v", idx, err)
						return
					}
				}
			})
			for range 2 {
				wg.Go(func() {
					for {
						select {
						case <-appended:
							return
						default:
						}
						next := uint64(1)
						err := j.Replay(ctx, func(e Entry) error {
							if e.Snapshot {
								if want := fmt.Sprintf("upto:%d", e.Index); string(e.Data) != want {
									return fmt.Errorf("snapshot at %d holds %q", e.Index, e.Data)
								}
								next = e.Index + 1
								return nil
							}
							if e.Index != next || !strings.HasPrefix(string(e.Data), fmt.Sprintf("r%d-", e.Index)) {
								return fmt.Errorf("record %d = %q, want index %d", e.Index, e.Data, next)
							}
							next++
							return nil
						})
						if err != nil {
							t.Errorf("Replay: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestContractCancelledAppend(t *testing.T) {
	for name, newJ := range impls() {
		t.Run(name, func(t *testing.T) {
			j := newJ(t)
			defer closeJournal(t, j)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := j.Append(ctx, []byte("x")); !errors.Is(err, context.Canceled) {
				t.Errorf("Append with a cancelled context: err = %v, want context.Canceled", err)
			}
			if err := j.Snapshot(ctx, 0, nil); !errors.Is(err, context.Canceled) {
				t.Errorf("Snapshot with a cancelled context: err = %v, want context.Canceled", err)
			}
			if _, err := collect(j); err != nil {
				t.Fatal(err)
			}
			if got := replayAll(t, j); len(got) != 0 {
				t.Errorf("Replay after a cancelled Append and Snapshot = %v, want nothing", got)
			}
		})
	}
}
