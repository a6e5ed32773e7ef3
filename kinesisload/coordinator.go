package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// This file is the coordination seam: what the Loader asks of the hosts
// that share a stream (the life of a shard on this host is decided in
// session.go and consume.go). The Loader asks a [Coordinator] three things:
//
//   - who initialises the stream (Membership.Initialise: once for the
//     whole fleet, durable and visible before any host reads any shard);
//   - which shards this host may read (Membership.Acquire hands out a
//     [Lease] per shard; Lease.Lost and Lease.Handoff take it back);
//   - whether a position may be committed (Lease.Commit, fenced by the
//     lease's owner and epoch).
//
// The default, [NewStoreCoordinator], is the single process of before the
// seam existed: its PositionStore is the truth, it grants every shard the
// Loader finds ready, and it never takes a lease back. The fleet protocol
// (package kinesisload/fleet, on a table: in memory for tests through
// package coordtest, DynamoDB in module kinesisload/dynamo) shares the
// stream between hosts.

// Coordinator decides, for the Loaders of one application, which host
// reads which shard of a stream. Give one to a Loader with
// [WithCoordinator]; each Loader (host) has its own, and the Coordinators
// of one fleet share a table. A Coordinator must be safe for concurrent
// use.
type Coordinator interface {
	// Join starts one session of this host on stream: the host is a
	// member of the stream's fleet (for a fleet: it heartbeats, and
	// counts in the fair share) until Membership.Leave. The Loader joins
	// at the start of every session of Run (the first, and after each
	// Resume) and leaves at its end. Join does not wait for the fleet's
	// initialisation; an error is returned by Run.
	Join(ctx context.Context, stream string) (Membership, error)
}

// InitFunc is the Loader's initialisation of a stream: it loads the stored
// progress from store, resolves every LATEST and saves the batch to store.
// It is given to [Membership.Initialise].
type InitFunc func(ctx context.Context, store PositionStore) error

