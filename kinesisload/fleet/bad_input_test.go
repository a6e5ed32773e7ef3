package fleet_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// '#' is the table's separator (a generation's partition is
// "<stream>#gen<N>", a host's positions "<part>#pos#<host>") and in no
// Kinesis stream name. Join of a name holding it must be refused, naming
// the stream, before it writes anything: else it writes its roster entry
// into the partition of another stream's generation.
func TestJoinRefusesASeparatorInTheStreamName(t *testing.T) {
	ctx := context.Background()
	table := fleet.NewMemoryTable()
	c, err := fleet.New(table, fleet.Config{HostID: "a", ManualRounds: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Join(ctx, "orders#gen1")
	if err == nil {
		defer m.Leave(ctx)
		items, _ := table.Query(ctx, "orders#gen1")
		for _, it := range items {
			t.Logf("written: %s/%s", it.Partition, it.Key)
		}
		t.Fatalf("Join(%q) = nil error; it wrote %d items into the partition of stream orders' generation 1", "orders#gen1", len(items))
	}
	if !strings.Contains(err.Error(), "orders#gen1") {
		t.Fatalf("Join error %v does not name the stream", err)
	}
}

// A LeaseDuration under 10 ns makes the default RenewInterval (a tenth of
// it) zero; New takes it, and Join's heartbeat loop then panics in
// time.NewTicker, in a goroutine of its own (the process dies).
func TestATinyLeaseDurationIsRefused(t *testing.T) {
	for _, d := range []time.Duration{3, 5, 9} {
		cfg, err := fleet.Config{HostID: "a", LeaseDuration: d}.WithDefaults()
		if err == nil {
			t.Errorf("LeaseDuration %v: WithDefaults = nil error, RenewInterval = %v, CallTimeout = %v", d, cfg.RenewInterval, cfg.CallTimeout)
		}
	}
}
