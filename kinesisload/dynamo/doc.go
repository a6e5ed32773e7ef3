// Package dynamo is the DynamoDB [kinesisload.Coordinator]: it lets the
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
// DynamoDB client. It uses single-item conditional writes only (PutItem,
// UpdateItem and DeleteItem with a ConditionExpression; GetItem and Query with
// consistent reads): no transactions, no TTL, and no server clock, so it
// runs on every DynamoDB implementation (dynalite in its tests).
//
// # The table
//
// One table per application (Config.Table), shared by every host and
// every stream the application loads. Its key is the partition key
// "stream" (S, the stream name) and the sort key "item" (S), so one Query
// reads a stream's whole state (of one generation, see "Start-over").
// With Config.CreateTable, a missing table
// is created with on-demand (PAY_PER_REQUEST) billing and waited for until
// ACTIVE; without it, a missing table is a [*TableError] wrapping
// [ErrTableMissing] that names the table and dynamodb:CreateTable. The
// items of a stream:
//
//   - "shard#<shard ID>", one per shard: "owner" (the host holding its
//     lease; absent when free), "epoch" (the fencing token, +1 on every
//     owner change), "ver" (the item's write count: every write is
//     conditional on it), "prog" (the committed progress: state,
//     position, parents, as JSON), "pend" (positions saved by
//     initialisations, by batch token; only the committed batch's count)
//     and "handoff" (the host that asked for the shard).
//   - "init": the initialisation lock ("lockOwner", "lockToken", "ver"),
//     its commit ("committed", the token of the visible batch) and T0
//     ("t0", RFC 3339: the start time LATEST is resolved at, saved by the
//     first lock holder and kept by every later one).
//   - "identity": the stream's ARN and creation time ("arn", "created"),
//     the generation in force ("gen", absent for 0) and the generations
//     archived by start-overs ("archived", JSON: each one's number, stream
//     and the stream that replaced it). It is always in the partition of
//     the stream's name.
//   - "host#<host ID>", one per host: its heartbeat "counter" and "left".
//     The item of a host that left, or whose counter stood still for 3
//     lease durations, and that owns nothing, is deleted (on condition
//     that the counter has not moved), so that hosts with fresh IDs
//     (stateless containers) do not pile up; a host that comes back
//     writes its item afresh.
//
// # IAM permissions
//
// On the table: dynamodb:DescribeTable, dynamodb:GetItem,
// dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem (heartbeat
// items of departed hosts only) and dynamodb:Query; and
// dynamodb:CreateTable only with Config.CreateTable. A refused call is a
// [*TableError] wrapping [ErrAccessDenied] that names the permission.
// Such an error, or an item that cannot be decoded ([ErrBadItem], naming
// the shard and the attribute), met by a background round as well as by a
// call of the Loader's, ends the host's session: the Loader's Run stops
// with it rather than leaving a host that silently reads nothing.
//
// # The protocol
//
// Heartbeats. Each host increments its own counter once per
// RenewInterval, on condition that the counter is the one it last wrote:
// one write per host per interval, however many shards it holds. The
// heartbeat runs on a goroutine of its own, which no Sink, Kinesis call or
// commit can block. An observer takes a host for dead when the host's
// counter has not moved for LeaseDuration on the observer's own monotonic
// clock: clocks of different hosts are never compared, so skew changes no
// decision.
//
// Self-fencing. A host fences itself (every Lease.Lost is closed and it
// commits nothing more) once LeaseDuration-FenceMargin has passed since
// the start of its last heartbeat that landed, and a heartbeat call never
// outlives that moment. Why that is before any other host takes its
// leases: a heartbeat that started at B and landed was read by an
// observer no earlier than B, so the observer sees the counter stop no
// earlier than B and takes the host for dead no earlier than
// B+LeaseDuration, FenceMargin after the host stopped (clock rates, not
// readings, are assumed alike).
//
// Leases. Taking a shard writes owner = me and epoch+1 on condition that
// the item is unchanged since it was read. Every commit is conditional on
// owner = me and epoch = mine (and the item's version): a commit refused
// because another host owns the shard loses the lease
// ([kinesisload.LeaseLostError]) and the shard stops on this host. Every
// write whose answer was lost (a timeout, a dropped connection) or whose
// condition failed is read back to learn whether it landed: a heartbeat
// by its counter, a take by owner and epoch, a commit by whether the
// stored progress already holds it (commits merge monotonically, so
// applying one twice changes nothing). Throttling, 5xx and timeouts are
// retried without limit, within the fence.
//
// Initialisation. A host wins the init item's lock by a conditional write
// of a fresh token (a lock held by a host alive in its view is waited
// for), saves the resolved batch as pending positions under that token,
// and then writes the commit naming the token, on condition that the lock
// is still its own. Positions are visible only through the commit: a host
// that dies half-way leaves nothing visible, and the next winner starts
// from scratch. No host reads a shard before the commit exists. Before it
// resolves anything, the holder saves T0 into the init item (the lock's
// store is a [kinesisload.StartStore]; the write is conditional on its
// token, and taking the lock keeps the item's t0): a host that takes the
// initialisation over from one that died resolves LATEST at the first
// T0, so the records that arrived between the two start-ups are
// delivered.
//
// Balance. Each round a host reads the stream's items (one Query),
// computes its fair share by count (the leasable shards over the live
// hosts, rounded up), takes free shards first (unowned, of dead hosts, or
// reserved for it by a handoff) and, when nothing was free, asks the most
// loaded host holding at least two more than itself for one shard (one
// steal at a time). The owner answers the request as a planned move:
// Lease.Handoff is closed, the Loader finishes and commits its batch in
// flight and releases, which keeps the request as the asker's
// reservation, so a planned move delivers nothing twice. A shard is
// granted only while every parent in the table is COMPLETED, whichever
// host held it.
//
// Start-over. With [kinesisload.StreamRecreatedStartOver], the first host
// that meets a stream re-created under the name moves the whole fleet to
// a new generation of the stream's progress. Generation N's items (shard,
// init and heartbeat items) have the partition key "<stream>#genN"
// ('#' is in no stream name; generation 0 keeps the stream's name, as
// before start-overs existed). The start-over is one conditional PutItem
// of the identity item, from (the stored identity, N) to (the new
// identity, N+1), appending N to "archived": of hosts starting over at
// once, one wins and the others read the new generation and do nothing,
// and a host that dies before or after that write leaves the fleet in one
// generation or the other. A Coordinator's session belongs to the
// generation it joined: its rounds read the identity item (part of
// generation 0's Query; one GetItem more per round in a later
// generation), and once it names a later generation the session is void:
// every lease is lost ([kinesisload.LostStartedOver]) and Acquire,
// Initialise and the store's Identity return an error wrapping a
// [*kinesisload.StreamMismatchError], on which the Loader joins again.
// Nothing else fences the old generation's items, so a round whose Query
// fails still reads the identity item, and a host whose rounds fail to
// read it for LeaseDuration-FenceMargin loses its leases (self-fenced, as
// a host whose heartbeat does not land) until a round reads it again.
// The new generation's partition is empty: it is initialised through its
// own init item exactly as a first run, so LATEST is resolved once for
// the fleet on the new stream and is durable before any host reads it,
// and no position of the old stream can reach it. Its epochs start above
// N<<32, so that a lease's epoch grows across the start-over too (a
// TransactionalSink fencing by it refuses the old generation's late
// batches). A commit of the old
// generation that races with the start-over lands in the old partition,
// the archive, which is never deleted ([Coordinator.Inspect] shows it).
// A start-over to a stream created no later than the one in force is
// refused (a host with an older view of the stream cannot move the fleet
// back).
//
// # Cost
//
// Coordination writes grow with hosts, not shards: one heartbeat per host
// per RenewInterval, plus a write per lease move. Positions are written
// per commit, or at most once per Config.CheckpointInterval per shard when
// it is set: the bound on what a crash re-delivers (see there).
package dynamo