// Membership is one session of a host in a stream's fleet, from
// [Coordinator.Join] to [Membership.Leave]. Its methods are called by one
// Loader session; Acquire, Leave and the methods of its leases may be
// called concurrently.
type Membership interface {
	// Store returns the stream's shared progress: lineage, states and
	// committed positions of every shard, as every host sees it once the
	// fleet is initialised. The Loader saves through it only what any
	// host may save at any time, as idempotent merges that never move a
	// shard back (see [PositionStore.Save]): new shards with their parents
	// and start positions, the DISCOVERED, PENDING_PARENT and ACTIVE
	// states, and a [TransactionalSink]'s checkpoints found at start. The
	// positions a reading host reaches, and the DRAINING and COMPLETED
	// states, go through [Lease.Commit] instead. Load may return changes
	// made by other hosts.
	//
	// A membership belongs to the generation of the stream's progress in
	// force when it joined. StartOver (of Store, or of the store
	// Initialise gives) is a fleet-wide start-over on a stream re-created
	// under the name ([StreamRecreatedStartOver]): atomically, the stored
	// identity becomes id and the stream's progress an empty new
	// generation; the old generation's progress is kept, never deleted
	// (the archive), and nothing of it is ever applied to the new one.
	// Whichever host's StartOver moved the fleet, the membership's
	// generation is over: StartOver returns an error wrapping a
	// [*StreamMismatchError] (Current is the new identity) rather than
	// nil, and every lease of the membership is lost ([LostStartedOver];
	// its commits are refused). So are the leases of every other host's
	// membership of the old generation once its coordinator sees the move
	// (within a renew interval; a coordinator that cannot read the
	// generation in force for longer gives its leases up as self-fenced
	// within the lease duration), whose Acquire, Initialise and Store's
	// Identity then return such an error too. The Loader ends the session
	// on it and joins again: a membership joined after the move belongs
	// to the new generation, and its Initialise initialises the new
	// stream through the fleet's lock, exactly as a first run. StartOver
	// does nothing when id is the identity in force, and refuses, with an
	// error that is not a mismatch, an id created no later than the
	// stored one: a host whose view of the stream is older than the
	// fleet's must not move it back. The default coordinator's Store is
	// its PositionStore, whose StartOver archives in place and returns
	// nil.
	Store() PositionStore

	// Initialise gates the fleet's initialisation of the stream. It
	// calls init exactly once when it returns nil, and returns init's
	// error otherwise; the store init is given is the only one it may use.
	//
	// The first time the fleet initialises the stream, exactly one host
	// (the one that wins the initialisation lock) calls init with a
	// staging store: its Load returns what the fleet has committed
	// (nothing, the first time), and what it saves becomes visible to
	// every host all at once, when Initialise commits it after init
	// returned nil. Nothing saved by an init that failed, was cancelled
	// or whose host died is ever visible; another host initialises
	// instead, from scratch; the staging store should be a [StartStore]
	// whose T0 outlives the host that saved it, so that the host that
	// takes over resolves LATEST at the first T0 (coordtest's conformance
	// suite checks it). Every other host waits until that commit is
	// visible, then calls init with [Membership.Store], whose Load then
	// returns the committed batch (there is nothing left to resolve).
	// Later sessions call init with Store at once.
	//
	// When Initialise returns nil, the batch is durable and visible to
	// every host. It returns ctx.Err() if ctx ends first, and a
	// [*LeaseLostError] if this host lost the lock before its commit
	// (its batch is then not visible, and the Loader starts over).
	Initialise(ctx context.Context, init InitFunc) error

	// Acquire tells the coordinator which shards are ready to be read in
	// the Loader's view (ACTIVE or DRAINING, every tracked parent
	// COMPLETED; ready replaces the previous call's set) and returns the
	// leases this host was granted since the last call, at most one per
	// shard, each for a shard of ready. It does not block on other hosts:
	// a fleet coordinator takes leases on its own goroutine and hands them
	// out here. A shard is granted only while every parent of it known to
	// the fleet is COMPLETED in the shared progress, whichever host held
	// the parents. A shard is held by at most one lease of the fleet at a
	// time whose epoch is current; holding is ended by Release, or by the
	// lease being lost.
	Acquire(ctx context.Context, ready []string) ([]Lease, error)

	// Wake returns a channel that receives a value when Acquire may have
	// new leases, or when the shared progress changed in a way the Loader
	// should see (a parent COMPLETED by another host): the Loader then
	// reloads Store and calls Acquire. A nil channel (the default
	// coordinator's) means never.
	Wake() <-chan struct{}

	// Leave ends the session: every lease still held is released (as
	// [Lease.Release]; the Loader has stopped reading and committed its
	// in-flight batches before it calls Leave) and the host stops counting
	// in the fleet, so that its shards move at once, not after the lease
	// duration (those whose release failed do wait for it). It is called once, with a context of its own even after a
	// hard stop. After Leave, the leases of this membership are lost.
	Leave(ctx context.Context) error
}

// InitProgresser is an optional capability of the store that
// [Membership.Initialise] gives an [InitFunc]: the Loader calls
// InitProgress whenever its initialisation makes progress (a shard
// resolved, a call retried, a start batch stored), so that a fleet
// coordinator can tell a holder of the initialisation lock that works from
// one that is stuck (the fleet core takes the lock from a holder whose
// progress stands still for its InitStallTimeout). It must be fast and
// safe for concurrent use.
type InitProgresser interface {
	InitProgress()
}

// initProgress tells the store of an initialisation that it made
// progress, when it listens.
func initProgress(store PositionStore) {
	if p, ok := store.(InitProgresser); ok {
		p.InitProgress()
	}
}

