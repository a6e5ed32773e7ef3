package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/waitlock"
	"github.com/tidemark/tidemark/kinesisload"
)

// Coordinator is the fleet's [kinesisload.Coordinator]: give one to each
// host's Loader with [kinesisload.WithCoordinator]; the hosts of an
// application share its [Table]. It is safe for concurrent use; one
// Coordinator may join several streams, each once at a time.
type Coordinator struct {
	table Table
	cfg   Config

	mu      sync.Mutex
	members map[string]*member
}

var _ kinesisload.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator of the host cfg.HostID over table. It
// validates cfg (see [Config.WithDefaults]).
func New(table Table, cfg Config) (*Coordinator, error) {
	if table == nil {
		return nil, errors.New("fleet: New: the table is nil")
	}
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Coordinator{table: table, cfg: cfg, members: map[string]*member{}}, nil
}

// Config returns the Coordinator's configuration with its defaults filled
// in (HostID among them).
func (c *Coordinator) Config() Config { return c.cfg }

// Table returns the table the Coordinator works on.
func (c *Coordinator) Table() Table { return c.table }

// now reads the host's clock.
func (c *Coordinator) now() time.Time { return c.cfg.Clock() }

// Round runs one round (heartbeat, positions, balance) of every
// membership of the Coordinator now, on the calling goroutine, and returns
// when they are done. With Config.ManualRounds it is the only way rounds
// run: tests and simulations drive time with it.
func (c *Coordinator) Round() {
	c.mu.Lock()
	ms := slices.Collect(maps.Values(c.members))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			m.beat()
			m.balance()
		})
	}
	wg.Wait()
}

// Join implements [kinesisload.Coordinator]: it reads the generation in
// force (refusing a table whose identity item was deleted while later
// generations exist), folds what an earlier life of this host left in its
// positions into the shard items, writes this host's roster entry and
// starts its rounds.
func (c *Coordinator) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	if stream == "" {
		return nil, errors.New("fleet: Join: the stream name is empty")
	}
	if strings.Contains(stream, "#") {
		// '#' separates the parts of the table's partitions (see
		// partition, posPartition) and is in no Kinesis stream name: such
		// a name would share the partition of another stream's items.
		return nil, fmt.Errorf("fleet: Join: stream name %q: must not contain '#' (no Kinesis stream name does)", stream)
	}
	c.mu.Lock()
	if c.members[stream] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("fleet: host %s joined stream %s twice", c.cfg.HostID, stream)
	}
	c.mu.Unlock()
	bg, cancel := context.WithCancel(context.Background())
	m := &member{c: c, stream: stream, me: c.cfg.HostID, ctx: bg, cancel: cancel,
		held: map[string]*lease{}, unsure: map[string]uint64{}, seen: map[string]seen{}, offer: map[string]bool{},
		tried: map[uint64]time.Time{}, warned: map[string]bool{}, badWarned: map[string]string{}, posWarned: map[string]string{}, oldHosts: map[string]uint64{}, hinted: map[string]bool{}, orphans: map[string]posEntry{},
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), quit: make(chan struct{}), rounds: make(chan struct{}), needRead: true}
	var began time.Time
	for attempt := 0; ; attempt++ {
		ii, err := m.readIdentity(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		if !ii.item.Exists() {
			if err := m.checkIdentityGone(ctx); errors.Is(err, errIdentityAppeared) {
				continue // read it again
			} else if err != nil {
				cancel()
				return nil, err
			}
		} else if err := checkBehind(ctx, c.table, stream, ii); errors.Is(err, errGenMoved) {
			continue // started over meanwhile: read it again
		} else if errors.Is(err, ErrIdentityBehind) && attempt < behindTries {
			// A start-over seen half done: read again a few times.
			if err := sleep(ctx, backoff(attempt)); err != nil {
				cancel()
				return nil, fmt.Errorf("fleet: host %s joining stream %s: %w", m.me, stream, err)
			}
			continue
		} else if err != nil {
			// The item went back (a backup restored): joining its
			// generation would read an archive, or wait for ever.
			cancel()
			return nil, err
		}
		m.gen, m.part = ii.gen, partition(stream, ii.gen)
		if err := m.recover(ctx); err != nil {
			cancel()
			return nil, err
		}
		began = c.now()
		err = m.register(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errGenMoved) {
			cancel()
			return nil, err
		}
		// Another host started the fleet over while we joined: join
		// the generation in force.
		if err := sleep(ctx, backoff(attempt)); err != nil {
			cancel()
			return nil, fmt.Errorf("fleet: host %s joining stream %s: %w", m.me, stream, err)
		}
	}
	m.lastOK = began
	c.mu.Lock()
	if c.members[stream] != nil {
		c.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("fleet: host %s joined stream %s twice", c.cfg.HostID, stream)
	}
	c.members[stream] = m
	c.mu.Unlock()
	if !c.cfg.ManualRounds {
		m.wg.Go(m.beatLoop)
		m.wg.Go(m.balanceLoop)
	}
	return m, nil
}

