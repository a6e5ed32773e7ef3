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

// restoreBackup puts item (read before the start-over) back over the
// identity item, as an operator restoring a stale backup would.
func restoreBackup(t *testing.T, w *world, backup fleet.Item) {
	t.Helper()
	ctx := context.Background()
	cur, err := w.table.Get(ctx, "s", "identity")
	if err != nil {
		t.Fatal(err)
	}
	backup.Version = cur.Version
	if _, err := w.table.Put(ctx, backup); err != nil {
		t.Fatal(err)
	}
}

func startedOverWithBackup(t *testing.T) (*world, *host, fleet.Item) {
	var backup fleet.Item
	w, b, _ := startedOver(t, func(w *world) {
		var err error
		if backup, err = w.table.Get(context.Background(), "s", "identity"); err != nil {
			t.Fatal(err)
		}
	})
	return w, b, backup
}

// A host (re)started after the identity item was restored from a backup
// taken before the start-over: Join must fail naming what to restore
// (ErrIdentityBehind), not retry for ever (its roster says generation 1,
// the item says 0, and nothing will ever change that).
func TestJoinAfterAnIdentityRestoredFromBeforeAStartOverFails(t *testing.T) {
	w, _, backup := startedOverWithBackup(t)
	restoreBackup(t, w, backup)
	c, err := fleet.New(fleet.NewFaultyTable(w.table), fleet.Config{HostID: "c", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.Join(ctx, "s")
	if err == nil {
		_ = m.Leave(context.Background())
		t.Fatal("Join succeeded: it joined the archived generation 0")
	}
	if !errors.Is(err, fleet.ErrIdentityBehind) || !strings.Contains(err.Error(), `"gen" = 1`) {
		t.Fatalf("Join = %v, want ErrIdentityBehind naming generation 1", err)
	}
}

// The same restore, then an operator's rewind: it must not be written into
// generation 0 (the archive, which no host of generation 1 reads) and
// reported done.
func TestARewindAfterAnIdentityRestoredFromBeforeAStartOverIsRefused(t *testing.T) {
	var backup fleet.Item
	w, b, _ := startedOver(t, func(w *world) {
		a := w.hosts["a"]
		if err := a.m.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
			return st.Save(ctx, "s", []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.TrimHorizon()}})
		}); err != nil {
			t.Fatal(err)
		}
		var err error
		if backup, err = w.table.Get(context.Background(), "s", "identity"); err != nil {
			t.Fatal(err)
		}
	})
	_ = b
	restoreBackup(t, w, backup)
	ctx := context.Background()
	done, err := fleet.Rewind(ctx, w.table, "s", opsRewind("r1"), map[string]scan.Position{"x": scan.AfterSequence("7")})
	if err == nil {
		t.Fatalf("Rewind wrote %v into the archived generation 0 and reported success", done)
	}
	if !errors.Is(err, fleet.ErrIdentityBehind) {
		t.Errorf("Rewind = %v, want ErrIdentityBehind", err)
	}
}

// A host of generation 1 whose Loader reads the identity after the item
// was restored from before the start-over: the error says the item went
// back and what to restore, as the rounds' does.
func TestIdentityOfALaterGenerationRestoredFromBackupNamesWhatToRestore(t *testing.T) {
	w, b, backup := startedOverWithBackup(t)
	restoreBackup(t, w, backup)
	_, err := b.m.Store().Identity(context.Background(), "s")
	if !errors.Is(err, fleet.ErrIdentityBehind) || !strings.Contains(err.Error(), `"gen" = 1`) {
		t.Fatalf("Identity = %v, want ErrIdentityBehind naming generation 1", err)
	}
}

// Two start-overs (A, B, C), then the identity item restored from a backup
// of generation 0 whose roster's start-over mark was never written (the
// start-over's mark is best effort): a host that joins must not join
// generation 0, nor start it over into generation 1, which was initialised
// on stream B: it would read stream C from B's positions.
func TestAnIdentityRestoredTwoGenerationsBackIsNotStartedOverIntoAnInitialisedGeneration(t *testing.T) {
	var backup fleet.Item
	w, b, renewed := startedOverWithBackupHook(t, &backup)
	ctx := context.Background()
	c3 := kinesisload.StreamIdentity{ARN: renewed.ARN, Created: renewed.Created.Add(time.Hour)}
	if err := b.m.Store().StartOver(ctx, "s", c3); !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Fatalf("StartOver = %v", err)
	}
	// Remove generation 0's start-over mark (as if never written).
	r, err := w.table.Get(ctx, "s", "roster")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.table.SetEntry(ctx, "s", "roster", "beats", "#gen", r.Maps["beats"]["#gen"], ""); err != nil {
		t.Fatal(err)
	}
	restoreBackup(t, w, backup)
	c, err := fleet.New(fleet.NewFaultyTable(w.table), fleet.Config{HostID: "d", ManualRounds: true, Clock: w.clock})
	if err != nil {
		t.Fatal(err)
	}
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := c.Join(jctx, "s")
	if err == nil {
		defer m.Leave(ctx)
		err = m.Store().StartOver(ctx, "s", c3)
		it, _ := w.table.Get(ctx, "s", "identity")
		if it.Field("gen") == "1" {
			t.Fatalf("the fleet was started over into generation 1, initialised on stream B, to read stream C (StartOver: %v)", err)
		}
	}
	if !errors.Is(err, fleet.ErrIdentityBehind) {
		t.Fatalf("Join/StartOver = %v, want ErrIdentityBehind", err)
	}
}

func startedOverWithBackupHook(t *testing.T, backup *fleet.Item) (*world, *host, kinesisload.StreamIdentity) {
	return startedOver(t, func(w *world) {
		var err error
		if *backup, err = w.table.Get(context.Background(), "s", "identity"); err != nil {
			t.Fatal(err)
		}
	})
}

// An operator clears the stream's own partition (generation 0's items and
// the identity item) and imports an export, while generation 1's items
// remain: Import must refuse, as its doc says for a table whose progress
// is at a later generation, rather than write an identity item of
// generation 0 that sends the fleet back to it (the hosts of generation
// 1 stop with ErrIdentityBehind; a joining host reads generation 0).
func TestImportRefusesATableWithALaterGenerationWhoseIdentityItemIsGone(t *testing.T) {
	w, _, renewed := startedOver(t)
	ctx := context.Background()
	items, err := w.table.Query(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := w.table.Delete(ctx, "s", it.Key, it.Version); err != nil {
			t.Fatal(err)
		}
	}
	err = fleet.Import(ctx, w.table, "s", renewed, []kinesisload.ShardProgress{{ShardID: "x", State: kinesisload.StateActive, Position: scan.AfterSequence("42")}})
	if err == nil {
		it, _ := w.table.Get(ctx, "s", "identity")
		t.Fatalf("Import into generation 0 beside generation 1's items succeeded; identity item now %v", it.Fields)
	}
	if !errors.Is(err, fleet.ErrNotEmpty) {
		t.Errorf("Import = %v, want ErrNotEmpty", err)
	}
}