// StartedStore is implemented by a [PositionStore] that knows whether a
// stream's start-up was published before: a fleet's store, once the
// fleet's initialisation committed. A session on a started stream never
// takes it for a first run, even when no shard it tracks has progress
// (their items deleted by hand, or a reshard's children not saved yet): a
// shard with no progress then starts at TRIM_HORIZON, as one born later,
// and no LATEST is resolved at a new T0, which would skip what arrived
// since the start-up. (A shard Config.Shards selects keeps its own start.)
type StartedStore interface {
	// Started reports whether stream's start-up was published.
	Started(ctx context.Context, stream string) (bool, error)
}

// StartEpocher is an optional capability of a [Membership] of a fleet
// whose epochs grow across a fleet-wide start-over (see
// [Membership.Store]): the Loader then delivers a [TransactionalSink]'s
// start batches (see there) at StartEpoch, so that the Sink's row of a
// shard of the new generation fences out a late batch of a host of an
// older generation. Without it, start batches have epoch 0.
type StartEpocher interface {
	// StartEpoch returns an epoch above every lease epoch of the
	// stream's earlier generations and below every lease epoch the
	// membership's generation grants: the fleet core (kinesisload/fleet)
	// return N<<32 in generation N (0 in the first).
	StartEpoch() uint64
}

// Lease is the right of one host to read one shard and commit its
// position, under a fencing epoch. The Loader reads a shard only while it
// holds its lease, and stops at once when the lease is lost.
//
// A Lease must be safe for concurrent use.
//
// A Lease may also implement [LoadObserver]: the Loader then tells it the
// bytes of every batch the Sink accepted from its shard, which a
// coordinator that balances by throughput ([BalanceByThroughput]) smooths
// into the shard's rate ([RateMeter]) and publishes on a write it makes
// anyway (the fleet core, package kinesisload/fleet: the host's beat and
// positions).
// Coordinators that do not need it leave it out.
type Lease interface {
	// Shard is the shard's ID.
	Shard() string

	// Epoch is the fencing token: it changes (grows) every time the
	// shard's owner changes, and every commit is conditional on it. It
	// grows across a fleet-wide start-over too: a lease of the new
	// generation has an epoch above every one of the old (the fleet core
	// starts generation N's epochs above N<<32). The
	// default coordinator's epoch is always 0.
	Epoch() uint64

	// Progress is the shard's committed progress when the lease was
	// granted: where reading resumes. Its zero fields mean "nothing
	// known" (the Loader's own view then stands).
	Progress() ShardProgress

	// Acquired says why the lease was granted: what the shard's lease
	// was before (never owned, released, expired, handed over). It is
	// reported to [HookLeaseAcquired] and [Loader.Stats]; it changes no
	// decision of the Loader.
	Acquired() AcquireReason

	// Err returns nil until Lost is closed, then why: a
	// [*LeaseLostError] whose Why is set (for a released lease,
	// [LostReleased]). It is reported to [HookLeaseLost].
	Err() error

	// Lost returns a channel that is closed when the lease is lost: its
	// epoch may already be another host's, or will be soon. The Loader
	// then stops reading the shard at once, cancels the delivery in
	// flight and commits nothing more. A fleet coordinator closes it
	// before the lease can expire in any other host's view (it fences
	// itself when it could not renew for long enough), and when a commit
	// is refused. A nil channel means never.
	Lost() <-chan struct{}

	// Handoff returns a channel that is closed when another host asked
	// for the shard (a rebalance): the Loader stops reading, lets the
	// batch in flight finish and commits it, and then calls Release, so
	// that a planned move delivers nothing twice. A nil channel means
	// never.
	Handoff() <-chan struct{}

	// Commit applies u (u.ShardID is the lease's shard) to the shard's
	// shared progress, merged as [PositionStore.Save] merges, under this
	// lease's owner and epoch. A commit of a state (DRAINING, COMPLETED)
	// or of parents is durable when Commit returns nil: it survives a
	// crash of this host, and every later owner resumes from it. A commit
	// that only moves the position may be group-committed: the fleet
	// core writes the positions of all a host's shards once a round
	// (its CheckpointInterval), so such a commit is durable within that
	// interval of its return, and a crash (not a planned move) delivers
	// again what was committed since; a Release writes it first. The
	// default coordinator writes every commit before it returns. When the
	// lease is known lost (another host owns the shard, this lease was
	// released, or this host fenced itself), nothing is written and
	// Commit returns a [*LeaseLostError] (errors.Is(err, [ErrLeaseLost]));
	// a position written under a lease lost but not yet known is never
	// read by a later owner (it is not of the shard's epoch), so it moves
	// nothing back. A write whose answer was lost (a timeout) is read
	// back to learn whether it landed, so a Commit never applies twice.
	// Any other error leaves the outcome unknown; the Loader stops.
	Commit(ctx context.Context, u ShardProgress) error

	// Release gives the lease up: the shard is free for another host at
	// once, and this host does not take it back before the Loader offers
	// it again (the next [Membership.Acquire] that lists it). The Loader calls it after the shard's loop returned without
	// losing the lease (a handoff, the shard completed, the session
	// stopped), and after a [TransactionalSink] refused a batch of the
	// lease as from a lost lease ([LostSinkFenced]), which the
	// coordinator may not know of yet: like every write of the lease, it
	// is conditional on the lease's owner and epoch, so it then changes
	// nothing another host owns. Releasing a lost or released lease does
	// nothing and returns nil. An error leaves the lease to expire.
	Release(ctx context.Context) error
}

