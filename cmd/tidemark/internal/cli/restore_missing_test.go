package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

// docs/fleet.md, "A shard item deleted by hand": a Loader stops naming
// the shard (kinesisload.MissingShardError), and the operator restores
// the item from an export. tidemark import refused: the fleet has started
// on the stream (and rewind --from skips a shard with no item). import
// --missing writes the items the table lacks, and only those.
func TestImportMissingRestoresAShardItemDeletedByHand(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	initialisedFleet(t, w, []kinesisload.ShardProgress{
		{ShardID: "shard-a", State: kinesisload.StateActive, Position: scan.AfterSequence("100")},
		{ShardID: "shard-b", State: kinesisload.StateActive, Position: scan.AfterSequence("200")},
	})
	file := filepath.Join(t.TempDir(), "backup.json")
	if code, _, errOut := w.run("export", "--table", "t", "--stream", "s", "--out", file); code != ExitOK {
		t.Fatalf("export = %d, %q", code, errOut)
	}
	it, err := w.table.Get(ctx, "s", "shard#shard-b")
	if err != nil || !it.Exists() {
		t.Fatalf("shard-b's item: %v %v", it, err)
	}
	if err := w.table.Delete(ctx, "s", "shard#shard-b", it.Version); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := w.run("import", "--table", "t", file); code != ExitFailed || !strings.Contains(errOut, "--missing") {
		t.Errorf("import of a started fleet's export without --missing = %d, %q; want 1, pointing to --missing", code, errOut)
	}
	code, out, errOut := w.run("import", "--missing", "--table", "t", file)
	info, _ := fleet.Inspect(ctx, w.table, "s")
	b, ok := info.Shards["shard-b"]
	if code != ExitOK || !ok || !b.Progress.Position.Equal(scan.AfterSequence("200")) || !strings.Contains(out, "shard-b") {
		t.Errorf("import --missing of the export after shard-b's item was deleted = %d, %q %q; shard-b's item: %+v (present %v), want it at AFTER_SEQUENCE_NUMBER:200", code, out, errOut, b, ok)
	}
	if a := info.Shards["shard-a"]; !a.Progress.Position.Equal(scan.AfterSequence("100")) {
		t.Errorf("shard-a after import --missing: %+v, want it as it was", a)
	}
	if code, _, errOut := w.run("import", "--missing", "--dir", t.TempDir(), file); code != ExitUsage {
		t.Errorf("import --missing into a journal = %d, %q; want a usage error", code, errOut)
	}
}
