package coordtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// A round that read the identity item before another host started the
// fleet over and left, and its Scan after, must not take the leaving
// host's shards in the old generation: its Scan shows the host gone only
// after the move, so the round must see the move too. (Read the identity
// item after the Scan, as the DynamoDB coordinator's Query does.)
func TestRoundTakesNothingOfAGenerationStartedOverMidRound(t *testing.T) {
	f, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	oldID := kinesisload.StreamIdentity{ARN: "arn:aws:kinesis:us-east-1:1:stream/s", Created: created}
	newID := kinesisload.StreamIdentity{ARN: oldID.ARN, Created: created.Add(time.Hour)}
	ids := []string{"shard-0", "shard-1"}
	join := func(host string) kinesisload.Membership {
		m, err := f.Host(host).Join(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	b, c := join("b"), join("c")
	bLeft := false
	t.Cleanup(func() {
		if !bLeft {
			_ = b.Leave(context.Background())
		}
		_ = c.Leave(context.Background())
	})
	if err := b.Initialise(ctx, func(ctx context.Context, st kinesisload.PositionStore) error {
		if err := st.SetIdentity(ctx, "s", oldID); err != nil {
			return err
		}
		var ups []kinesisload.ShardProgress
		for _, id := range ids {
			ups = append(ups, kinesisload.ShardProgress{ShardID: id, State: kinesisload.StateActive, Position: scan.TrimHorizon()})
		}
		return st.Save(ctx, "s", ups)
	}); err != nil {
		t.Fatal(err)
	}
	held := map[string]int{}
	for range 10 {
		f.Advance(f.cfg.RenewInterval)
		for host, m := range map[string]kinesisload.Membership{"b": b, "c": c} {
			ls, err := m.Acquire(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			held[host] += len(ls)
		}
	}
	if held["b"] != 1 || held["c"] != 1 {
		t.Fatalf("b and c hold %v, want one shard each", held)
	}
	var once sync.Once
	f.mu.Lock()
	f.betweenReads = func(host string) {
		if host != "c" {
			return
		}
		once.Do(func() {
			if err := b.Store().StartOver(ctx, "s", newID); !errors.Is(err, kinesisload.ErrStreamMismatch) {
				t.Errorf("b: StartOver = %v, want the mismatch that ends its session", err)
			}
			_ = b.Leave(ctx)
			bLeft = true
		})
	}
	f.mu.Unlock()
	f.Advance(f.cfg.RenewInterval)
	ls, err := c.Acquire(ctx, ids)
	for _, l := range ls {
		t.Errorf("c was granted %s in the generation the fleet left, after b started it over and left", l.Shard())
	}
	if !errors.Is(err, kinesisload.ErrStreamMismatch) {
		t.Errorf("c: Acquire after the start-over = %v, want an error wrapping ErrStreamMismatch", err)
	}
}
