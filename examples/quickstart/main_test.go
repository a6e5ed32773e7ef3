package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runDemo runs the demo with args and fails the test if it fails.
func runDemo(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), &out, args); err != nil {
		t.Fatalf("run(%q): %v\noutput:\n%s", args, err, out.String())
	}
	return out.String()
}

// TestRunInMemory runs the demo as `go run ./examples/quickstart -dir DIR`
// does and checks that its output tells the story it promises, in order.
func TestRunInMemory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := runDemo(t, "-dir", dir)
	checkStory(t, out)

	// -dir keeps the journal.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Errorf("-dir %s: no journal segment left in it (%v, %v)", dir, segs, err)
	}
	if !strings.Contains(out, "journal: "+dir+" (kept)") {
		t.Errorf("output does not say the journal %s is kept", dir)
	}
}

// TestRunAggregated: with -aggregate every record is written as a KPL
// aggregated record, and the story and its checks are the same: the Loader
// de-aggregates them.
func TestRunAggregated(t *testing.T) {
	t.Parallel()
	out := runDemo(t, "-aggregate")
	checkStory(t, out)
	if !strings.Contains(out, "KPL aggregated") {
		t.Errorf("output does not say the records are aggregated:\n%s", out)
	}
}

// TestRunAgainstKinesisLocal runs the demo with -endpoint against a real
// emulator, as a user with a kinesis-local started by hand would.
func TestRunAgainstKinesisLocal(t *testing.T) {
	out, e := runAgainstKinesisLocal(t)
	if !strings.Contains(out, "Kinesis: "+e.Endpoint+" (region us-east-1)") {
		t.Errorf("output does not name the endpoint %s and region us-east-1:\n%s", e.Endpoint, out)
	}
}

// TestRunFanOut: with -fanout the Loaders read with enhanced fan-out, and
// the story and its checks are the same.
func TestRunFanOut(t *testing.T) {
	t.Parallel()
	out := runDemo(t, "-fanout")
	checkStory(t, out)
	if !strings.Contains(out, "reading: enhanced fan-out, consumer tidemark-quickstart") {
		t.Errorf("output does not say the Loaders read with enhanced fan-out:\n%s", out)
	}
}

// TestRunFanOutAgainstKinesisLocal runs the demo with -endpoint and
// -fanout on kinesis-local: its SubscribeToShard answers lack the
// initial-response event, which the demo's client supplies
// (kinesislocal.Transport); without it the first Loader's Run fails.
func TestRunFanOutAgainstKinesisLocal(t *testing.T) {
	// kinesis-local keeps a subscription the killed Loader closed "in
	// use" for a few seconds, which the restarted Loader waits out.
	out, _ := runAgainstKinesisLocal(t, "-fanout", "-timeout", "2m")
	if !strings.Contains(out, "reading: enhanced fan-out, consumer tidemark-quickstart") {
		t.Errorf("output does not say the Loaders read with enhanced fan-out:\n%s", out)
	}
}

// runAgainstKinesisLocal starts kinesis-local, runs the demo on it with
// args and checks its story.
func runAgainstKinesisLocal(t *testing.T, args ...string) (string, *emulator.Emulator) {
	t.Helper()
	e := emulator.Start(t, emulator.KinesisLocal)
	// The SDK must not find credentials elsewhere: the demo's fallback is
	// under test.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_REGION", "")
	out := runDemo(t, append([]string{"-endpoint", e.Endpoint}, args...)...)
	checkStory(t, out)
	return out, e
}

// checkStory checks the key lines of the demo's output.
func checkStory(t *testing.T, out string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	}()

	// Step 2: LATEST was resolved to just after R3, by its real sequence
	// number, and journaled before anything was read.
	r3 := regexp.MustCompile(`put R3  -> (shardId-\d+)  seq (\d+)`).FindStringSubmatch(out)
	if r3 == nil {
		t.Fatal("no line for writing R3")
	}
	journaled := regexp.MustCompile(`before a single record has been read:\n\s+` + r3[1] + `  ACTIVE\s+AFTER_SEQUENCE_NUMBER:(\d+) \(just after R3\)`).FindStringSubmatch(out)
	if journaled == nil {
		t.Fatal("step 2 does not show the journaled position just after R3")
	}
	if journaled[1] != r3[2] {
		t.Errorf("journaled AFTER_SEQUENCE_NUMBER:%s, want R3's sequence number %s", journaled[1], r3[2])
	}

	// Every line below must appear, in this order.
	inOrder := []string{
		"1. A stream with history",
		"2. A Loader starts at LATEST",
		"1 shard(s) resolved by the probe strategy, 0 reused from the journal.",
		"3. New records arrive",
		"put R4",
		"put R5",
		"handed them to its Sink",
		"4. The reader is killed before its first commit",
		"Run returned: context canceled.",
		"5. The restart",
		"GetShardIterator(shardId-000000000000, LATEST) + GetRecords -> 0 records",
		"the naive consumer skips R4 and R5",
		"AFTER_SEQUENCE_NUMBER:" + r3[2] + " (just after R3)",
		"nothing to resolve, 1 reused from the journal.",
		"sink <- shardId-000000000000: R4 R5\n",
		"6. A split",
		"The Sink is busy with the batch that holds R8",
		"Split shardId-000000000000 into shardId-000000000001 and shardId-000000000002.",
		"shardId-000000000001  PENDING_PARENT TRIM_HORIZON",
		"shardId-000000000002  PENDING_PARENT TRIM_HORIZON",
		"R8\n", // the parent's last batch, accepted once released
		"shardId-000000000000: ACTIVE -> DRAINING",
		"shardId-000000000000: DRAINING -> COMPLETED",
		"shardId-000000000001: PENDING_PARENT -> ACTIVE",
		"sink <- shardId-000000000001: R9 R11\n",
		"7. Summary",
		"OK: every record written after the resolved start was delivered: R4 R5 R6 R7 R8 R9 R10 R11 R12.",
	}
	rest := out
	for _, want := range inOrder {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("missing, or out of order: %q", want)
		}
		rest = rest[i+len(want):]
	}
	if !strings.Contains(out, "sink <- shardId-000000000002: R10 R12\n") {
		t.Error("R10 and R12 were not delivered from shardId-000000000002 in one batch")
	}
	if m := regexp.MustCompile(`(?m)^   sink <- .*\bR[123]\b.*$`).FindString(out); m != "" {
		t.Errorf("a record from before the resolved start was delivered: %q", m)
	}
	if strings.Contains(out, "FAIL") {
		t.Error("the output reports a failed check")
	}
}