// behindTries is how many times Join reads the identity item again when
// it names a generation before the one the table shows the fleet in,
// before it takes the item for one restored from an older backup.
const behindTries = 8

// seen is what a member last observed of another host's beat, on its own
// clock.
type seen struct {
	counter, changes uint64
	left             bool
	load             float64
	by               kinesisload.BalanceBy
	raw              string // the entry as stored
	// at is when we first saw the host's beat as it is (in the roster
	// or its first chunk), moved when we first saw its roster entry as
	// it is.
	at, moved time.Time
	// chunked says the host's entry lets it beat in its first positions
	// chunk; chunk is the counter that chunk held when we last read it,
	// at chunkAt (zero: not read yet). See watch.
	chunked bool
	chunk   uint64
	chunkAt time.Time
	// chunkMoved is when a read of ours last found that counter moved.
	chunkMoved time.Time
	// watched is when our last watch that read that chunk began: its
	// slot, numbered with the watchEvery of the time (see slot), tells
	// whether a read is due (a slot's number depends on its length).
	watched time.Time
}

// unknownCounter marks a host noticed (as the holder of the
// initialisation lock) before its beat was read.
const unknownCounter = ^uint64(0)

// badCounter marks a host whose roster entry does not decode (edited by
// hand): not alive, it may hold its leases a lease duration from when its
// entry last changed, and it is collected as any host gone long ago.
const badCounter = unknownCounter - 1

// known reports whether s holds a beat read from the host's entry.
func (s seen) known() bool { return s.counter != unknownCounter && s.counter != badCounter }

