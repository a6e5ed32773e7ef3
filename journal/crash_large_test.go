package journal

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// largeConfig is the config of the large-record crash test: segments of
// 1 MiB, so that some kills land in a roll.
func largeConfig() Config {
	cfg := DefaultConfig()
	cfg.SegmentSize = 1 << 20
	return cfg
}

// largeCall returns the records of the Append call named name
// ("RUN-gG-I"): 1 to 4 records of 2 to 20 KB, their number, sizes and
// bytes all derived from the name, so that a checker can rebuild them.
// Record k of n starts with "NAME/k/n:"; about one in five is zeros
// after that prefix (a payload with zero sectors of its own), the others
// are pseudo-random bytes.
func largeCall(name string) [][]byte {
	h := fnv.New64a()
	h.Write([]byte(name))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, 0x6c61726765))
	n := 1 + rng.IntN(4)
	recs := make([][]byte, n)
	for k := range recs {
		size := 2<<10 + rng.IntN(18<<10+1)
		b := make([]byte, size)
		p := copy(b, fmt.Sprintf("%s/%d/%d:", name, k, n))
		if rng.IntN(5) != 0 {
			for i := p; i < size; i += 8 {
				v := rng.Uint64()
				for j := 0; j < 8 && i+j < size; j++ {
					b[i+j] = byte(v >> (8 * j))
				}
			}
		}
		recs[k] = b
	}
	return recs
}

// helperAppendLarge appends calls of largeCall from helperAppenders
// goroutines until it is killed, printing "begin NAME" before each Append
// and "ack NAME" after it returns, like helperAppend (so runAndKill and
// checkRun read it the same way). With several goroutines appending
// calls of up to 80 KB, the writer's group commits span many pages.
func helperAppendLarge(dir, run string) error {
	ctx := context.Background()
	j, err := Open(dir, largeConfig())
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(s string) {
		outMu.Lock()
		defer outMu.Unlock()
		os.Stdout.WriteString(s + "\n")
	}
	say("ready")
	errs := make(chan error, helperAppenders)
	for g := range helperAppenders {
		go func() {
			for i := 0; ; i++ {
				name := fmt.Sprintf("%s-g%d-%d", run, g, i)
				recs := largeCall(name)
				say("begin " + name)
				if _, err := j.Append(ctx, recs...); err != nil {
					say("error " + err.Error())
					errs <- err
					return
				}
				say("ack " + name)
			}
		}()
	}
	return <-errs
}

// largeReplay replays the journal in dir (which has no snapshot) and
// checks every record against largeCall: its bytes, its index, and that
// the records of each call are all there, in order, or all absent. It
// returns the names of the calls in journal order, with the CRC-32C of
// each call's records, and the number of records.
func largeReplay(t *testing.T, j *FileJournal) (calls []string, sums []uint32, n int) {
	t.Helper()
	var (
		cur  []byte // the records of the call being read, concatenated
		got  int    // how many of them
		want [][]byte
		name string
	)
	err := j.Replay(context.Background(), func(e Entry) error {
		n++
		if e.Snapshot || e.Index != uint64(n) {
			return fmt.Errorf("entry %d: index %d, snapshot %v; want record %d", n, e.Index, e.Snapshot, n)
		}
		prefix, _, ok := strings.Cut(string(e.Data[:min(len(e.Data), 64)]), ":")
		parts := strings.Split(prefix, "/")
		if !ok || len(parts) != 3 {
			return fmt.Errorf("record %d does not start with NAME/k/n: %q", e.Index, e.Data[:min(len(e.Data), 64)])
		}
		k, err := strconv.Atoi(parts[1])
		if err != nil {
			return fmt.Errorf("record %d: bad prefix %q", e.Index, prefix)
		}
		if k == 0 {
			if len(want) > 0 {
				return fmt.Errorf("record %d starts call %s, but call %s has %d of its %d records", e.Index, parts[0], name, got, len(want))
			}
			name, want, cur, got = parts[0], largeCall(parts[0]), cur[:0], 0
		} else if parts[0] != name || k != got {
			return fmt.Errorf("record %d is %s, want record %d of call %s", e.Index, prefix, got, name)
		}
		if !bytes.Equal(want[k], e.Data) {
			return fmt.Errorf("record %d (%s): %d bytes that are not the ones appended (%d bytes)", e.Index, prefix, len(e.Data), len(want[k]))
		}
		cur = append(cur, e.Data...)
		got++
		if got == len(want) {
			calls = append(calls, name)
			sums = append(sums, crc32.Checksum(cur, crcTable))
			want = nil
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if len(want) > 0 {
		t.Fatalf("the journal ends with %d of the %d records of call %s: a partial batch", got, len(want), name)
	}
	return calls, sums, n
}

// TestCrashKill9LargeBatches kills a child with SIGKILL while four
// goroutines append calls of 1 to 4 records of 2 to 20 KB each, so that
// the kill lands during group commits that span many pages. After each
// kill Open must succeed (a kill is a crash, never corruption), every
// acknowledged call must be replayed with exactly its bytes, no call may
// be replayed in part, and the records of earlier runs must be unchanged.
func TestCrashKill9LargeBatches(t *testing.T) {
	kills := 20
	if testing.Short() {
		kills = 5
	}
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	var (
		prev     []string // calls replayed after the previous kill
		prevSums []uint32
	)
	torn, records, acks := 0, 0, 0
	for runs := range kills {
		run := fmt.Sprintf("r%d", runs)
		cr := runAndKill(t, "append-large", dir, run, rng)
		acks += len(cr.acked)

		j, err := Open(dir, largeConfig())
		if err != nil {
			t.Fatalf("run %d: Open after SIGKILL: %v", runs, err)
		}
		if j.Recovery().Torn != nil {
			torn++
		}
		calls, sums, n := largeReplay(t, j)
		closeJournal(t, j)
		records = n
		if len(calls) < len(prev) {
			t.Fatalf("run %d: replay has %d calls, the previous one had %d", runs, len(calls), len(prev))
		}
		if diff := cmp.Diff(prev, calls[:len(prev)], cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("run %d: calls of earlier runs changed (-want +got):\n%s", runs, diff)
		}
		if diff := cmp.Diff(prevSums, sums[:len(prev)], cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("run %d: the bytes of earlier runs' records changed (-want +got CRC-32C):\n%s", runs, diff)
		}
		checkRun(t, runs, run, calls[len(prev):], cr)
		prev, prevSums = calls, sums
	}

	// The kills landed in group commits of many pages: the journal holds
	// batches of several 4 KiB pages.
	maxBatch := int64(0)
	for _, p := range segmentPaths(t, dir) {
		_, batches, size := layout(t, p)
		for i, b := range batches {
			end := size
			if i+1 < len(batches) {
				end = batches[i+1]
			}
			maxBatch = max(maxBatch, end-b)
		}
	}
	if maxBatch < 4*4096 {
		t.Errorf("the largest batch is %d bytes, want group commits of at least 4 pages", maxBatch)
	}
	t.Logf("%d kills (%d left a torn last batch), %d acknowledged calls, %d calls and %d records in the journal, largest batch %d bytes",
		kills, torn, acks, len(prev), records, maxBatch)
}