// LeaseChecker is an optional capability of a [Lease]: Check reports,
// without I/O, whether this host may still act under the lease by its
// own clock. Once too long passed since the host last renewed (a host
// whose process was paused, or whose rounds cannot reach the table), it
// marks the lease lost and returns its [*LeaseLostError], before the
// coordinator's rounds notice: a host that wakes from a long pause must
// not start a Deliver under a lease another host may hold already. The
// Loader calls it before every Deliver of a leased batch and before every
// Commit. The fleet core (kinesisload/fleet) implements it.
type LeaseChecker interface {
	Check() error
}

// checkLease returns ls's Check when it is a [LeaseChecker], else nil.
func checkLease(ls Lease) error {
	if lc, ok := ls.(LeaseChecker); ok {
		return lc.Check()
	}
	return nil
}

// LeaseLostError says that this host no longer holds a shard's lease (or
// the initialisation lock, with Shard empty): a commit was refused because
// the shard's owner or epoch changed, or the host fenced itself after it
// could not renew. It is not a failure of the Loader: the shard stops on
// this host and another host resumes it from the last commit.
// errors.Is(err, ErrLeaseLost) holds.
type LeaseLostError struct {
	Stream, Shard string
	// Epoch is the epoch the lease had.
	Epoch uint64
	// Why classifies Reason, for hooks and metrics; [LostUnknown] when
	// the coordinator does not say.
	Why LostReason
	// Reason says why, in the coordinator's words: "fenced: no heartbeat
	// for 8s", "owner is host-b at epoch 7", ...
	Reason string
}

// Error names the stream, the shard (or the initialisation lock), the
// epoch and why the lease was lost.
func (e *LeaseLostError) Error() string {
	what := "shard " + e.Shard
	if e.Shard == "" {
		what = "the initialisation lock"
	}
	return fmt.Sprintf("kinesisload: stream %s: %s: lease at epoch %d lost: %s", e.Stream, what, e.Epoch, e.Reason)
}

// Unwrap returns [ErrLeaseLost].
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// NewStoreCoordinator returns the default [Coordinator]: the single process
// over s. Initialise calls init with s at once, Acquire grants every ready
// shard that is not held (reason [AcquireInitial], epoch 0), Commit is
// s.Save, leases are never lost or handed off, and Leave does nothing. It
// is what a Loader uses when [WithCoordinator] is not given, over the
// store of Config.Dir or [WithStore].
func NewStoreCoordinator(s PositionStore) Coordinator {
	return storeCoordinator{store: s}
}

type storeCoordinator struct{ store PositionStore }

