package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cmd/tidemark/internal/cli"
	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// On a journal, as an operator runs it against kinesis-local: status reads
// a running Loader's journal from a copy (healthy, nothing behind);
// rewind is refused while the Loader holds the directory; once it
// stopped, status says so (exit 3), and a rewind of one shard makes the
// next Loader deliver exactly that shard's records after the new
// position, once, and nothing of the other shard again.
func TestJournalStatusAndRewindAsAnOperatorRunsThem(t *testing.T) {
	kin := emulator.Start(t, emulator.KinesisLocal)
	kc := kin.Client
	newStream(t, kc, "ops", 2)
	low := putN(t, kc, "ops", lowKey, "low", 5)
	high := putN(t, kc, "ops", highKey, "high", 3)
	dir := filepath.Join(t.TempDir(), "journal")

	rec := &recorder{}
	ld := startLoader(t, kinesisload.Config{Stream: "ops", Dir: dir, Sink: rec, StartPosition: scan.TrimHorizon()}, kinesisload.WithClient(kc))
	rec.waitFor(t, 20*time.Second, "low-5", "high-3")

	code, out, _ := tidemark(t, "status", "--dir", dir, "--kinesis-endpoint", kin.Endpoint, "--json")
	var rep cli.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if code != cli.ExitOK || len(rep.Streams) != 1 || !rep.Streams[0].ReadFromCopy {
		t.Fatalf("status of a running Loader's journal = %d, %+v; want 0, read from a copy", code, rep)
	}
	for _, sh := range rep.Streams[0].Shards {
		if sh.Health != cli.HealthOK || sh.Lag == nil || sh.Lag.Records != 0 {
			t.Errorf("shard %s: %+v (lag %+v), want ok with nothing behind", sh.Shard, sh, sh.Lag)
		}
	}

	code, _, errOut := tidemark(t, "rewind", "--dir", dir, "--stream", "ops", "--to", "TRIM_HORIZON")
	if code != cli.ExitFailed || !strings.Contains(errOut, "locked") {
		t.Errorf("rewind while the Loader runs = %d, %q; want 1, locked", code, errOut)
	}
	ld.stop(t)

	code, out, _ = tidemark(t, "status", "--dir", dir, "--no-lag")
	if code != cli.ExitUnhealthy || !strings.Contains(out, "stopped") {
		t.Errorf("status with no Loader = %d, want 3 and stopped:\n%s", code, out)
	}

	shard0 := "shardId-000000000000"
	code, out, _ = tidemark(t, "rewind", "--dir", dir, "--stream", "ops", "--shards", shard0, "--to", "AFTER_SEQUENCE_NUMBER:"+low[1],
		"--kinesis-endpoint", kin.Endpoint, "--by", "alice", "--reason", "reprocess")
	if code != cli.ExitOK || !strings.Contains(out, "rewound 1 shard(s)") || !strings.Contains(out, "by alice") {
		t.Fatalf("rewind = %d:\n%s", code, out)
	}
	code, out, _ = tidemark(t, "status", "--dir", dir, "--no-lag")
	if !strings.Contains(out, "last rewind of "+shard0) || !strings.Contains(out, "by alice") {
		t.Errorf("status does not show the rewind (exit %d):\n%s", code, out)
	}

	again := &recorder{}
	startLoader(t, kinesisload.Config{Stream: "ops", Dir: dir, Sink: again, StartPosition: scan.TrimHorizon()}, kinesisload.WithClient(kc))
	// A record after the old ones on each shard: whatever the Loader
	// delivers of a shard comes before it.
	put(t, kc, "ops", lowKey, []byte("low-6"))
	put(t, kc, "ops", highKey, []byte("high-4"))
	delivered := again.waitFor(t, 20*time.Second, "low-6", "high-4")
	want := []string{"low-3", "low-4", "low-5", "low-6", "high-4"}
	slices.Sort(delivered)
	slices.Sort(want)
	if !slices.Equal(delivered, want) {
		t.Errorf("after the rewind the Loader delivered %v, want exactly %v", delivered, want)
	}
	_ = high
}
