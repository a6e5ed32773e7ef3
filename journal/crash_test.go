package journal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// helperCmd returns a command that re-executes the test binary in a
// helper mode on dir.
func helperCmd(mode, dir, run string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+dir, helperRunEnv+"="+run)
	return cmd
}

func TestLockOtherProcess(t *testing.T) {
	dir := t.TempDir()
	j, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	out, err := helperCmd("lock", dir, "").CombinedOutput()
	if err != nil || string(out) != "locked\n" {
		t.Errorf("Open in another process while open here: output %q, err %v; want \"locked\"", out, err)
	}
	closeJournal(t, j)
	out, err = helperCmd("lock", dir, "").CombinedOutput()
	if err != nil || string(out) != "opened\n" {
		t.Errorf("Open in another process after Close: output %q, err %v; want \"opened\"", out, err)
	}
}

// childRun is what one killed child reported.
type childRun struct {
	begun map[string]int // record -> line number of its "begin"
	ackAt map[string]int // record -> line number of its "ack"
	acked []string
	errs  []string
}

// runAndKill starts an appending child in helper mode ("append" or
// "append-large"), kills it with SIGKILL at a random moment after it
// opened the journal, and returns what it reported before it died.
func runAndKill(t *testing.T, mode, dir, run string, rng *rand.Rand) childRun {
	t.Helper()
	cmd := helperCmd(mode, dir, run)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan childRun)
	go func() {
		cr := childRun{begun: map[string]int{}, ackAt: map[string]int{}}
		sc := bufio.NewScanner(stdout)
		for n := 0; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case line == "ready":
				close(ready)
			case strings.HasPrefix(line, "begin "):
				cr.begun[strings.TrimPrefix(line, "begin ")] = n
			case strings.HasPrefix(line, "ack "):
				r := strings.TrimPrefix(line, "ack ")
				cr.acked = append(cr.acked, r)
				cr.ackAt[r] = n
			default:
				cr.errs = append(cr.errs, line)
			}
		}
		done <- cr
	}()
	select {
	case <-ready:
		time.Sleep(time.Duration(rng.IntN(60_000)) * time.Microsecond)
	case <-time.After(30 * time.Second):
		t.Error("child did not get ready in 30 s")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cr := <-done
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child exited with %v, want killed; stderr:\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Fatalf("the race detector reported in the child:\n%s", stderr.String())
	}
	if len(cr.errs) > 0 {
		t.Fatalf("child reported errors: %q; stderr:\n%s", cr.errs, stderr.String())
	}
	return cr
}

