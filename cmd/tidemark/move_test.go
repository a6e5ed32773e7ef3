package main

import (
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

// From one host to a fleet and back, with export and import: a fleet
// started on the table imported from a journal delivers exactly what
// arrived after the journal's positions, and a Loader on a journal
// imported from the fleet's table exactly what arrived after the fleet's.
func TestMoveFromOneHostToAFleetAndBackLosesAndRepeatsNothing(t *testing.T) {
	kin := emulator.Start(t, emulator.KinesisLocal)
	dyn := emulator.Start(t, emulator.Dynalite)
	kc := kin.Client
	newStream(t, kc, "move", 2)
	putN(t, kc, "move", lowKey, "one-low", 3)
	putN(t, kc, "move", highKey, "one-high", 2)
	tmp := t.TempDir()
	dir, file := filepath.Join(tmp, "journal"), filepath.Join(tmp, "from-journal.json")

	one := &recorder{}
	ld := startLoader(t, kinesisload.Config{Stream: "move", Dir: dir, Sink: one, StartPosition: scan.TrimHorizon()}, kinesisload.WithClient(kc))
	one.waitFor(t, 20*time.Second, "one-low-3", "one-high-2")
	ld.stop(t)

	if code, _, _ := tidemark(t, "export", "--dir", dir, "--out", file); code != cli.ExitOK {
		t.Fatal("export of the journal failed")
	}
	if code, out, _ := tidemark(t, "import", "--table", "fleet", "--endpoint", dyn.Endpoint, "--create-table", file); code != cli.ExitOK || !strings.Contains(out, "imported 2 shard(s)") {
		t.Fatalf("import into the table = %d: %s", code, out)
	}
	putN(t, kc, "move", lowKey, "fleet-low", 2)
	putN(t, kc, "move", highKey, "fleet-high", 1)
	fl := &recorder{}
	hosts := []*loader{
		startLoader(t, kinesisload.Config{Stream: "move", Sink: fl}, kinesisload.WithClient(kc), kinesisload.WithCoordinator(coordinator(t, dyn.Endpoint, "fleet", "host-a", 2*time.Second))),
		startLoader(t, kinesisload.Config{Stream: "move", Sink: fl}, kinesisload.WithClient(kc), kinesisload.WithCoordinator(coordinator(t, dyn.Endpoint, "fleet", "host-b", 2*time.Second))),
	}
	got := fl.waitFor(t, 25*time.Second, "fleet-low-2", "fleet-high-1")
	if want := []string{"fleet-high-1", "fleet-low-1", "fleet-low-2"}; !slices.Equal(sorted(got), want) {
		t.Errorf("the fleet delivered %v, want exactly %v", got, want)
	}
	for _, h := range hosts {
		h.stop(t)
	}

	back, file2 := filepath.Join(tmp, "back"), filepath.Join(tmp, "from-table.json")
	if code, _, _ := tidemark(t, "export", "--table", "fleet", "--stream", "move", "--endpoint", dyn.Endpoint, "--out", file2); code != cli.ExitOK {
		t.Fatal("export of the table failed")
	}
	if code, _, _ := tidemark(t, "import", "--dir", back, file2); code != cli.ExitOK {
		t.Fatal("import into a new journal failed")
	}
	putN(t, kc, "move", lowKey, "back-low", 1)
	putN(t, kc, "move", highKey, "back-high", 1)
	again := &recorder{}
	startLoader(t, kinesisload.Config{Stream: "move", Dir: back, Sink: again}, kinesisload.WithClient(kc))
	got = again.waitFor(t, 20*time.Second, "back-low-1", "back-high-1")
	if want := []string{"back-high-1", "back-low-1"}; !slices.Equal(sorted(got), want) {
		t.Errorf("the Loader on the imported journal delivered %v, want exactly %v", got, want)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
