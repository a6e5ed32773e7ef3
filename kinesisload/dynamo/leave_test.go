package dynamo

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// A host leaves while its balance round is taking a shard: the take's
// write lands in the table, and its answer comes only once Leave has
// begun (Leave ends the rounds' calls), so the round cannot learn that it
// won. Leave must give the shard up all the same: after it, no shard is
// owned by the host that left. (Before, the shard stayed owned by the
// departed host, and in a fleet of one nobody freed it.)
func TestLeaveReleasesATakeInFlight(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	// The take's answer must be withheld until Leave, not until its own
	// timeout: a call that times out on its own is read back and the
	// take is known.
	h.cfg.CallTimeout = time.Minute
	ctx := context.Background()
	m, err := h.Host("a").Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	ups := []kinesisload.ShardProgress{{ShardID: "shard-0", State: kinesisload.StateActive, Position: scan.AfterSequence("100")}}
	if err := m.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error { return st.Save(ctx, "s", ups) }); err != nil {
		t.Fatal(err)
	}
	if ls, err := m.Acquire(ctx, []string{"shard-0"}); err != nil || len(ls) != 0 {
		t.Fatalf("Acquire before any round = %v, %v", ls, err)
	}
	landed := make(chan struct{}, 1)
	h.host("a").faults.set(func(f *faults) { f.holdOp, f.landed = "PutItem", landed })
	_, renew := h.Timing()
	round := make(chan struct{})
	go func() {
		defer close(round)
		h.Advance(renew) // the round takes shard-0; its answer is withheld
	}()
	select {
	case <-landed:
	case <-time.After(30 * time.Second):
		t.Fatal("the round never took shard-0")
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Leave(lctx); err != nil {
		t.Errorf("Leave = %v", err)
	}
	<-round
	info, err := h.host("a").c.Inspect(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	sh, ok := info.Shards["shard-0"]
	switch {
	case !ok:
		t.Fatal("shard-0 is not in the table")
	case sh.Epoch != 1:
		t.Fatalf("shard-0 at epoch %d, want 1: the test did not exercise a take that landed", sh.Epoch)
	case sh.Owner != "":
		t.Errorf("shard-0 still owned by %q at epoch %d after its host left", sh.Owner, sh.Epoch)
	}
	if hi := info.Hosts["a"]; !hi.Left {
		t.Errorf("host a not marked left: %+v", hi)
	}
	if !sh.Progress.Position.Equal(scan.AfterSequence("100")) {
		t.Errorf("shard-0 at %v after the release, want its position kept at 100", sh.Progress.Position)
	}
}
