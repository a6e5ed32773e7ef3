// Package kinesistest provides an in-memory Kinesis for tests of code that
// reads or writes Kinesis streams, tidemark's and its users' own.
//
// [New] returns a [Fake], which implements [API] (and so
// [github.com/tidemark/tidemark/scan.Client]) with the semantics of the real
// service: MD5 partition-key routing over even hash-key ranges, sequence
// numbers that grow per shard, the five shard iterator types, iterators that
// expire after five minutes, GetRecords pages with MillisBehindLatest and,
// at the end of a closed shard, ChildShards and no next iterator, SplitShard
// and MergeShards with shard lineage, ListShards paging and filters,
// retention, and the per-shard throughput limits. Errors are the SDK's typed
// errors (*types.ResourceNotFoundException,
// *types.ProvisionedThroughputExceededException, ...), with messages worded
// like the service's.
//
// Time comes from a [Clock]; a [ManualClock] makes expiry, retention and
// throttling deterministic. [Fake.Inject] fails, delays or blocks chosen
// calls so that races can be replayed exactly, and [Fake.Stats] reports what
// each shard served.
//
// Where the emulators depart from Kinesis, the fake follows Kinesis: a
// closed shard's EndingSequenceNumber is a sequence number above its
// records; ListShards with ShardFilter AT_TRIM_HORIZON lists only the
// shards open at the trim horizon; a sequence number that is not of this
// shard is refused with *types.InvalidArgumentException; throughput limits
// are enforced (switch them off with [WithoutLimits]). Unlike Kinesis,
// streams are ACTIVE at once, never CREATING or UPDATING. Enhanced fan-out
// is modelled (RegisterStreamConsumer, SubscribeToShard and its event
// stream; see [Fake]). Not modelled: encryption, tags, ListStreams and
// DescribeStream, on-demand capacity, and the control-plane rate limits.
//
// The fake starts a goroutine per fan-out subscription (it ends with the
// subscription), and none otherwise. Every method is safe for concurrent
// use. A program (not a test) makes a stream with CreateStream and
// [WaitActive]; [NewStream] is the shorthand for tests.
package kinesistest