// member is a host's session on one stream, in the generation that was in
// force when it joined.
type member struct {
	c      *Coordinator
	stream string
	me     string
	// gen is the session's generation, part the partition of its items.
	gen  uint64
	part string
	ctx  context.Context // cancelled by Leave: ends the rounds' calls
	// cancel ends ctx.
	cancel context.CancelFunc
	quit   chan struct{}
	wg     sync.WaitGroup
	wake   chan struct{}
	// kick starts a balance round: sent after every heartbeat.
	kick chan struct{}
	// beatMu and ballMu are held across calls of the table, so they are
	// waitlock mutexes (a simulation's clock moves while one waits).
	beatMu waitlock.Mutex // one write of our roster entry at a time; the flushes
	ballMu waitlock.Mutex // one balance at a time

	roundsMu sync.Mutex
	rounds   chan struct{} // closed and replaced after every balance

	mu sync.Mutex
	// entry is our roster entry as last known written, and entryRaw the
	// same as stored, byte for byte ("" when absent): the condition of
	// our next write (an entry edited by hand may be written otherwise
	// than entry.String). entryKnown is false while we do not know it
	// (an entry written afresh is conditional on its absence). tried
	// maps the counters of beats whose answer we have not seen to when
	// they began.
	entry      beat
	entryRaw   string
	entryKnown bool
	tried      map[uint64]time.Time
	changes    uint64    // our changes to the table so far
	lastOK     time.Time // start of our last heartbeat known to have landed
	// wroteEntry says a roster write of this session landed: until one
	// has, every beat is written in the roster. rosterAt is when our
	// last read of the roster (a write's answer, or a Get) began.
	wroteEntry bool
	rosterAt   time.Time
	// chunkBeat is the heartbeat counter our first positions chunk
	// carries (see beat); loadAt is when our entry last published our
	// load (BalanceByThroughput).
	chunkBeat uint64
	loadAt    time.Time
	fenced    bool
	left      bool
	committed string // the committed initialisation batch, once known
	seen      map[string]seen
	needRead  bool // a change was seen: read the partition next
	// toGet are the shard items other hosts' hints name as changed since
	// we read them: the next round reads them alone (see hint).
	toGet map[string]bool
	// hint is what our entry says our latest changes wrote, hintAt when
	// we last added to it.
	hint   hint
	hintAt time.Time
	// reading counts the reads of the partition in flight; wroteDuring
	// are the items we wrote meanwhile (nil: deleted), which the view
	// keeps over what a read found (see endRead). readSeq numbers the
	// reads as they begin, viewSeq is the number of the read the view
	// holds.
	reading          int
	wroteDuring      map[string]*shardItem
	readSeq, viewSeq uint64
	lastRead         time.Time // when the partition was read
	shards           map[string]*shardItem
	held             map[string]*lease
	granted          []*lease
	offer            map[string]bool
	hinted           map[string]bool // free shards not offered, the Loader woken for
	digest           uint64
	// unsure maps a shard to the epoch of a take that may have landed
	// with no lease to show for it: Leave gives these up too.
	unsure map[string]uint64
	// over is set once the session is void (the fleet started over in a
	// later generation) or met an error no retry fixes: Acquire returns
	// it.
	over error
	// voided says over is the session's void (not a failure), overID the
	// identity of the generation that voided it, once known.
	voided bool
	overID kinesisload.StreamIdentity
	// genBad is the start of the first of the rounds in a row that
	// could not read the generation in force; zero once one could.
	genBad time.Time
	// badWarned holds the hosts whose roster entry does not decode,
	// warned about once per value.
	badWarned map[string]string
	// posWarned holds, by host, the positions entries that do not decode
	// last warned about.
	posWarned map[string]string
	// warned holds the hosts whose BalanceBy differs, warned about once;
	// oldHosts the heartbeat counters of hosts of an older version.
	warned   map[string]bool
	oldHosts map[string]uint64
	// dirty says a held lease committed a position not written yet;
	// flushedAt is when our positions were last written, posVersions
	// the versions of our chunks.
	dirty     bool
	flushedAt time.Time
	// keepPositions says a lease was lost (not released) with its
	// latest position in our positions only: Leave keeps them. orphans
	// are those positions, written with ours until the shard's item
	// names another epoch.
	// fold is the token of the initialisation this host committed, while
	// its pending progress is not yet in every shard's item (see
	// foldCommitted). unfoldedSince is when this host first saw items
	// whose progress only the committed batch of another host holds.
	fold          string
	unfoldedSince time.Time
	keepPositions bool
	orphans       map[string]posEntry
	posVersions   []uint64
	posChunk      map[string]int // the chunk of each shard's entry (assignChunks)
	// rewindsSeen holds each shard's last rewind ID ("": none) as the
	// session's last read of the rewinds found it (rewoundSince).
	rewindsSeen map[string]string

	// initLock is the initialisation lock while this host's init runs
	// under it.
	initLock *heldLock

	// Balance state, touched by the balance round only.
	steal   string
	stealAt time.Time
	// stealNext is the index, among the hosts a throughput steal may ask
	// (most loaded first), of the one whose positions the next round
	// reads.
	stealNext int
}

func (m *member) beatLoop() {
	t := time.NewTicker(m.c.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.beat()
		case <-m.quit:
			return
		}
	}
}

// balanceLoop runs a balance round after every heartbeat (see kick), on
// a goroutine of its own so that a slow round (a read of a big partition)
// never delays a heartbeat: it balances with what the heartbeat's answer
// just told, so that a change another host made is read in the round of
// the heartbeat that told it, not a round later. A round still running
// when the next heartbeat ends is followed by one more, not a backlog.
func (m *member) balanceLoop() {
	for {
		select {
		case <-m.kick:
			m.balance()
		case <-m.quit:
			return
		}
	}
}

