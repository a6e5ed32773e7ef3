package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
	"github.com/tidemark/tidemark/scan"
)

var importID = kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:1:stream/s", Created: start}

// Progress imported into an empty table is what the fleet resumes from:
// the first host initialises (nothing to resolve for imported shards),
// and a lease of an imported shard starts at its imported position, with
// its lineage and state; a COMPLETED parent lets its child be read.
func TestImportIsWhereTheFleetResumes(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	progress := []kinesisload.ShardProgress{
		{ShardID: "shard-p", State: kinesisload.StateCompleted, Position: scan.ShardEnd()},
		{ShardID: "shard-c", State: kinesisload.StateActive, Position: scan.AfterSequence("4242"), Parents: []string{"shard-p"}},
		{ShardID: "shard-t", State: kinesisload.StateActive, Position: scan.AtTimestamp(start.Add(-time.Hour))},
	}
	if err := fleet.Import(ctx, w.table, "s", importID, progress); err != nil {
		t.Fatal(err)
	}
	a := w.host("a")
	var loaded map[string]kinesisload.ShardProgress
	if err := a.m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		id, err := st.Identity(ctx, "s")
		if err != nil {
			return err
		}
		if !id.Equal(importID) {
			t.Errorf("the initialisation sees identity %v, want the imported %v", id, importID)
		}
		loaded, err = st.Load(ctx, "s")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 3 || !loaded["shard-c"].Position.Equal(scan.AfterSequence("4242")) {
		t.Errorf("the initialisation loaded %+v, want the three imported shards", loaded)
	}
	for _, want := range progress[1:] {
		ls := w.acquire(a, want.ShardID)
		got := ls.Progress()
		if !got.Position.Equal(want.Position) || got.State != want.State || strings.Join(got.Parents, ",") != strings.Join(want.Parents, ",") {
			t.Errorf("lease of %s: progress %+v, want %+v", want.ShardID, got, want)
		}
	}
}

// An import is refused, writing nothing, into a stream the fleet started
// on or whose items differ; one that failed part-way runs again.
func TestImportRefusesANonEmptyStreamAndRunsAgain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, fleet.Config{})
	one := []kinesisload.ShardProgress{{ShardID: "shard-a", State: kinesisload.StateActive, Position: scan.TrimHorizon()}}
	if err := fleet.Import(ctx, w.table, "s", importID, one); err != nil {
		t.Fatal(err)
	}
	if err := fleet.Import(ctx, w.table, "s", importID, one); err != nil {
		t.Errorf("the same import again = %v, want nil (it wrote these items)", err)
	}
	other := []kinesisload.ShardProgress{{ShardID: "shard-a", State: kinesisload.StateActive, Position: scan.AfterSequence("9")}}
	if err := fleet.Import(ctx, w.table, "s", importID, other); !errors.Is(err, fleet.ErrNotEmpty) || !strings.Contains(err.Error(), "shard-a") {
		t.Errorf("an import over another item = %v, want ErrNotEmpty naming shard-a", err)
	}
	if err := fleet.Import(ctx, w.table, "s", kinesisload.StreamIdentity{ARN: "arn:other", Created: start}, one); !errors.Is(err, fleet.ErrNotEmpty) {
		t.Errorf("an import of another stream's identity = %v, want ErrNotEmpty", err)
	}
	for _, bad := range [][]kinesisload.ShardProgress{
		{{ShardID: "x", Position: scan.Latest()}},
		{{ShardID: ""}},
		{{ShardID: "y"}, {ShardID: "y"}},
	} {
		if err := fleet.Import(ctx, w.table, "s2", importID, bad); err == nil {
			t.Errorf("Import(%+v) = nil, want an error", bad)
		}
	}
	if parts := w.table.Partitions(); strings.Contains(strings.Join(parts, " "), "s2") {
		t.Errorf("a refused import wrote partitions %v", parts)
	}
	w.seed(w.host("a"), 1)
	if err := fleet.Import(ctx, w.table, "s", importID, one); !errors.Is(err, fleet.ErrNotEmpty) || !strings.Contains(err.Error(), "rewind") {
		t.Errorf("an import into a started fleet = %v, want ErrNotEmpty pointing at rewind", err)
	}
}

// Import refuses, writing nothing, progress no shard stores: SHARD_END on
// a shard not COMPLETED (its records would be skipped: the Loader
// completes it unread) and COMPLETED short of SHARD_END (its children
// would be read before the rest of it). Both were imported.
func TestImportRefusesProgressNoShardStores(t *testing.T) {
	ctx := context.Background()
	for name, p := range map[string]kinesisload.ShardProgress{
		"SHARD_END, ACTIVE":  {ShardID: "x", State: kinesisload.StateActive, Position: scan.ShardEnd()},
		"COMPLETED, not END": {ShardID: "x", State: kinesisload.StateCompleted, Position: scan.AfterSequence("5")},
	} {
		table := fleet.NewMemoryTable()
		err := fleet.Import(ctx, table, "s", kinesisload.StreamIdentity{}, []kinesisload.ShardProgress{p})
		if err == nil || !strings.Contains(err.Error(), "shard x") {
			t.Errorf("%s: Import = %v, want a refusal naming shard x", name, err)
		}
		if its, _ := table.Query(ctx, "s"); len(its) > 0 {
			t.Errorf("%s: the refused Import wrote %d items", name, len(its))
		}
	}
}
