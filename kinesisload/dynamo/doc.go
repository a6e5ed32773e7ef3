// Package dynamo is the DynamoDB table of the fleet protocol: it lets the
// Loaders of many hosts share the shards of a Kinesis stream, with the
// guarantee of one Loader fleet-wide.
//
// Each host makes one [Coordinator] with [New] over a *dynamodb.Client and
// gives it to its Loader with [kinesisload.WithCoordinator]:
//
//	c, err := dynamo.New(dynamodb.NewFromConfig(awsCfg), dynamo.Config{Table: "orders-loader"})
//	...
//	l, err := kinesisload.New(cfg, kinesisload.WithCoordinator(c))
//
// It is a module of its own, so that the core does not depend on the
// DynamoDB client. The protocol (leases, epochs, heartbeats, fencing,
// initialisation, balance, handoffs, start-overs) is package
// [github.com/tidemark/tidemark/kinesisload/fleet], the same code the
// in-memory fleet of kinesisload/coordtest runs; this package is its
// [Table] on DynamoDB, the Config, the table's creation and the errors
// that name what is missing.
//
// # The table
//
// One table per application (Config.Table), shared by every host and
// every stream the application loads. Its key is the partition key
// "stream" (S) and the sort key "item" (S). With Config.CreateTable, a
// missing table is created with on-demand (PAY_PER_REQUEST) billing and
// waited for until ACTIVE; without it, a missing table is a [*TableError]
// wrapping [ErrTableMissing] that names the table and dynamodb:CreateTable.
//
// A [fleet.Item] is a DynamoDB item: its partition and key in "stream" and
// "item", its version in "ver" (N; every write is conditional on it; an
// item is created at [fleet.NewVersion], not at 1, so that a write made
// from a read of a deleted item's earlier life fails), its
// fields as S attributes (the numbers earlier versions wrote as N: epoch,
// gen, rate, progress, counter), its maps as M attributes of S. Put is a
// PutItem, Delete a DeleteItem, SetEntry an UpdateItem of one map entry
// (ReturnValues ALL_NEW), each with a ConditionExpression; Get and Query
// read consistently. No transactions, no TTL, no server clock: it runs on
// every DynamoDB implementation (dynalite in its tests, which also pass
// the table conformance suite of package fleet/tabletest). An item without
// "ver", written by a version before the fleet core, is at version 1: such
// a table is read as it is (see the fleet package, "Tables of the version
// before this package").
//
// The items (see the fleet package for what they hold): per stream
// generation, in partition "<stream>" (generation 0) or
// "<stream>#genN": "roster" (every host's heartbeat, one map entry each),
// "init", and "shard#<id>" per shard; "identity" in partition "<stream>";
// and each host's positions in partition "<generation partition>#pos#<host>"
// (items "pos#0", "pos#1", ...).
//
// # IAM permissions
//
// On the table: dynamodb:DescribeTable, dynamodb:GetItem,
// dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem and
// dynamodb:Query; and dynamodb:CreateTable only with Config.CreateTable. A
// refused call is a [*TableError] wrapping [ErrAccessDenied] that names
// the permission. Such an error, or an item that cannot be decoded
// ([ErrBadItem], naming the item and the attribute), met by a background
// round as well as by a call of the Loader's, ends the host's session: the
// Loader's Run stops with it rather than leaving a host that silently
// reads nothing.
//
// # Cost
//
// Per host and RenewInterval (default 1 s): one UpdateItem of its roster
// entry (a few hundred bytes: one write unit), and when the positions of
// its shards moved, one PutItem of each chunk of up to 1,000 shards (about
// 100 bytes a shard) in a partition of its own, so that the stream's
// partition key carries only the heartbeats and the lease moves. Reads:
// none in a round when no host changed anything (the heartbeat's answer
// is the roster); after a change (a lease move, a state advanced, a shard
// added), a GetItem of each shard item the changing host's roster entry
// names, or a Query of the stream's partition when the hint does not
// cover it; a Query of the partition once per ResyncInterval (default
// 30 s) and for the Loader's listing; one Query of a dead host's
// positions when its shards are taken (docs/fleet.md, "What a round
// reads").
// BENCHMARKS.md has the figures and the model at 10,000 shards and 50
// hosts.
package dynamo
