package dynamo

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// startedOverUnder has host b start the fleet over (from oldID to newID)
// while host a holds 2 shards of the old generation and a's reads fail
// with ops (its heartbeats land); it returns a's leases after 3 lease
// durations.
func startedOverUnder(t *testing.T, ops string) map[string]kinesisload.Lease {
	t.Helper()
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ctx := context.Background()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oldID := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:1:stream/s", Created: created}
	newID := kinesisload.StreamIdentity{ARN: oldID.ARN, Created: created.Add(time.Hour)}
	ho := holdAll(t, h, 2)
	if err := ho.m.Store().SetIdentity(ctx, "s", oldID); err != nil {
		t.Fatal(err)
	}
	b, err := h.Host("b").Join(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Leave(context.Background()) })
	h.host("a").faults.set(func(f *faults) {
		f.failStatus, f.failCode, f.failOp = 400, "ProvisionedThroughputExceededException", ops
	})
	if err := b.Store().StartOver(ctx, "s", newID); !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Fatalf("b: StartOver = %v, want the mismatch that ends its session", err)
	}
	lease, _ := h.Timing()
	h.Advance(3 * lease)
	return ho.leases
}

// A host of the old generation whose Query fails (throttled) while its
// heartbeats land still learns of the start-over from the identity item:
// its leases are lost as started over, and nothing more is committed
// under them.
func TestStartOverVoidsOldLeasesWhenTheQueryFails(t *testing.T) {
	for id, l := range startedOverUnder(t, "Query") {
		var why *kinesisload.LeaseLostError
		select {
		case <-l.Lost():
			if !errors.As(l.Err(), &why) || why.Why != kinesisload.LostStartedOver {
				t.Errorf("%s: the old generation's lease lost with %v, want Why %v", id, l.Err(), kinesisload.LostStartedOver)
			}
		default:
			t.Errorf("%s: the old generation's lease is still held 3 lease durations after the fleet started over", id)
		}
		if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence("900")}); !errors.Is(err, kinesisload.ErrLeaseLost) {
			t.Errorf("%s: a commit of the old generation after the start-over = %v, want ErrLeaseLost", id, err)
		}
	}
}

// A host that cannot read the stream's generation at all (Query and
// GetItem fail; its heartbeats land) cannot know whether the fleet
// started over: it keeps its leases no longer than LeaseDuration -
// FenceMargin, as a host that cannot renew, instead of reading and
// committing under a void generation for as long as the failure lasts.
func TestOldGenerationLeasesEndWhenTheGenerationIsUnreadable(t *testing.T) {
	for id, l := range startedOverUnder(t, "Query,GetItem") {
		select {
		case <-l.Lost():
		default:
			t.Errorf("%s: the lease is still held 3 lease durations after the fleet started over, its host unable to read the generation", id)
		}
		if err := l.Commit(context.Background(), kinesisload.ShardProgress{ShardID: id, Position: scan.AfterSequence("900")}); !errors.Is(err, kinesisload.ErrLeaseLost) {
			t.Errorf("%s: a commit of the old generation after the start-over = %v, want ErrLeaseLost", id, err)
		}
	}
}

// A round or two that cannot read the identity item (a short throttle)
// costs no lease: only failures lasting LeaseDuration-FenceMargin do.
func TestGenerationUnreadBrieflyKeepsLeases(t *testing.T) {
	e := emulator.Start(t, emulator.Dynalite)
	h := newHarness(t, e.Endpoint)
	ho := holdAll(t, h, 2)
	lease, renew := h.Timing()
	h.host("a").faults.set(func(f *faults) {
		f.failStatus, f.failCode, f.failOp = 400, "ProvisionedThroughputExceededException", "Query,GetItem"
	})
	h.Advance(2 * renew)
	h.host("a").faults.set(func(f *faults) { f.failStatus, f.failOp = 0, "" })
	h.Advance(2 * lease)
	for id, l := range ho.leases {
		select {
		case <-l.Lost():
			t.Errorf("%s: lost after %v of failed reads: %v", id, 2*renew, l.Err())
		default:
		}
	}
}
