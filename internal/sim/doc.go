// Package sim is a seeded simulation of the whole system: real Loaders,
// on one host over a file journal or in a fleet over the fleet core's
// memory table, against the in-memory Kinesis, with a random schedule of
// the events where features meet, and oracles that read what was put and
// what was delivered afterwards. It is test-only (internal); its entry is
// TestSimulation.
//
// # Running it
//
//	go test ./internal/sim                          # the fixed budget: seeds 1..1500 (150 with -race)
//	go test ./internal/sim -sim.seeds=20000         # more seeds
//	go test ./internal/sim -sim.first=1000000 -sim.for=1h -timeout=2h
//	go test ./internal/sim -run 'TestSimulation$' -sim.seed=42 -v   # replay one seed, with its trace and logs
//	go test ./internal/sim -run 'TestSimulation$' -sim.seed=42 -sim.shrink   # shrink a failing seed's schedule
//
// A failing seed prints its spec, what the oracles found, the trace of the
// schedule as it ran, and the command that replays it. With -sim.shrink a
// replay leaves out halves, then quarters, down to single events of the
// schedule while it still fails the same way (the same oracle), and
// prints the events left and the command (-sim.keep or -sim.drop) that
// replays the smaller schedule. A schedule runs in a
// testing/synctest bubble: leases of 10 s, backoffs of 20 s and a five
// minute liveness bound cost no real time. Goroutine scheduling is Go's,
// so a replay takes the same events at the same virtual times but may
// interleave differently; it reproduces a failure in practice, not bit for
// bit. SIM_DEBUG_KEY=<item key> logs every write of that fleet table item.
//
// # The system a seed builds (plan.go)
//
// One host on a file journal (in /dev/shm when there is one), or a fleet
// of 2 to 4 hosts; 1 to 4 shards; a plain Sink (at least once) or
// sinktest.Memory (exactly once); StartPosition LATEST, TRIM_HORIZON or
// AT_TIMESTAMP; StreamRecreatedStartOver or not; polling or enhanced
// fan-out; 2 to 10,000 records per call; 40 s to 150 s of events; a lease
// of 3 s or 10 s; for a fleet, its CheckpointInterval (0, 0.3 or 0.5 of the
// lease) and its balance rule (by count, or one fleet in three by
// throughput).
//
// # The events
//
//   - puts of plain records and KPL aggregates, throughout;
//   - SplitShard, MergeShards, UpdateShardCount (up to 8 open shards);
//   - a process's start, SIGKILL (nothing it sends after the instant
//     arrives; on one host with its journal's tail torn as a power loss
//     leaves it: cut past the acknowledged bytes, or zeros from a sector
//     boundary past them), graceful stop (Close), and kill points: the n-th call of a
//     Kinesis operation, a Sink's Deliver or Checkpoints, a journal Append
//     or Snapshot, a table write or read, before or after it took effect
//     (after a Deliver: between the Sink's transaction and the commit;
//     early calls: inside the start-up);
//   - a process paused (SIGSTOP) past its lease: its calls wait, and a
//     write whose caller gave up lands when the pause ends, late;
//   - a step of a host's wall clock (up to 4 minutes either way);
//   - table faults on one host's view: outages, latency, lost answers,
//     conditions that fail on a write that landed, throttled writes,
//     failed reads;
//   - Kinesis faults for a while on an operation: throttles, 5xx,
//     connection resets, expired iterators, answers lost after the call
//     took effect, empty pages, slow answers, shard lists out of order;
//   - Sink faults: transient refusals, and answers lost after a store;
//   - deletion and re-creation of the stream (start-over schedules);
//   - configuration changes across restarts: the read mode flipped; the
//     shards selected narrowed and widened (one host, in schedules without
//     merges or re-creation, once the start-up is durable); StartPosition
//     changed (one host, schedules without re-creation);
//   - hand edits of the fleet's table: a shard item, the identity item,
//     the init item, the roster, a host's positions deleted; a lease's
//     owner changed; a host's roster entry rewritten in another form
//     that reads the same, or with a typo that makes it undecodable;
//   - an operator's rewind of every open shard or one, to TRIM_HORIZON or
//     a time: written to the fleet's table while the hosts run, or, on one
//     host, to the journal between a Close and a restart, as the tidemark
//     command does (with sinktest.Memory, a Rewinder, the Loader sets the
//     Sink's checkpoint back);
//
// What the documentation says an operator does, the operator does: restore
// an item deleted by hand from its backup when a host stops naming it,
// remove the old stream's checkpoints from a TransactionalSink when a
// start-over says so. Then every fault heals: pauses end, every host runs
// (every shard selected), and puts stop.
//
// # The oracles (ledger.go)
//
// The ledger records every put with Kinesis's acknowledgement (shard,
// sequence number, subsequence, arrival) and every record a Sink accepted,
// in order. After the schedule:
//
//   - no loss, and liveness: every required record is delivered (stored,
//     with sinktest.Memory) within 4 minutes plus 6 lease durations of the
//     healing. Required are the records of the stream's last incarnation
//     that arrived at or after the start: the Run that made the first
//     acknowledged journal write (one host; the promise of the README), or
//     for a fleet the latest Run begun before the first record was
//     delivered (the host that initialised began before it); AT_TIMESTAMP
//     and TRIM_HORIZON as configured;
//   - a rewind that landed is obeyed: every record of the shard at or
//     after its position, put before it, is delivered again after it
//     (unless the shard's item, which held the rewind, was deleted by
//     hand after it and written again by a host before the restore, or
//     not restored: a TransactionalSink's checkpoints bring it back);
//   - exactly once: sinktest.Memory stores no record twice, but once more
//     after each rewind that set the Sink's checkpoint of its shard back;
//   - order: per shard, records are stored (between the Sink's rewinds),
//     or first delivered with a plain Sink, in sequence order;
//   - planned moves deliver nothing twice (handoff.go): a lease handed
//     off on a rebalance, Close or Pause covers every record its process
//     delivered under it (a plain Sink that never failed), and the
//     shard's next lease starts no earlier, unless a kill, pause, fault,
//     clock step, hand edit, rewind or re-creation came between (or a
//     hand edit of shard items or positions came at all);
//   - parents before children: no record of a child was first delivered
//     before the last of its parents';
//   - every delivered record was put, to that shard, with that sequence
//     number; an initialisation's T0 is never after its Run began;
//   - every fleet host in a session once every record is delivered lands
//     a heartbeat within two lease durations (world.go's checkBeats);
//   - no Run stops but as documented, and every Run returns after its
//     Close or kill;
//   - no goroutine is left: the bubble ends only when every goroutine it
//     started has exited.
//
// Out of scope, on purpose: clock steps beyond scan.HostClockBound (only
// a client without Kinesis's Date reads the host's clock, and the bound
// is documented); journal damage a crash cannot cause (Open refuses it and
// names the file and offset: repair is an operator's decision).
package sim
