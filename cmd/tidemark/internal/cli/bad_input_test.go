package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// status --heartbeat-wait with a negative duration is a bad command line;
// it was taken, status watched nothing, and counted every live host dead:
// exit 3, its shards "stopped" (0 with --heartbeat-wait 1s).
func TestStatusNegativeHeartbeatWaitIsAUsageError(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	c, m := initialisedFleet(t, w, []kinesisload.ShardProgress{{ShardID: "shard-a", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
	for range 20 {
		ls, err := m.Acquire(ctx, []string{"shard-a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			break
		}
		w.clock.Advance(time.Second)
		c.Round()
	}
	env := w.env()
	env.Sleep = func(ctx context.Context, d time.Duration) error { // the host beats meanwhile
		w.clock.Advance(d)
		c.Round()
		return nil
	}
	run := func(args ...string) (int, string) {
		var out, errOut strings.Builder
		code := Run(ctx, env, args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	if code, out := run("status", "--table", "t", "--stream", "s", "--no-lag", "--heartbeat-wait", "1s"); code != ExitOK {
		t.Fatalf("status of a live host holding its shard = %d:\n%s", code, out)
	}
	if code, out := run("status", "--table", "t", "--stream", "s", "--no-lag", "--heartbeat-wait", "-1s"); code != ExitUsage {
		t.Errorf("status --heartbeat-wait -1s = %d, want %d (a bad command line):\n%s", code, ExitUsage, out)
	}
}

// import takes an export whose open shard has no position (a hand-edited
// file: "state": "ACTIVE" and no "position"), says "imported", and the
// next Loader stops at once on it ("start position: scan: invalid
// position: unknown kind 0"). import should refuse it, naming the file
// and the shard, as it does every other position no shard can resume
// from.
func TestImportRefusesAnOpenShardWithNoPosition(t *testing.T) {
	w := newWorld(t)
	file := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(file, []byte(`{"format": "tidemark-positions/1", "stream": "s", "shards": [{"shard": "shardId-000000000000", "state": "ACTIVE"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range [][]string{{"--dir", filepath.Join(t.TempDir(), "j")}, {"--table", "t"}} {
		code, out, errOut := w.run(append(append([]string{"import"}, target...), file)...)
		if code != ExitFailed || !strings.Contains(errOut, "shardId-000000000000") || !strings.Contains(errOut, "f.json") {
			t.Errorf("import %v of an ACTIVE shard with no position = %d, %q %q; want 1 naming the file and the shard", target, code, out, errOut)
		}
	}
}

// import-kcl --at-timestamp in the future is taken and stored: a shard
// at AT_TIMESTAMP in the future skips every record that arrives until
// then (Kinesis gives an iterator at the tip). rewind refuses a time in
// the future for that reason; import-kcl should too.
func TestImportKCLRefusesAFutureAtTimestamp(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	w.items = []map[string]ddbtypes.AttributeValue{kclItem(map[string]string{"leaseKey": "shardId-000000000000", "checkpoint": "AT_TIMESTAMP", "leaseCounter": "3"})}
	dir := filepath.Join(t.TempDir(), "j")
	future := t0.Add(24 * time.Hour).Format(time.RFC3339)
	code, out, errOut := w.run("import-kcl", "--kcl-table", "leases", "--stream", "s", "--dir", dir, "--at-timestamp", future, "--apply")
	if code != ExitUsage {
		t.Errorf("import-kcl --at-timestamp %s (a day ahead) --apply = %d, want %d:\n%s%s", future, code, ExitUsage, out, errOut)
	}
}
