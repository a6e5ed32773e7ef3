package dynamo

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// ShardInfo is what the table holds for one shard.
type ShardInfo struct {
	// Owner is the host holding the shard's lease; empty when free.
	Owner string
	// Epoch is the fencing token of the last owner change.
	Epoch uint64
	// HandoffTo is the host that asked for the shard, if any.
	HandoffTo string
	// Progress is the shard's progress as every host sees it.
	Progress kinesisload.ShardProgress
}

// HostInfo is a host's heartbeat item.
type HostInfo struct {
	// Counter is the heartbeat counter; it moves once per RenewInterval
	// while the host is alive.
	Counter uint64
	// Left is true once the host left the stream (Membership.Leave).
	Left bool
}

// StreamInfo is a stream's items in the table, as one read saw them.
type StreamInfo struct {
	// Shards is keyed by shard ID.
	Shards map[string]ShardInfo
	// Hosts is keyed by host ID.
	Hosts map[string]HostInfo
	// Identity is the stored stream identity (zero when none).
	Identity kinesisload.StreamIdentity
	// Initialised is true once the fleet's initialisation is committed.
	Initialised bool
	// InitLockOwner is the host that holds (or last held) the
	// initialisation lock.
	InitLockOwner string
	// StartTime is T0, the time on Kinesis's clock LATEST is resolved
	// at, as the first holder of the initialisation lock saved it (zero
	// when none was saved: no LATEST to resolve).
	StartTime time.Time
}

// Inspect reads stream's items (one consistent Query) for tools and tests:
// owners, epochs, positions, lineage and heartbeats. It does not join the
// fleet and writes nothing. Whether a host is alive is not in the table:
// watch its Counter move.
func (c *Coordinator) Inspect(ctx context.Context, stream string) (StreamInfo, error) {
	if err := c.ensureTable(ctx); err != nil {
		return StreamInfo{}, err
	}
	snap, err := c.query(ctx, stream)
	if err != nil {
		if classify(err) == classFatal {
			return StreamInfo{}, c.fatal("Query", err)
		}
		return StreamInfo{}, fmt.Errorf("dynamo: table %s: stream %s: Query: %w", c.cfg.Table, stream, err)
	}
	out := StreamInfo{Shards: map[string]ShardInfo{}, Hosts: map[string]HostInfo{}, Identity: snap.identity,
		Initialised: snap.init.committed != "", InitLockOwner: snap.init.lockOwner, StartTime: snap.init.t0}
	for id, it := range snap.shards {
		p := it.visible(snap.init.committed)
		if p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0 && it.owner == "" {
			continue // pending only: invisible
		}
		out.Shards[id] = ShardInfo{Owner: it.owner, Epoch: it.epoch, HandoffTo: it.handoff, Progress: p}
	}
	for id, hb := range snap.hearts {
		out.Hosts[id] = HostInfo{Counter: hb.counter, Left: hb.left}
	}
	return out, nil
}
