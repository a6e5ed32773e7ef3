package coordtest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/coordtest"
	"github.com/tidemark/tidemark/scan"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newFleet(t *testing.T) *coordtest.Fleet {
	t.Helper()
	f, err := coordtest.New(coordtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The conformance suite on the in-memory fleet.
func TestConformanceFleet(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coordtest.Harness { return newFleet(t).Harness() })
}

// The conformance suite on the default coordinator, the single process
// over a JournalStore: the cases of one host without faults.
func TestConformanceStoreCoordinator(t *testing.T) {
	coordtest.Run(t, func(t *testing.T) coordtest.Harness {
		s, err := kinesisload.NewJournalStore(context.Background(), journal.NewMemory(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return coordtest.Single(kinesisload.NewStoreCoordinator(s))
	})
}

func TestConfigRefusesAFenceMarginWithinOneRound(t *testing.T) {
	_, err := coordtest.New(coordtest.Config{LeaseDuration: 10 * time.Second, RenewInterval: 4 * time.Second, FenceMargin: 3 * time.Second})
	if err == nil {
		t.Fatal("New accepted a fence margin shorter than a renew interval")
	}
}

func join(t *testing.T, f *coordtest.Fleet, host string) kinesisload.Membership {
	t.Helper()
	m, err := f.Host(host).Join(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Leave(context.Background()) })
	return m
}

// Coordination writes grow with hosts, not shards: once balanced, each
// host writes one heartbeat per round whatever the number of shards.
func TestCostIsOneHeartbeatPerHostPerRound(t *testing.T) {
	for _, shards := range []int{4, 400} {
		f := newFleet(t)
		hosts := []string{"a", "b", "c"}
		var ms []kinesisload.Membership
		for _, h := range hosts {
			ms = append(ms, join(t, f, h))
		}
		var ups []kinesisload.ShardProgress
		var ids []string
		for i := range shards {
			id := "shard-" + string(rune('A'+i%26)) + string(rune('a'+i/26%26)) + string(rune('0'+i/676))
			ids = append(ids, id)
			ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
		}
		if err := ms[0].Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
			return st.Save(ctx, "s", ups)
		}); err != nil {
			t.Fatal(err)
		}
		_, renew := f.Timing()
		var held []kinesisload.Lease
		for range 60 {
			f.Advance(renew)
			for _, m := range ms {
				ls, err := m.Acquire(context.Background(), ids)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, ls...)
			}
			for _, l := range held { // answer handoffs, as the Loader does
				select {
				case <-l.Handoff():
					_ = l.Release(context.Background())
				default:
				}
			}
		}
		before := map[string]int{}
		for _, h := range hosts {
			before[h] = f.Writes(h)
		}
		const rounds = 20
		for range rounds {
			f.Advance(renew)
		}
		for _, h := range hosts {
			if got := f.Writes(h) - before[h]; got != rounds {
				t.Errorf("%d shards: host %s wrote %d times in %d rounds, want one heartbeat per round", shards, h, got, rounds)
			}
		}
	}
}

// The fleet decides readiness by the shared table, not by the host's
// offer: a host whose view is stale (it offers a child whose parent is
// still being read elsewhere) is not granted the child.
func TestChildNotGrantedOnAStaleOffer(t *testing.T) {
	f := newFleet(t)
	a := join(t, f, "a")
	if err := a.Initialise(context.Background(), func(ctx context.Context, st kinesisload.PositionStore) error {
		return st.Save(ctx, "s", []kinesisload.ShardProgress{
			{ShardID: "parent", State: kinesisload.StateActive, Position: scan.TrimHorizon()},
			{ShardID: "child", Parents: []string{"parent"}, State: kinesisload.StateActive, Position: scan.TrimHorizon()},
		})
	}); err != nil {
		t.Fatal(err)
	}
	_, renew := f.Timing()
	var held []kinesisload.Lease
	for range 20 {
		f.Advance(renew)
		ls, err := a.Acquire(context.Background(), []string{"parent", "child"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ls...)
	}
	if len(held) != 1 || held[0].Shard() != "parent" {
		var got []string
		for _, l := range held {
			got = append(got, l.Shard())
		}
		t.Fatalf("granted %v, want only the parent", got)
	}
	if err := held[0].Commit(context.Background(), kinesisload.ShardProgress{ShardID: "parent", State: kinesisload.StateCompleted, Position: scan.ShardEnd()}); err != nil {
		t.Fatal(err)
	}
	f.Advance(renew)
	ls, err := a.Acquire(context.Background(), []string{"child"})
	if err != nil || len(ls) != 1 {
		t.Fatalf("after the parent completed: %d leases, %v; want the child", len(ls), err)
	}
}