// TestCrashKill9 kills an appending, snapshotting child with SIGKILL many
// times, and after each kill checks that the journal replays to exactly
// the records acknowledged so far, in order, plus at most the records
// that were in flight (begun, not acknowledged) when it died.
func TestCrashKill9(t *testing.T) {
	budget := 8 * time.Second
	if testing.Short() {
		budget = time.Second
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	prev := []string{} // every record replayed after the previous kill
	start := time.Now()
	runs, acks := 0, 0
	for ; runs < 3 || time.Since(start) < budget; runs++ {
		run := fmt.Sprintf("r%d", runs)
		cr := runAndKill(t, "append", dir, run, rng)
		acks += len(cr.acked)

		j, err := Open(dir, helperConfig())
		if err != nil {
			t.Fatalf("run %d: Open after SIGKILL: %v", runs, err)
		}
		var got []string
		var lastIndex uint64
		err = j.Replay(context.Background(), func(e Entry) error {
			if e.Snapshot {
				got = splitState(e.Data)
			} else {
				if e.Index != uint64(len(got)+1) {
					return fmt.Errorf("record index %d after %d records", e.Index, len(got))
				}
				got = append(got, string(e.Data))
			}
			lastIndex = e.Index
			return nil
		})
		closeJournal(t, j)
		if err != nil {
			t.Fatalf("run %d: Replay: %v", runs, err)
		}
		if lastIndex != uint64(len(got)) {
			t.Fatalf("run %d: replay ended at index %d with %d records", runs, lastIndex, len(got))
		}
		if len(got) < len(prev) {
			t.Fatalf("run %d: replay has %d records, the previous one had %d", runs, len(got), len(prev))
		}
		if diff := cmp.Diff(prev, got[:len(prev)]); diff != "" {
			t.Fatalf("run %d: records of earlier runs changed (-want +got):\n%s", runs, diff)
		}
		checkRun(t, runs, run, got[len(prev):], cr)
		prev = got
	}
	t.Logf("%d kills, %d acknowledged appends, %d records in the journal", runs, acks, len(prev))
}

// checkRun checks the records one killed child added: each goroutine's
// records are 0..m in order, every acknowledged one is there, any other is
// one the child had begun, and a record acknowledged before another began
// precedes it.
func checkRun(t *testing.T, runs int, run string, added []string, cr childRun) {
	t.Helper()
	next := make([]int, helperAppenders) // next sequence number expected per goroutine
	present := map[string]bool{}
	for _, r := range added {
		rrun, g, i, err := parseRecord(r)
		if err != nil || rrun != run || g >= helperAppenders {
			t.Fatalf("run %d: unexpected record %q in the journal (%v)", runs, r, err)
		}
		if i != next[g] {
			t.Fatalf("run %d: record %q follows %s-g%d-%d: out of order or missing", runs, r, run, g, next[g]-1)
		}
		next[g]++
		if _, ok := cr.begun[r]; !ok {
			t.Fatalf("run %d: record %q is in the journal but the child never began appending it", runs, r)
		}
		present[r] = true
	}
	for _, r := range cr.acked {
		if !present[r] {
			t.Fatalf("run %d: acknowledged record %q is missing from the journal", runs, r)
		}
	}
	// Real-time order: a record whose Append returned before another's
	// began comes first in the journal. Walking backwards, minAck is the
	// earliest acknowledgement among the records after the current one.
	minAck, minAckRec := int(^uint(0)>>1), ""
	for i := len(added) - 1; i >= 0; i-- {
		r := added[i]
		if minAck < cr.begun[r] {
			t.Fatalf("run %d: %q was acknowledged before %q began, but comes after it in the journal", runs, minAckRec, r)
		}
		if at, ok := cr.ackAt[r]; ok && at < minAck {
			minAck, minAckRec = at, r
		}
	}
}

// errCrash is what the afterStep hook returns to stop an operation as a
// crash would.
var errCrash = errors.New("simulated crash")

// TestCrashPoints stops a snapshot (and its compaction) after each durable
// step, as a crash there would, and checks that the reopened journal
// replays to the same state, with the expected snapshot.
func TestCrashPoints(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		step      string
		nth       int    // crash at the nth time the step is reached
		snapIndex uint64 // the snapshot that Replay yields after reopening
	}{
		{"snapshot-synced", 1, 20},
		{"snapshot-renamed", 1, 100},
		{"snapshot-dir-synced", 1, 100},
		{"old-snapshot-removed", 1, 100},
		{"segment-removed", 1, 100},
		{"segment-removed", 2, 100},
		{"segment-removed", 3, 100},
		{"compaction-dir-synced", 1, 100},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s#%d", tt.step, tt.nth), func(t *testing.T) {
			dir := t.TempDir()
			armed, seen := false, 0
			cfg := smallConfig()
			cfg.afterStep = func(step string) error {
				if armed && step == tt.step {
					if seen++; seen == tt.nth {
						return errCrash
					}
				}
				return nil
			}
			j, err := Open(dir, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 120; i++ {
				mustAppend(t, j, rec(i))
			}
			if err := j.Snapshot(ctx, 20, []byte(stateOf(1, 20))); err != nil {
				t.Fatal(err)
			}
			armed = true
			if err := j.Snapshot(ctx, 100, []byte(stateOf(1, 100))); !errors.Is(err, errCrash) {
				t.Fatalf("Snapshot(100) = %v, want the simulated crash at %s", err, tt.step)
			}
			closeJournal(t, j)

			got := reopen(t, dir, smallConfig())
			if len(got) == 0 || !got[0].Snapshot || got[0].Index != tt.snapIndex {
				t.Fatalf("Replay after the crash starts with %+v, want the snapshot at %d", got[:min(1, len(got))], tt.snapIndex)
			}
			if diff := cmp.Diff(stateOf(1, int(tt.snapIndex)), got[0].Data); diff != "" {
				t.Errorf("snapshot state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(records(int(tt.snapIndex)+1, 120), got[1:]); diff != "" {
				t.Errorf("records after the snapshot (-want +got):\n%s", diff)
			}
			// Reopening finished the interrupted compaction.
			var snaps []string
			for _, n := range fileNames(t, dir) {
				if strings.HasSuffix(n, snapshotExt) || strings.HasSuffix(n, tempExt) {
					snaps = append(snaps, n)
				}
			}
			if diff := cmp.Diff([]string{fileName{kind: kindSnapshot, index: tt.snapIndex}.String()}, snaps); diff != "" {
				t.Errorf("snapshot and temporary files after reopening (-want +got):\n%s", diff)
			}
			segs := segmentPaths(t, dir)
			if first := segName(t, segs[0]).index; first > tt.snapIndex+1 || (len(segs) > 1 && segName(t, segs[1]).index <= tt.snapIndex+1) {
				t.Errorf("after reopening, segments %v remain: want no segment wholly covered by the snapshot at %d", names(segs), tt.snapIndex)
			}
		})
	}
}

// stateOf is the test state after records first..last: them, joined.
func stateOf(first, last int) string {
	var rs []string
	for i := first; i <= last; i++ {
		rs = append(rs, rec(i))
	}
	return strings.Join(rs, "|")
}

// TestCrashDuringRoll stops a segment roll after the new segment is
// created: the append that needed it fails, the journal refuses further
// writes, and after reopening every acknowledged record is there and
// appends go on at the next index.
func TestCrashDuringRoll(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := smallConfig()
	crashed := false
	cfg.afterStep = func(step string) error {
		if step == "segment-created" && !crashed {
			crashed = true
			return errCrash
		}
		return nil
	}
	j, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	acked := 0
	for i := 1; ; i++ {
		_, err := j.Append(ctx, []byte(rec(i)))
		if err != nil {
			if !errors.Is(err, ErrFailed) || !errors.Is(err, errCrash) {
				t.Fatalf("Append %d: err = %v, want ErrFailed wrapping the crash", i, err)
			}
			break
		}
		acked = i
	}
	if _, err := j.Append(ctx, []byte("more")); !errors.Is(err, ErrFailed) {
		t.Errorf("Append after a failure: err = %v, want ErrFailed", err)
	}
	if err := j.Snapshot(ctx, 1, nil); !errors.Is(err, ErrFailed) {
		t.Errorf("Snapshot after a failure: err = %v, want ErrFailed", err)
	}
	closeJournal(t, j)
	if diff := cmp.Diff(records(1, acked), reopen(t, dir, smallConfig())); diff != "" {
		t.Errorf("Replay after the crash (-want +got):\n%s", diff)
	}
	j, err = Open(dir, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	if last := mustAppend(t, j, rec(acked+1)); last != uint64(acked+1) {
		t.Errorf("Append after reopening: last = %d, want %d", last, acked+1)
	}
	closeJournal(t, j)
	if diff := cmp.Diff(records(1, acked+1), reopen(t, dir, smallConfig())); diff != "" {
		t.Errorf("Replay after appending again (-want +got):\n%s", diff)
	}
}