// kickBalance asks for a balance round (see balanceLoop).
func (m *member) kickBalance() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *member) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *member) roundDone() {
	m.roundsMu.Lock()
	close(m.rounds)
	m.rounds = make(chan struct{})
	m.roundsMu.Unlock()
}

func (m *member) nextRound() <-chan struct{} {
	m.roundsMu.Lock()
	defer m.roundsMu.Unlock()
	return m.rounds
}

// callCtx bounds one call of the rounds.
func (m *member) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.c.cfg.CallTimeout)
}

// fenceDue reports whether too long passed since our last heartbeat
// landed. m.mu must be held.
func (m *member) fenceDue(now time.Time) bool {
	cfg := m.c.cfg
	return now.Sub(m.lastOK) >= cfg.LeaseDuration-cfg.FenceMargin
}

// genDue reports whether the rounds have failed to read the generation
// in force for too long (see checkFence). m.mu must be held.
func (m *member) genDue(now time.Time) bool {
	cfg := m.c.cfg
	return m.over == nil && !m.genBad.IsZero() && now.Sub(m.genBad) >= cfg.LeaseDuration-cfg.FenceMargin
}

// checkFence fences the host when its fence is due: every lease is lost.
// It also drops every lease when the generation is due, without fencing
// the host: its next round that reads the generation in force takes
// shards again. m.mu must be held.
func (m *member) checkFence() {
	now := m.c.now()
	if m.genDue(now) {
		for _, l := range m.held {
			m.lose(l, kinesisload.LostSelfFenced, fmt.Sprintf("fenced: the stream's generation could not be read for %v; the fleet may have started over", now.Sub(m.genBad)))
		}
	}
	if !m.fenceDue(now) || m.fenced {
		return
	}
	m.fenced = true
	for _, l := range m.held {
		m.lose(l, kinesisload.LostSelfFenced, fmt.Sprintf("fenced: no heartbeat landed for %v", now.Sub(m.lastOK)))
	}
}

// alive reports whether host id counts as alive in m's view: its beat
// moved within LeaseDuration of m's clock, and it has not left. m.mu must
// be held.
func (m *member) alive(id string, now time.Time) bool {
	if id == m.me {
		return !m.fenced
	}
	s, ok := m.seen[id]
	return ok && !s.left && s.counter != badCounter && !m.still(s, now)
}

// still reports whether s's host has shown no sign of life for a lease
// duration on our clock, less half a round: its beat unchanged since
// s.at, on reads of the roster and, when the host may beat in its
// positions, of its first chunk, made no earlier than a round before
// that lease duration ran out. (Half a round: our reads come at the same
// moment of every round, give or take a few milliseconds, and a lease
// duration that ran out a millisecond after a round's check would cost
// a whole round more.)
//
// That is enough: the host's last beat that landed began before s.at, so
// it fences itself (every lease lost) by s.at + LeaseDuration -
// FenceMargin, earlier than the reads and than now (RenewInterval <
// FenceMargin); a later beat could only put that off if its answer came
// before then (a fence that passed is kept: the host checks it before it
// takes in a beat's answer, see writeEntry), so it landed before then,
// and the reads would have seen it. m.mu must be held.
func (m *member) still(s seen, now time.Time) bool {
	lease, round := m.c.cfg.LeaseDuration, m.c.cfg.RenewInterval
	if now.Sub(s.at) < lease-round/2 {
		return false
	}
	due := s.at.Add(lease - round)
	return !m.rosterAt.Before(due) && (!s.chunked || !s.chunkAt.Before(due))
}