// TestRunRemovesTemporaryJournal checks that without -dir the journal lives
// in a temporary directory that is gone when run returns.
func TestRunRemovesTemporaryJournal(t *testing.T) {
	t.Parallel()
	out := runDemo(t)
	m := regexp.MustCompile(`journal: (\S+) \(temporary, removed at exit\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the output does not name a temporary journal:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary journal %s still exists after run (Stat: %v)", m[1], err)
	}
}

// TestRunTimeout checks that the demo gives up by itself, with an error
// that says why, and leaves nothing running (goleak checks that).
func TestRunTimeout(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(context.Background(), &out, []string{"-timeout", "300ms"})
	if err == nil || !strings.Contains(err.Error(), "did not finish within -timeout 300ms") {
		t.Errorf("run with -timeout 300ms: %v, want an error that names the timeout", err)
	}
}

func TestRunFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-timeout", "0s"}, "-timeout 0s: must be positive"},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var out bytes.Buffer
		err := run(context.Background(), &out, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run(-h) = %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "-endpoint URL") {
		t.Errorf("-h does not describe -endpoint:\n%s", out.String())
	}
}

// TestCheck makes sure the final self-check fails when a promise is broken:
// each case breaks one.
func TestCheck(t *testing.T) {
	const parent, c1, c2 = "shardId-000000000000", "shardId-000000000001", "shardId-000000000002"
	writes := []written{
		{"R1", parent, "1"}, {"R2", parent, "2"}, {"R3", parent, "3"}, {"R4", parent, "4"},
		{"R5", c1, "5"}, {"R6", c2, "6"}, {"R7", c1, "7"},
	}
	start := scan.AfterSequence("3") // just after R3
	rec := func(shard, label string) event { return event{shard: shard, label: label} }
	state := func(shard string, s kinesisload.ShardState) event { return event{shard: shard, state: s} }
	completed := state(parent, kinesisload.StateCompleted)
	for _, tc := range []struct {
		name   string
		events []event
		want   []string
	}{
		{
			name:   "all promises kept",
			events: []event{rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R5"), rec(c1, "R7")},
		},
		{
			name:   "a record lost",
			events: []event{rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R7")},
			want:   []string{c1 + ": delivered [R7], want [R5 R7] (each once, in order)"},
		},
		{
			name:   "a record from before the start",
			events: []event{rec(parent, "R3"), rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R5"), rec(c1, "R7")},
			want:   []string{parent + ": delivered [R3 R4], want [R4] (each once, in order)"},
		},
		{
			name:   "out of order",
			events: []event{rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R7"), rec(c1, "R5")},
			want:   []string{c1 + ": delivered [R7 R5], want [R5 R7] (each once, in order)"},
		},
		{
			name:   "a duplicate",
			events: []event{rec(parent, "R4"), rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R5"), rec(c1, "R7")},
			want:   []string{parent + ": delivered [R4 R4], want [R4] (each once, in order)"},
		},
		{
			name:   "a child before its parent completed",
			events: []event{rec(parent, "R4"), rec(c2, "R6"), completed, rec(c1, "R5"), rec(c1, "R7")},
			want:   []string{"R6 of child " + c2 + " was delivered before " + parent + " was COMPLETED"},
		},
		{
			name:   "the parent never completed",
			events: []event{rec(parent, "R4")},
			want: []string{
				c1 + ": delivered [], want [R5 R7] (each once, in order)",
				c2 + ": delivered [], want [R6] (each once, in order)",
				parent + " never reported COMPLETED",
			},
		},
		{
			name:   "a shard nobody wrote to",
			events: []event{rec(parent, "R4"), completed, rec(c2, "R6"), rec(c1, "R5"), rec(c1, "R7"), rec("shardId-000000000009", "X")},
			want:   []string{"shardId-000000000009: delivered [X], want nothing"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{events: tc.events}
			got := r.check(writes, start, parent)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("check (-want +got):\n%s", diff)
			}
		})
	}
}
