package dynamo

import (
	"context"
	"sync/atomic"
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
	m := joinInitialised(t, h, 1)
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

// endsAfterCheck is a context that ends right after its first check: the
// Loader stopping while Acquire runs.
type endsAfterCheck struct {
	context.Context
	checks atomic.Int32
	done   chan struct{}
}

func (c *endsAfterCheck) Err() error {
	if c.checks.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

func (c *endsAfterCheck) Done() <-chan struct{} {
	if c.checks.Load() == 0 {
		return nil
	}
	return c.done
}

// Acquire gives up a lease granted for a shard the Loader no longer
// offers, even when its context ends during the call (the Loader
// stopping): the shard is free at once, not this host's until the lease
// expires. (Before, the Release failed on the ended context and the lease
// was forgotten, so Leave did not release it either.)
func TestAcquireReleasesADroppedLeaseWhileStopping(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	m := joinInitialised(t, h, 2)
	both := []string{"shard-0", "shard-1"}
	if _, err := m.Acquire(ctx, both); err != nil {
		t.Fatal(err)
	}
	_, renew := h.Timing()
	h.Advance(renew) // the round takes both; Acquire has not handed them out
	ls, err := m.Acquire(&endsAfterCheck{Context: ctx, done: closedChan()}, []string{"shard-0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Shard() != "shard-0" {
		t.Fatalf("Acquire = %v, want shard-0 alone", ls)
	}
	info, err := h.host("a").c.Inspect(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if sh := info.Shards["shard-1"]; sh.Epoch != 1 || sh.Owner != "" {
		t.Errorf("shard-1 owned by %q at epoch %d after Acquire dropped it, want free at epoch 1", sh.Owner, sh.Epoch)
	}
	if err := m.Leave(ctx); err != nil {
		t.Errorf("Leave = %v", err)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// A lease the Loader releases is not taken back by the same host's next
// rounds on the strength of the Loader's earlier offer: the shard stays
// free for another host until the Loader offers it again (taking it back
// bumped the epoch on every Close and kept the shard from the host it was
// handed to until Leave).
func TestReleasedLeaseNotTakenBackUntilOfferedAgain(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	m := joinInitialised(t, h, 1)
	_, renew := h.Timing()
	var l kinesisload.Lease
	for range 10 {
		ls, err := m.Acquire(ctx, []string{"shard-0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			l = ls[0]
			break
		}
		h.Advance(renew)
	}
	if l == nil {
		t.Fatal("shard-0 never granted")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h.Advance(5 * renew)
	info, err := h.host("a").c.Inspect(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if sh := info.Shards["shard-0"]; sh.Owner != "" {
		t.Fatalf("after Release and rounds with no new offer, shard-0 is owned by %q at epoch %d (was %d); want free", sh.Owner, sh.Epoch, l.Epoch())
	}
}