// mayHold reports whether host id may still hold its leases in m's view,
// so that its shards are not free: it is alive, or its entry left the
// roster or was marked left less than LeaseDuration ago on m's clock. A
// host marks its entry left after its loops stopped, but an operator may
// mark or remove the entry of a host that reads: its shards are taken
// only once it must have fenced itself, as after a crash. m.mu must be
// held.
func (m *member) mayHold(id string, now time.Time) bool {
	if id == m.me {
		return !m.fenced
	}
	s, ok := m.seen[id]
	if !ok {
		m.seen[id] = seen{counter: unknownCounter, at: now}
		return true
	}
	return !m.still(s, now)
}

// aliveOrUnknown is alive, except that a host not observed yet counts as
// alive until it has been watched for LeaseDuration. m.mu must be held.
func (m *member) aliveOrUnknown(id string, now time.Time) bool {
	s, ok := m.seen[id]
	switch {
	case !ok:
		m.seen[id] = seen{counter: unknownCounter, at: now}
	case s.counter == badCounter:
		return !m.still(s, now)
	}
	return m.alive(id, now)
}

// setShard replaces the member's view of a shard's item (nil: removes
// it). The view is copied on write: a round that took it under m.mu reads
// it after without the lock. m.mu must be held.
func (m *member) setShard(id string, s *shardItem) {
	if m.reading > 0 {
		m.wroteDuring[id] = s
	}
	if m.shards == nil {
		return
	}
	next := maps.Clone(m.shards)
	if s == nil {
		delete(next, id)
	} else {
		next[id] = s
	}
	m.shards = next
}

// noteItem takes s, the shard item id as just read alone, into the view:
// absent, it leaves the view; present, it replaces the view's unless that
// is newer (a read of the partition that ended meanwhile). m.mu must be
// held.
func (m *member) noteItem(id string, s *shardItem) {
	old, ok := m.shards[id]
	switch {
	case !s.exists():
		if ok {
			m.setShard(id, nil)
		}
	case !ok || old.item.Version <= s.item.Version:
		m.setShard(id, s)
	}
}

// beginRead marks a read of the partition in flight and returns its
// number. m.mu must be held.
func (m *member) beginRead() uint64 {
	m.reading++
	if m.wroteDuring == nil {
		m.wroteDuring = map[string]*shardItem{}
	}
	m.readSeq++
	return m.readSeq
}

// endRead ends read seq that beginRead marked: shards, what it found
// (nil: it failed), become the member's view, with the items we wrote
// while it ran over them (a read that began before our write may have
// found the item as it was, or not yet there); unless a read that began
// after it ended first (the view is newer). m.mu must be held.
func (m *member) endRead(seq uint64, shards map[string]*shardItem) {
	if shards != nil && seq > m.viewSeq {
		m.viewSeq = seq
		next := maps.Clone(shards)
		for id, s := range m.wroteDuring {
			old, ok := next[id]
			switch {
			case s == nil:
				delete(next, id)
			case !ok || old.item.Version < s.item.Version:
				next[id] = s
			}
		}
		m.shards = next
	}
	m.reading--
	if m.reading == 0 {
		m.wroteDuring = nil
	}
}

// lose marks l lost. m.mu must be held.
func (m *member) lose(l *lease, why kinesisload.LostReason, reason string) {
	if why != kinesisload.LostReleased {
		m.keepOrphan(l)
	}
	l.markLost(why, reason)
	if m.held[l.shard] == l {
		delete(m.held, l.shard)
	}
	m.granted = slices.DeleteFunc(m.granted, func(g *lease) bool { return g == l })
}

// keepOrphan keeps l's latest position, which may be in our positions
// only (its item holds the position of an earlier write), as an orphan
// there (for the host that takes the shard, our giveUp of a handoff, or
// the archive) until the shard's item moves on. m.mu must be held.
func (m *member) keepOrphan(l *lease) {
	if l.isLost() {
		return
	}
	m.keepPositions = true
	if e, ok := l.entry(); ok {
		m.orphans[l.shard] = e
		m.dirty = true
	}
}

// fail ends the session on an error a round met that no retry fixes (an
// item that cannot be decoded, access denied, the table gone): Acquire
// returns it, and the Loader stops with it, instead of a host that
// silently reads nothing. The first error stands.
func (m *member) fail(op string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over == nil {
		m.over = fmt.Errorf("fleet: host %s, stream %s: %s: %w", m.me, m.stream, op, err)
		m.signal()
	}
}

