package dynamo

import (
	"errors"

	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// The views of a stream's items, as [Coordinator.Inspect] returns them:
// see [fleet.StreamInfo].
type (
	// StreamInfo is a stream's items in the table, as one read saw
	// them.
	StreamInfo = fleet.StreamInfo
	// ShardInfo is what the table holds for one shard.
	ShardInfo = fleet.ShardInfo
	// HostInfo is a host's entry in the roster.
	HostInfo = fleet.HostInfo
	// ArchivedGeneration is a generation the fleet left when it started
	// over, with its shards as they were left.
	ArchivedGeneration = fleet.ArchivedGeneration
	// Generation is one generation of a stream's progress in the table.
	Generation = fleet.Generation
)

var errNilAPI = errors.New("dynamo: New: the DynamoDB client is nil")