func (c storeCoordinator) Join(ctx context.Context, stream string) (Membership, error) {
	return &storeMembership{store: c.store, stream: stream, held: map[string]bool{}}, nil
}

type storeMembership struct {
	store  PositionStore
	stream string

	mu   sync.Mutex
	held map[string]bool
}

func (m *storeMembership) Store() PositionStore { return m.store }

func (m *storeMembership) Initialise(ctx context.Context, init InitFunc) error {
	return init(ctx, m.store)
}

func (m *storeMembership) Acquire(ctx context.Context, ready []string) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lease
	for _, id := range ready {
		if !m.held[id] {
			m.held[id] = true
			out = append(out, &storeLease{m: m, shard: id})
		}
	}
	return out, nil
}

func (m *storeMembership) Wake() <-chan struct{} { return nil }

func (m *storeMembership) Leave(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.held)
	return nil
}

type storeLease struct {
	m     *storeMembership
	shard string
}

func (l *storeLease) Shard() string            { return l.shard }
func (l *storeLease) Epoch() uint64            { return 0 }
func (l *storeLease) Progress() ShardProgress  { return ShardProgress{ShardID: l.shard} }
func (l *storeLease) Lost() <-chan struct{}    { return nil }
func (l *storeLease) Handoff() <-chan struct{} { return nil }
func (l *storeLease) Acquired() AcquireReason  { return AcquireInitial }
func (l *storeLease) Err() error               { return nil }

func (l *storeLease) Commit(ctx context.Context, u ShardProgress) error {
	if u.ShardID != l.shard {
		return fmt.Errorf("kinesisload: stream %s: commit of shard %s under the lease of shard %s", l.m.stream, u.ShardID, l.shard)
	}
	return l.m.store.Save(ctx, l.m.stream, []ShardProgress{u})
}

func (l *storeLease) Release(ctx context.Context) error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	delete(l.m.held, l.shard)
	return nil
}

// leaseContexts derives the contexts of one shard's loop from the
// session's: graceful ends also when the lease is handed off (stop after
// the batch in flight), hard also when it is lost (cancel the delivery in
// flight). stop releases what it started; call it when the loop returned.
func leaseContexts(gctx, hctx context.Context, ls Lease) (graceful, hard context.Context, stop func()) {
	hard, cancelHard := context.WithCancel(hctx)
	graceful, cancelGraceful := context.WithCancel(hard)
	lost, handoff := ls.Lost(), ls.Handoff()
	done := make(chan struct{})
	var wg sync.WaitGroup
	if lost != nil || handoff != nil {
		wg.Go(func() {
			for lost != nil || handoff != nil {
				select {
				case <-lost:
					cancelHard()
					return
				case <-handoff:
					cancelGraceful()
					handoff = nil
				case <-done:
					return
				}
			}
		})
	}
	stopGraceful := context.AfterFunc(gctx, cancelGraceful)
	return graceful, hard, func() {
		close(done)
		wg.Wait()
		stopGraceful()
		cancelGraceful()
		cancelHard()
	}
}

// isLost reports whether the lease of a shard's loop is lost: its Lost
// channel is closed, or err says so. A [*RunError] is a failure that stops
// Run even when its cause wraps ErrLeaseLost (a Sink's refusal of a batch
// delivered without a fleet's lease).
func isLost(ls Lease, err error) bool {
	if _, fatal := errors.AsType[*RunError](err); !fatal && errors.Is(err, ErrLeaseLost) {
		return true
	}
	select {
	case <-ls.Lost():
		return true
	default:
		return false
	}
}

// MergeProgress returns the stored progress p after the update u, as
// [PositionStore.Save] and [Lease.Commit] merge it: states only advance,
// a position is replaced only by one further along, parents accumulate.
// It is commutative, associative and idempotent over updates of one
// shard, for implementations of [PositionStore] and [Coordinator].
func MergeProgress(p, u ShardProgress) ShardProgress { return merge(p, u) }