// fatal reports whether err is neither a conflict nor of unknown outcome:
// no retry fixes it.
func fatal(err error) bool {
	return err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrUnknown)
}

// Wake implements [kinesisload.Membership].
func (m *member) Wake() <-chan struct{} { return m.wake }

// Store implements [kinesisload.Membership].
func (m *member) Store() kinesisload.PositionStore { return sharedStore{m: m} }

var _ kinesisload.StartEpocher = (*member)(nil)

// StartEpoch implements [kinesisload.StartEpocher]: the epoch base of the
// session's generation.
func (m *member) StartEpoch() uint64 { return epochBase(m.gen) }

// Acquire implements [kinesisload.Membership]: leases are taken by the
// balance rounds; Acquire hands out those for shards of ready and releases
// the others.
func (m *member) Acquire(ctx context.Context, ready []string) ([]kinesisload.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.over != nil {
		err := m.over
		m.mu.Unlock()
		return nil, err
	}
	m.offer = make(map[string]bool, len(ready))
	for _, id := range ready {
		m.offer[id] = true
	}
	clear(m.hinted)
	var out []kinesisload.Lease
	var drop []*lease
	for _, l := range m.granted {
		if m.offer[l.shard] {
			out = append(out, l)
		} else {
			drop = append(drop, l)
		}
	}
	m.granted = nil
	m.mu.Unlock()
	if len(drop) > 0 {
		// Given up even when ctx ends meanwhile (the Loader stopping):
		// a failed Release is not retried by Leave.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.cfg.LeaseDuration)
		defer cancel()
		for _, l := range drop {
			_ = l.Release(rctx)
		}
	}
	return out, nil
}

// Leave implements [kinesisload.Membership]: the rounds stop, every lease
// still held is released (its position written into the shard's item),
// so is every shard a take may have won without a lease to show for it,
// the positions are deleted when nothing is left in them, and the roster
// entry is marked left so that the other hosts count this host out at
// once (a shard whose release failed is taken a lease duration on, as a
// crashed host's).
func (m *member) Leave(ctx context.Context) error {
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return nil
	}
	m.left = true
	m.mu.Unlock()
	m.cancel()
	close(m.quit)
	m.wg.Wait()
	// A round in progress (manual rounds) ends before we go on: taking
	// each round's lock waits for it (a round that starts after sees
	// m.left and does nothing).
	m.ballMu.Lock()
	//lint:ignore SA2001 the lock is taken only to wait for a balance in progress
	m.ballMu.Unlock()
	m.beatMu.Lock()
	//lint:ignore SA2001 the lock is taken only to wait for a beat in progress
	m.beatMu.Unlock()
	m.mu.Lock()
	held := slices.Collect(maps.Values(m.held))
	for id, epoch := range m.unsure {
		if l := m.held[id]; l == nil || l.epoch != epoch {
			held = append(held, &lease{m: m, shard: id, epoch: epoch, lost: make(chan struct{}), handoff: make(chan struct{})})
		}
	}
	m.unsure = map[string]uint64{}
	m.mu.Unlock()
	// Released at once, not one after the other: on a table that does
	// not answer each gives up after a few tries.
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		errs     []error
		released = true
	)
	for _, l := range held {
		wg.Go(func() {
			if err := l.Release(ctx); err != nil {
				errMu.Lock()
				released = false
				errs = append(errs, err)
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	m.mu.Lock()
	for _, l := range m.held {
		m.lose(l, kinesisload.LostReleased, "left")
	}
	m.mu.Unlock()
	m.mu.Lock()
	keep := m.keepPositions
	m.mu.Unlock()
	if released && !keep {
		// Every position is in its shard's item: the chunks hold
		// nothing another host needs.
		m.dropPositions(ctx)
	} else if keep {
		errs = append(errs, m.flushLeaving(ctx))
	}
	errs = append(errs, m.markLeft(ctx))
	c := m.c
	c.mu.Lock()
	if c.members[m.stream] == m {
		delete(c.members, m.stream)
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}
