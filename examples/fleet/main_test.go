package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the demo against the emulators and checks its story: three
// hosts each own two shards, the dead host's shards get new owners at a
// new epoch, the new host takes its share, and the summary finds nothing
// lost.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), &out, []string{"-timeout", "2m"})
	if errors.Is(err, emulator.ErrNotInstalled) && emulator.Optional() {
		t.Skip(err)
	}
	t.Logf("output:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	story := out.String()
	for _, want := range []string{
		"initialisation committed",
		"2. host-b dies",
		"its shards moved",
		"3. host-d joins",
		"  lost:       0\n",
		"OK: nothing lost",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the story lacks %q", want)
		}
	}
	// Every moved shard names a surviving owner and a later epoch.
	moved := regexp.MustCompile(`(?m)^     (shardId-\d+) -> (host-[a-z]) \(epoch (\d+)\)$`).FindAllStringSubmatch(story, -1)
	if len(moved) == 0 {
		t.Error("no shard of the dead host moved")
	}
	for _, m := range moved {
		if m[2] == "host-b" || m[3] == "1" {
			t.Errorf("%s moved to %s at epoch %s, want another host at a later epoch", m[1], m[2], m[3])
		}
	}
	// The last table: host-d owns two shards.
	last := story[strings.LastIndex(story, "SHARD "):]
	if n := len(regexp.MustCompile(`(?m)^\s+shardId-\d+\s+host-d\s`).FindAllString(last, -1)); n != 2 {
		t.Errorf("host-d owns %d shards in the last table, want 2:\n%s", n, last)
	}
}

// TestRunTimeout: a demo that cannot finish in time fails with the
// deadline, and stops what it started.
func TestRunTimeout(t *testing.T) {
	err := run(context.Background(), &bytes.Buffer{}, []string{"-timeout", "1ms"})
	if errors.Is(err, emulator.ErrNotInstalled) && emulator.Optional() {
		t.Skip(err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run = %v, want context.DeadlineExceeded", err)
	}
}

// TestInspect checks the subcommand's flags and that it reads the table
// through dynamo: a missing table is dynamo's error naming it.
func TestInspect(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-stream", "orders"}, "-table is required"},
		{[]string{"-table", "t"}, "-stream is required"},
		{[]string{"-table", "t", "-stream", "s", "extra"}, "unexpected arguments"},
	} {
		if err := inspectMain(context.Background(), &bytes.Buffer{}, tt.args); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("inspect %q = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	e := emulator.Start(t, emulator.Dynalite)
	t.Setenv("AWS_REGION", emulator.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTIDEMARKTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := inspectMain(ctx, &bytes.Buffer{}, []string{"-table", "no-such-table", "-stream", "orders", "-endpoint", e.Endpoint})
	if !errors.Is(err, dynamo.ErrTableMissing) || !strings.Contains(err.Error(), "no-such-table") {
		t.Fatalf("inspect of a missing table = %v, want dynamo.ErrTableMissing naming it", err)
	}
}
