package coordtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// Errors of the fault hooks.
var (
	// ErrHostDown is returned by every read and write of a host after
	// [Fleet.Kill]: the process is gone.
	ErrHostDown = errors.New("coordtest: host is down")
	// ErrRefused is returned by a write that [Fleet.Refuse] refused: it
	// did not land (like a throttled or failed DynamoDB call).
	ErrRefused = errors.New("coordtest: write refused")
	// ErrAnswerLost is returned by a write that [Fleet.LoseAnswers] made
	// land (or not, by its condition) without telling: like a timeout.
	ErrAnswerLost = errors.New("coordtest: the answer to a write was lost")
)

// Config sets the timing of a [Fleet]. The zero Config is valid.
type Config struct {
	// LeaseDuration is how long a host's heartbeat counter must stay
	// unchanged, on an observer's own clock, before the observer takes
	// the host for dead and its leases for free. Default 10 s.
	LeaseDuration time.Duration
	// RenewInterval is how often a host heartbeats and balances: one
	// round per interval. Default LeaseDuration/5.
	RenewInterval time.Duration
	// FenceMargin is how long before its lease could expire in another
	// host's view a host that could not renew stops reading: it fences
	// itself at its last successful heartbeat + LeaseDuration -
	// FenceMargin. It must exceed RenewInterval. Default LeaseDuration/3.
	FenceMargin time.Duration
	// BalanceBy is what the hosts balance: [kinesisload.BalanceByCount]
	// (the default) or [kinesisload.BalanceByThroughput], with which each
	// host publishes its shards' rates in its heartbeat item and steals by
	// [kinesisload.PickSteal].
	BalanceBy kinesisload.BalanceBy
}

func (c Config) withDefaults() (Config, error) {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 10 * time.Second
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 5
	}
	if c.FenceMargin == 0 {
		c.FenceMargin = c.LeaseDuration / 3
	}
	if err := c.BalanceBy.Validate("coordtest: Config.BalanceBy"); err != nil {
		return c, err
	}
	switch {
	case c.LeaseDuration < 0 || c.RenewInterval < 0 || c.FenceMargin < 0:
		return c, fmt.Errorf("coordtest: Config %+v: durations must not be negative", c)
	case c.FenceMargin <= c.RenewInterval:
		return c, fmt.Errorf("coordtest: Config.FenceMargin = %v: must exceed RenewInterval = %v (a host checks its fence once a round)", c.FenceMargin, c.RenewInterval)
	case c.FenceMargin >= c.LeaseDuration:
		return c, fmt.Errorf("coordtest: Config.FenceMargin = %v: must be less than LeaseDuration = %v", c.FenceMargin, c.LeaseDuration)
	}
	return c, nil
}

// Fleet is an in-memory table shared by several hosts, each a
// [kinesisload.Coordinator] ([Fleet.Host]). Time is a manual clock that
// moves only by [Fleet.Advance]; each host reads it with its own skew
// ([Fleet.Skew]), and no decision compares two hosts' clocks.
type Fleet struct {
	cfg Config

	mu     sync.Mutex
	now    time.Duration // since the fleet was made
	start  time.Time
	tables map[string]*table
	hosts  map[string]*Host
	writes map[string]int // per host, for cost tests
	// betweenReads, when set (by the package's tests), runs in every
	// round between its two reads: the Scan and the identity item.
	betweenReads func(host string)
}

// table is one generation of a stream's items: what a DynamoDB table
// holds for it under one partition (see [partition]). The stream's own
// partition (generation 0) also holds the identity item.
type table struct {
	hearts map[string]*heart
	items  map[string]*item
	init   initItem
	// identity and gen are the stream-level identity item, in the
	// stream's own partition only: the identity of the stream the current
	// generation reads, and that generation. archived lists the
	// generations started over, oldest first.
	identity kinesisload.StreamIdentity
	gen      uint64
	archived []Generation
	// lineage counts changes of states and new shards, to wake hosts.
	lineage uint64
}

// Generation is one generation of a stream's progress in the table: the
// progress made on one stream of the name, from its initialisation until
// a host started the fleet over on a stream re-created under the name.
type Generation struct {
	// Gen counts the start-overs before it: 0 is the first.
	Gen uint64
	// Identity is the stream the generation read (zero when it was
	// started over before an identity was stored).
	Identity kinesisload.StreamIdentity
	// ReplacedBy is the stream of the next generation; zero for the
	// current one.
	ReplacedBy kinesisload.StreamIdentity
}

// partition names the table of stream's generation gen: the stream's name
// for generation 0 (as before generations existed), and name#genN after
// N start-overs ('#' is in no stream name).
func partition(stream string, gen uint64) string {
	if gen == 0 {
		return stream
	}
	return fmt.Sprintf("%s#gen%d", stream, gen)
}

// epochBase is where the epochs of generation gen start: a lease of a
// later generation has an epoch above every one of the earlier (2^32
// owner changes per shard and generation), so that the epoch grows across
// a start-over too, and a TransactionalSink fencing by it refuses a late
// batch of the old generation's owner.
func epochBase(gen uint64) uint64 { return gen << 32 }

// heart is a host's heartbeat item.
type heart struct {
	Counter uint64
	Left    bool
	// Rates is the rate in bytes/s of each shard the host held at its
	// last heartbeat, when balancing by throughput.
	Rates map[string]float64
}

// item is a shard's item.
type item struct {
	Progress  kinesisload.ShardProgress
	Pending   map[string]kinesisload.ShardProgress // by initialisation batch
	Owner     string
	Epoch     uint64
	HandoffTo string
	// Rate is the shard's rate in bytes/s when its owner released it
	// (balancing by throughput), to seed the next owner's.
	Rate float64
}

// initItem is the stream's initialisation decision: the lock, the commit
// naming the batch whose pending positions are visible, and T0, the start
// time the first lock holder saved (kept by every later holder, so that a
// host taking over from one that died resolves LATEST at the first T0).
type initItem struct {
	LockOwner, LockToken string
	Committed            string
	T0                   time.Time
}

// visible is the item's progress as every host sees it: the pending
// positions of the committed batch count.
func (tb *table) visible(it *item) kinesisload.ShardProgress {
	p := it.Progress
	if tb.init.Committed != "" {
		if q, ok := it.Pending[tb.init.Committed]; ok {
			p = kinesisload.MergeProgress(p, q)
		}
	}
	return p
}

// New returns an empty Fleet.
func New(cfg Config) (*Fleet, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Fleet{cfg: cfg, start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), tables: map[string]*table{},
		hosts: map[string]*Host{}, writes: map[string]int{}}, nil
}

// Config returns the fleet's timing, with defaults filled in.
func (f *Fleet) Config() Config { return f.cfg }

// Host returns the host named id, making it on first use. Its Coordinator
// may Join any stream.
func (f *Fleet) Host(id string) *Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hosts[id]
	if h == nil {
		h = &Host{f: f, id: id, members: map[string]*member{}, pauseCh: make(chan struct{})}
		h.unpaused = sync.NewCond(&f.mu)
		f.hosts[id] = h
	}
	return h
}

func (f *Fleet) table(stream string) *table {
	tb := f.tables[stream]
	if tb == nil {
		tb = &table{hearts: map[string]*heart{}, items: map[string]*item{}}
		f.tables[stream] = tb
	}
	return tb
}

// Advance moves every host's clock forward by d, in steps of at most
// RenewInterval, and after each step waits until every host that is
// neither paused nor killed has done its round (heartbeat, fencing,
// expiry, balance). A paused host does nothing while time passes.
func (f *Fleet) Advance(d time.Duration) {
	for d > 0 {
		step := min(d, f.cfg.RenewInterval)
		d -= step
		f.mu.Lock()
		f.now += step
		var ms []*member
		for _, h := range f.hosts {
			if h.killed || h.paused {
				continue
			}
			for _, m := range h.members {
				ms = append(ms, m)
			}
		}
		f.mu.Unlock()
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() { m.tick() })
		}
		wg.Wait()
	}
}

// Kill makes host id die: from now on every read and write of it fails
// with [ErrHostDown] (nothing lands), and it heartbeats no more. Its
// leases are not released; they expire in the others' view.
func (f *Fleet) Kill(id string) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	h.killed = true
	h.unpaused.Broadcast()
}

// Pause freezes host id, like SIGSTOP: its reads and writes wait until
// [Fleet.Resume], and it does no round while time passes. A write already
// in flight when it is paused completes.
func (f *Fleet) Pause(id string) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !h.paused {
		h.paused = true
		close(h.pauseCh)
	}
}

// Resume undoes [Fleet.Pause]. The host's next round sees how much time
// passed, and fences itself if it could not renew for long enough.
func (f *Fleet) Resume(id string) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if h.paused {
		h.paused = false
		h.pauseCh = make(chan struct{})
		h.unpaused.Broadcast()
	}
}

// Refuse makes the next n writes of host id fail with [ErrRefused]
// without landing.
func (f *Fleet) Refuse(id string, n int) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	h.refuse = n
}

// LoseAnswers makes the next n writes of host id take effect as usual but
// return [ErrAnswerLost] instead of their answer.
func (f *Fleet) LoseAnswers(id string, n int) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	h.lose = n
}

// Skew sets host id's clock offset: its clock reads the fleet's time plus
// d. Nothing in the protocol compares clocks across hosts, so a skew
// changes no decision.
func (f *Fleet) Skew(id string, d time.Duration) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	h.skew = d
}

// Writes returns how many writes host id made (landed or not), for tests
// of the coordination cost.
func (f *Fleet) Writes(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes[id]
}

// ShardInfo is what the table holds for one shard, for tests and tools.
type ShardInfo struct {
	Owner     string
	Epoch     uint64
	HandoffTo string
	// Progress is the visible progress.
	Progress kinesisload.ShardProgress
}

// Shards returns the table of stream's current generation as every host
// sees it.
func (f *Fleet) Shards(stream string) map[string]ShardInfo {
	f.mu.Lock()
	gen := f.table(stream).gen
	f.mu.Unlock()
	return f.ShardsOf(stream, gen)
}

// Generations returns stream's generations, oldest first; the last is the
// current one. A stream never started over has one, generation 0.
func (f *Fleet) Generations(stream string) []Generation {
	f.mu.Lock()
	defer f.mu.Unlock()
	tb := f.table(stream)
	return append(slices.Clone(tb.archived), Generation{Gen: tb.gen, Identity: tb.identity})
}

// ShardsOf returns the table of stream's generation gen (an archived one
// after a start-over) as every host saw it.
func (f *Fleet) ShardsOf(stream string, gen uint64) map[string]ShardInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	tb := f.table(partition(stream, gen))
	out := make(map[string]ShardInfo, len(tb.items))
	for id, it := range tb.items {
		p := tb.visible(it)
		p.ShardID = id
		out[id] = ShardInfo{Owner: it.Owner, Epoch: it.Epoch, HandoffTo: it.HandoffTo, Progress: p}
	}
	return out
}

// Host is one host of a [Fleet]: a [kinesisload.Coordinator] whose
// memberships heartbeat, balance and fence on their own goroutine.
type Host struct {
	f  *Fleet
	id string

	// Guarded by f.mu.
	skew     time.Duration
	killed   bool
	paused   bool
	pauseCh  chan struct{} // closed while paused
	unpaused *sync.Cond
	refuse   int
	lose     int
	members  map[string]*member
}

var _ kinesisload.Coordinator = (*Host)(nil)

// ID returns the host's name.
func (h *Host) ID() string { return h.id }

// clock returns the host's own monotonic reading. Only differences of
// one host's readings are ever used.
func (h *Host) clock() time.Time {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.start.Add(h.f.now + h.skew)
}

// access runs fn on the stream's table as one atomic read or single-item
// write, through the host's faults. f.mu is held while fn runs.
func (h *Host) access(stream string, write bool, fn func(tb *table) error) error {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for h.paused && !h.killed {
		h.unpaused.Wait()
	}
	if h.killed {
		return ErrHostDown
	}
	if !write {
		return fn(f.table(stream))
	}
	f.writes[h.id]++
	if h.refuse > 0 {
		h.refuse--
		return ErrRefused
	}
	err := fn(f.table(stream))
	if h.lose > 0 {
		h.lose--
		return ErrAnswerLost
	}
	return err
}

// errCondition is a failed write condition.
var errCondition = errors.New("coordtest: condition failed")

// Join implements [kinesisload.Coordinator]: it registers the host's
// heartbeat for stream and starts its rounds, driven by [Fleet.Advance].
func (h *Host) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	f := h.f
	f.mu.Lock()
	if h.members[stream] != nil {
		f.mu.Unlock()
		return nil, fmt.Errorf("coordtest: host %s joined stream %s twice", h.id, stream)
	}
	f.mu.Unlock()
	m := &member{h: h, stream: stream, held: map[string]*lease{}, seen: map[string]seen{},
		offer: map[string]bool{}, wake: make(chan struct{}, 1), ticks: make(chan chan struct{}), quit: make(chan struct{}), rounds: make(chan struct{})}
	// The generation in force: the session belongs to it to the end.
	if err := h.access(stream, false, func(tb *table) error {
		m.gen = tb.gen
		return nil
	}); err != nil {
		return nil, fmt.Errorf("coordtest: host %s joining stream %s: %w", h.id, stream, err)
	}
	m.part = partition(stream, m.gen)
	// Register: heartbeat item present and not Left, counter moved.
	for {
		var counter uint64
		err := h.access(m.part, true, func(tb *table) error {
			hb := tb.hearts[h.id]
			if hb == nil {
				hb = &heart{}
				tb.hearts[h.id] = hb
			}
			hb.Counter++
			hb.Left = false
			counter = hb.Counter
			return nil
		})
		if err == nil {
			m.counter = counter
			break
		}
		if !errors.Is(err, ErrAnswerLost) && !errors.Is(err, ErrRefused) {
			return nil, fmt.Errorf("coordtest: host %s joining stream %s: %w", h.id, stream, err)
		}
		if errors.Is(err, ErrAnswerLost) {
			// Re-read: the increment landed; take the counter as it is.
			_ = h.access(m.part, false, func(tb *table) error {
				if hb := tb.hearts[h.id]; hb != nil {
					m.counter = hb.Counter
				}
				return nil
			})
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	m.lastOK = h.clock()
	f.mu.Lock()
	h.members[stream] = m
	f.mu.Unlock()
	m.wg.Go(m.loop)
	return m, nil
}

// seen is what a member last observed of another host's heartbeat, on its
// own clock.
type seen struct {
	counter uint64
	left    bool
	at      time.Time
}

// member is a host's session on one stream, in the generation that was
// current when it joined.
type member struct {
	h      *Host
	stream string
	// gen is the session's generation, part its table.
	gen   uint64
	part  string
	ticks chan chan struct{}
	quit  chan struct{}
	wg    sync.WaitGroup
	wake  chan struct{}
	// rounds is closed and replaced after every round, for Initialise.
	roundsMu sync.Mutex
	rounds   chan struct{}

	mu      sync.Mutex
	counter uint64    // our heartbeat counter as last written
	lastOK  time.Time // start of our last heartbeat known to have landed
	fenced  bool
	seen    map[string]seen
	held    map[string]*lease
	granted []*lease
	offer   map[string]bool
	rates   map[string]float64 // of our shards, as last published
	hearts  map[string]heart   // as read by the last round
	steal   string             // the shard we asked to be handed over
	stealAt time.Time          // when
	lineage uint64
	left    bool
	// over is set once the fleet started over in a later generation:
	// the session's leases are void, and Acquire returns it.
	over error
}

func (m *member) loop() {
	for {
		select {
		case ack := <-m.ticks:
			m.round()
			close(ack)
		case <-m.quit:
			return
		}
	}
}

// tick runs one round on the member's goroutine and waits for it, unless
// the host is paused or killed meanwhile.
func (m *member) tick() {
	m.h.f.mu.Lock()
	pause := m.h.pauseCh
	m.h.f.mu.Unlock()
	ack := make(chan struct{})
	select {
	case m.ticks <- ack:
	case <-m.quit:
		return
	case <-pause:
		return
	}
	select {
	case <-ack:
	case <-pause:
	}
}

func (m *member) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// observe records host id's heartbeat as read at now on m's clock: the
// time is kept while the counter stays the same. A host seen for the first
// time counts from now. m.mu must be held.
func (m *member) observe(id string, hb heart, now time.Time) {
	s, ok := m.seen[id]
	if !ok || s.counter != hb.Counter || s.left != hb.Left {
		m.seen[id] = seen{counter: hb.Counter, left: hb.Left, at: now}
	}
}

// alive reports whether host id counts as alive in m's view: its
// heartbeat moved within LeaseDuration of m's clock, and it has not left.
// m.mu must be held.
func (m *member) alive(id string, now time.Time) bool {
	if id == m.h.id {
		return !m.fenced
	}
	s, ok := m.seen[id]
	return ok && !s.left && now.Sub(s.at) < m.h.f.cfg.LeaseDuration
}

// free reports whether it may be taken by m: unowned, owned by a host m
// takes for dead, or owned by m in an earlier life; and not reserved by a
// handoff to another live host. m.mu must be held.
func (m *member) free(it *item, now time.Time) bool {
	if it.HandoffTo != "" && it.HandoffTo != m.h.id && m.alive(it.HandoffTo, now) {
		return false
	}
	switch {
	case it.Owner == "":
		return true
	case it.Owner == m.h.id:
		return true // a lease of ours we no longer hold
	default:
		return !m.alive(it.Owner, now)
	}
}

// round is one renew interval of the member: heartbeat, fence, observe,
// answer handoff requests, take and steal.
func (m *member) round() {
	defer func() {
		m.roundsMu.Lock()
		close(m.rounds)
		m.rounds = make(chan struct{})
		m.roundsMu.Unlock()
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return
	}
	h, cfg := m.h, m.h.f.cfg
	began := h.clock()
	m.heartbeat(began)
	now := h.clock()
	if now.Sub(m.lastOK) >= cfg.LeaseDuration-cfg.FenceMargin {
		if !m.fenced {
			m.fenced = true
			for _, l := range m.held {
				m.lose(l, kinesisload.LostSelfFenced, fmt.Sprintf("fenced: no heartbeat landed for %v", now.Sub(m.lastOK)))
			}
		}
		return
	}
	m.fenced = false
	// One consistent read of the table (a Scan).
	var snap map[string]item
	var hearts map[string]heart
	var lineage uint64
	err := h.access(m.part, false, func(tb *table) error {
		snap = make(map[string]item, len(tb.items))
		for id, it := range tb.items {
			c := *it
			c.Progress = tb.visible(it)
			c.Progress.ShardID = id
			snap[id] = c
		}
		hearts = make(map[string]heart, len(tb.hearts))
		for id, hb := range tb.hearts {
			hearts[id] = *hb
		}
		lineage = tb.lineage
		return nil
	})
	if err != nil {
		return
	}
	h.f.mu.Lock()
	between := h.f.betweenReads
	h.f.mu.Unlock()
	if between != nil {
		between(h.id)
	}
	// Then the identity item: had the fleet started over before anything
	// the Scan shows (a host that left after starting it over), this
	// read sees it, and the round takes nothing of the old generation.
	if m.checkGen() != nil {
		return // void: the Loader joins the new generation
	}
	for id, hb := range hearts {
		if id == h.id {
			continue
		}
		m.observe(id, hb, now)
	}
	m.hearts = hearts
	if lineage != m.lineage {
		m.lineage = lineage
		m.signal()
	}
	// Our leases: lost if the table says another owner or epoch; asked
	// for if another host wants them.
	for id, l := range m.held {
		it, ok := snap[id]
		switch {
		case !ok || it.Owner != h.id || it.Epoch != l.epoch:
			m.lose(l, kinesisload.LostExpired, fmt.Sprintf("owner is %q at epoch %d", it.Owner, it.Epoch))
		case it.HandoffTo != "" && it.HandoffTo != h.id:
			l.askHandoff()
		}
	}
	// Fair share by count over the leasable shards and the live hosts.
	live := 1
	for id := range hearts {
		if id != h.id && m.alive(id, now) {
			live++
		}
	}
	load := map[string]int{}
	var candidates, total []string
	for id, it := range snap {
		if !leasableSnap(snap, it.Progress) {
			continue
		}
		total = append(total, id)
		if it.Owner != "" && it.Owner != h.id && m.alive(it.Owner, now) {
			load[it.Owner]++
		}
		if m.offer[id] && m.held[id] == nil && m.free(&it, now) {
			candidates = append(candidates, id)
		}
	}
	target := int(math.Ceil(float64(len(total)) / float64(live)))
	mine := 0 // a COMPLETED shard not released yet does not count
	for id := range m.held {
		if leasableSnap(snap, snap[id].Progress) {
			mine++
		}
	}
	// Reserved for us first, then expired and unowned, in random order
	// so that hosts taking at once rarely collide.
	mrand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	slices.SortStableFunc(candidates, func(a, b string) int {
		ra, rb := snap[a].HandoffTo == h.id, snap[b].HandoffTo == h.id
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
	took := false
	for _, id := range candidates {
		if mine >= target && snap[id].HandoffTo != h.id {
			break
		}
		if m.take(id, snap[id]) {
			mine++
			took = true
		}
	}
	if m.steal != "" {
		if l := m.held[m.steal]; l != nil || now.Sub(m.stealAt) >= cfg.LeaseDuration {
			if l == nil {
				m.withdraw(m.steal)
			}
			m.steal = ""
		}
	}
	// One steal at a time, only when nothing was free: from the most
	// loaded host, when it holds at least two more than we do.
	if !took && m.steal == "" && cfg.BalanceBy == kinesisload.BalanceByThroughput {
		m.stealByThroughput(snap, hearts, now)
	} else if !took && m.steal == "" {
		victim, most := "", 0
		for _, id := range slices.Sorted(maps.Keys(load)) {
			if load[id] > most {
				victim, most = id, load[id]
			}
		}
		if victim != "" && most >= mine+2 {
			var theirs []string
			for id, it := range snap {
				if it.Owner == victim && it.HandoffTo == "" && m.offer[id] && leasableSnap(snap, it.Progress) {
					theirs = append(theirs, id)
				}
			}
			if len(theirs) > 0 {
				id := theirs[mrand.IntN(len(theirs))]
				if m.request(id, snap[id]) {
					m.steal, m.stealAt = id, now
				}
			}
		}
	}
	if len(m.granted) > 0 {
		m.signal()
	}
}

// stealByThroughput asks for the shard [kinesisload.PickSteal] picks from
// the live host of the highest load (sum of its shards' weights, by the
// rates in its heartbeat). m.mu must be held.
func (m *member) stealByThroughput(snap map[string]item, hearts map[string]heart, now time.Time) {
	h := m.h
	load := map[string]float64{}
	mine := 0.0
	for id, it := range snap {
		if !leasableSnap(snap, it.Progress) {
			continue
		}
		switch {
		case m.held[id] != nil:
			mine += kinesisload.Weight(m.rates[id])
		case it.Owner != "" && it.Owner != h.id && m.alive(it.Owner, now):
			load[it.Owner] += kinesisload.Weight(hearts[it.Owner].Rates[id])
		}
	}
	victim, most := "", 0.0
	for _, id := range slices.Sorted(maps.Keys(load)) {
		if load[id] > most {
			victim, most = id, load[id]
		}
	}
	if victim == "" {
		return
	}
	theirs := map[string]float64{}
	for id, it := range snap {
		if it.Owner == victim && it.HandoffTo == "" && m.offer[id] && leasableSnap(snap, it.Progress) {
			theirs[id] = kinesisload.Weight(hearts[victim].Rates[id])
		}
	}
	if id := kinesisload.PickSteal(mine, most, theirs); id != "" && m.request(id, snap[id]) {
		m.steal, m.stealAt = id, now
	}
}

// leasableSnap is leasable over a snapshot of visible progress.
func leasableSnap(snap map[string]item, p kinesisload.ShardProgress) bool {
	if p.State == kinesisload.StateCompleted || p.Position.Kind == scan.KindShardEnd {
		return false
	}
	for _, par := range p.Parents {
		if pi, ok := snap[par]; ok && pi.Progress.State != kinesisload.StateCompleted {
			return false
		}
	}
	return true
}

// heartbeat writes counter+1 on condition that the counter is ours; a lost
// answer is read back. m.mu must be held.
func (m *member) heartbeat(began time.Time) {
	next := m.counter + 1
	var rates map[string]float64
	if m.h.f.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		rates = make(map[string]float64, len(m.held))
		for id, l := range m.held {
			rates[id] = l.meter.Tick(began)
		}
		m.rates = rates
	}
	write := func() error {
		return m.h.access(m.part, true, func(tb *table) error {
			hb := tb.hearts[m.h.id]
			if hb == nil || hb.Counter != m.counter {
				return errCondition
			}
			hb.Counter = next
			hb.Rates = rates
			return nil
		})
	}
	err := write()
	if errors.Is(err, ErrAnswerLost) {
		err = m.h.access(m.part, false, func(tb *table) error {
			if hb := tb.hearts[m.h.id]; hb != nil && hb.Counter == next {
				return nil
			}
			return errCondition
		})
	}
	if err == nil {
		m.counter, m.lastOK = next, began
		return
	}
	if errors.Is(err, errCondition) {
		// Our counter moved under us (an earlier life): adopt it.
		_ = m.h.access(m.part, false, func(tb *table) error {
			if hb := tb.hearts[m.h.id]; hb != nil {
				m.counter = hb.Counter
			}
			return nil
		})
	}
}

// take acquires shard id as it was in the snapshot: owner us, epoch+1, on
// condition that owner and epoch are still what we saw. m.mu must be held.
func (m *member) take(id string, was item) bool {
	epoch := max(was.Epoch, epochBase(m.gen)) + 1
	var granted kinesisload.ShardProgress
	cond := func(it *item) bool { return it.Owner == was.Owner && it.Epoch == was.Epoch }
	err := m.h.access(m.part, true, func(tb *table) error {
		it := tb.items[id]
		if it == nil || !cond(it) {
			return errCondition
		}
		it.Progress = tb.visible(it)
		if it.Progress.State < kinesisload.StateActive {
			it.Progress.State = kinesisload.StateActive // every parent is COMPLETED
		}
		it.Owner, it.Epoch, it.HandoffTo, it.Rate = m.h.id, epoch, "", 0
		granted = it.Progress
		return nil
	})
	if errors.Is(err, ErrAnswerLost) {
		err = m.h.access(m.part, false, func(tb *table) error {
			if it := tb.items[id]; it != nil && it.Owner == m.h.id && it.Epoch == epoch {
				granted = tb.visible(it)
				return nil
			}
			return errCondition
		})
	}
	if err != nil {
		return false
	}
	granted.ShardID = id
	l := &lease{m: m, shard: id, epoch: epoch, progress: granted, acquired: m.acquireReason(was),
		lost: make(chan struct{}), handoff: make(chan struct{})}
	// The rate its last owner published in its heartbeat, or when it
	// released the shard.
	if r := m.hearts[was.Owner].Rates[id]; r > 0 {
		l.meter.Seed(r)
	} else if was.Rate > 0 {
		l.meter.Seed(was.Rate)
	}
	m.held[id] = l
	m.granted = append(m.granted, l)
	return true
}

// acquireReason says why a shard that was as in was is taken by m.
func (m *member) acquireReason(was item) kinesisload.AcquireReason {
	switch {
	case was.Owner == m.h.id:
		return kinesisload.AcquireReclaimed
	case was.Owner != "":
		return kinesisload.AcquireExpired
	case was.HandoffTo == m.h.id:
		return kinesisload.AcquireHandoff // its owner released it to us
	case was.Epoch == 0:
		return kinesisload.AcquireInitial
	default:
		return kinesisload.AcquireUnowned
	}
}

// request asks the owner of id to hand it over. m.mu must be held.
func (m *member) request(id string, was item) bool {
	err := m.h.access(m.part, true, func(tb *table) error {
		it := tb.items[id]
		if it == nil || it.Owner != was.Owner || it.Epoch != was.Epoch || it.HandoffTo != "" {
			return errCondition
		}
		it.HandoffTo = m.h.id
		return nil
	})
	return err == nil || errors.Is(err, ErrAnswerLost)
}

// withdraw removes our handoff request on id. m.mu must be held.
func (m *member) withdraw(id string) {
	_ = m.h.access(m.part, true, func(tb *table) error {
		if it := tb.items[id]; it != nil && it.HandoffTo == m.h.id {
			it.HandoffTo = ""
		}
		return nil
	})
}

// lose marks l lost. m.mu must be held.
func (m *member) lose(l *lease, why kinesisload.LostReason, reason string) {
	l.markLost(why, reason)
	if m.held[l.shard] == l {
		delete(m.held, l.shard)
	}
	m.granted = slices.DeleteFunc(m.granted, func(g *lease) bool { return g == l })
}

// Store implements [kinesisload.Membership].
func (m *member) Store() kinesisload.PositionStore { return sharedStore{m: m} }

var _ kinesisload.StartEpocher = (*member)(nil)

// StartEpoch implements [kinesisload.StartEpocher]: the epoch base of the
// session's generation.
func (m *member) StartEpoch() uint64 { return epochBase(m.gen) }

// Wake implements [kinesisload.Membership].
func (m *member) Wake() <-chan struct{} { return m.wake }

// Acquire implements [kinesisload.Membership].
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
	for _, l := range drop {
		_ = l.Release(ctx)
	}
	return out, nil
}

// Initialise implements [kinesisload.Membership]: the lock is a
// conditional write of the init item; the batch is written as pending
// positions under the lock's token; the commit names the token.
func (m *member) Initialise(ctx context.Context, init kinesisload.InitFunc) error {
	h := m.h
	for {
		if err := m.void(); err != nil {
			return err
		}
		var ii initItem
		var holder *heart
		if err := h.access(m.part, false, func(tb *table) error {
			ii = tb.init
			if hb := tb.hearts[ii.LockOwner]; hb != nil {
				c := *hb
				holder = &c
			}
			return nil
		}); err != nil {
			return err
		}
		if ii.Committed != "" {
			return init(ctx, sharedStore{m: m})
		}
		m.mu.Lock()
		now := h.clock()
		if holder != nil && ii.LockOwner != h.id {
			// A holder we never observed (we joined after it, and had no
			// round yet) is alive from now: its lease duration starts at
			// our first sighting, never before.
			m.observe(ii.LockOwner, *holder, now)
		}
		busy := ii.LockOwner != "" && ii.LockOwner != h.id && m.alive(ii.LockOwner, now)
		m.mu.Unlock()
		if busy {
			// Wait for a round: the holder commits or is seen dead.
			m.roundsMu.Lock()
			next := m.rounds
			m.roundsMu.Unlock()
			select {
			case <-next:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		token := newToken()
		err := h.access(m.part, true, func(tb *table) error {
			if tb.init.LockToken != ii.LockToken || tb.init.Committed != "" {
				return errCondition
			}
			tb.init.LockOwner, tb.init.LockToken = h.id, token
			return nil
		})
		if errors.Is(err, ErrAnswerLost) {
			err = h.access(m.part, false, func(tb *table) error {
				if tb.init.LockToken == token {
					return nil
				}
				return errCondition
			})
		}
		switch {
		case errors.Is(err, errCondition) || errors.Is(err, ErrRefused):
			continue
		case err != nil:
			return err
		}
		if err := init(ctx, stagingStore{m: m, batch: token}); err != nil {
			// Unlock, so another host need not wait for our expiry.
			_ = h.access(m.part, true, func(tb *table) error {
				if tb.init.LockToken == token {
					tb.init.LockOwner = ""
				}
				return nil
			})
			return err
		}
		return m.commitInit(ctx, token)
	}
}

// commitInit writes the commit naming batch token, on condition that the
// lock is still ours and nothing is committed.
func (m *member) commitInit(ctx context.Context, token string) error {
	h := m.h
	m.mu.Lock()
	fenced := m.fenced || h.clock().Sub(m.lastOK) >= h.f.cfg.LeaseDuration-h.f.cfg.FenceMargin
	m.mu.Unlock()
	if fenced {
		return &kinesisload.LeaseLostError{Stream: m.stream, Why: kinesisload.LostSelfFenced, Reason: "fenced before the commit: no heartbeat landed for too long"}
	}
	for {
		err := h.access(m.part, true, func(tb *table) error {
			if tb.init.LockToken != token || tb.init.Committed != "" {
				return errCondition
			}
			tb.init.Committed = token
			tb.lineage++
			return nil
		})
		if errors.Is(err, ErrAnswerLost) {
			err = h.access(m.part, false, func(tb *table) error {
				if tb.init.Committed == token {
					return nil
				}
				if tb.init.LockToken != token || tb.init.Committed != "" {
					return errCondition
				}
				return ErrRefused // did not land: write again
			})
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errCondition):
			return &kinesisload.LeaseLostError{Stream: m.stream, Why: kinesisload.LostCommitRefused, Reason: "another host holds the initialisation lock or committed"}
		case errors.Is(err, ErrRefused):
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		default:
			return err
		}
	}
}

// Leave implements [kinesisload.Membership].
func (m *member) Leave(ctx context.Context) error {
	// left first: a round holds m.mu throughout and returns at once once
	// left is set, so none takes a shard after held is read (it could
	// retake one this very Leave released, and keep it).
	m.mu.Lock()
	m.left = true
	held := slices.Collect(maps.Values(m.held))
	m.mu.Unlock()
	var errs []error
	for _, l := range held {
		errs = append(errs, l.Release(ctx))
	}
	m.mu.Lock()
	for _, l := range m.held {
		m.lose(l, kinesisload.LostReleased, "left")
	}
	m.mu.Unlock()
	err := m.h.access(m.part, true, func(tb *table) error {
		if hb := tb.hearts[m.h.id]; hb != nil {
			hb.Left = true
		}
		return nil
	})
	if errors.Is(err, ErrAnswerLost) {
		err = nil // the write is idempotent; it landed or the heartbeat expires
	}
	errs = append(errs, err)
	close(m.quit)
	m.wg.Wait()
	m.h.f.mu.Lock()
	if m.h.members[m.stream] == m {
		delete(m.h.members, m.stream)
	}
	m.h.f.mu.Unlock()
	return errors.Join(errs...)
}

// lease is one shard's lease.
type lease struct {
	m        *member
	shard    string
	epoch    uint64
	progress kinesisload.ShardProgress

	once     sync.Once
	lost     chan struct{}
	handOnce sync.Once
	handoff  chan struct{}
	acquired kinesisload.AcquireReason
	// meter smooths the bytes the Loader observed into the shard's rate.
	meter kinesisload.RateMeter

	mu       sync.Mutex
	why      kinesisload.LostReason
	reason   string
	released bool
}

var (
	_ kinesisload.Lease        = (*lease)(nil)
	_ kinesisload.LoadObserver = (*lease)(nil)
)

// Observe implements [kinesisload.LoadObserver].
func (l *lease) Observe(bytes int64) { l.meter.Observe(bytes) }

func (l *lease) Shard() string                       { return l.shard }
func (l *lease) Epoch() uint64                       { return l.epoch }
func (l *lease) Progress() kinesisload.ShardProgress { return l.progress }
func (l *lease) Lost() <-chan struct{}               { return l.lost }
func (l *lease) Handoff() <-chan struct{}            { return l.handoff }
func (l *lease) Acquired() kinesisload.AcquireReason { return l.acquired }

// Err implements [kinesisload.Lease].
func (l *lease) Err() error {
	if !l.isLost() {
		return nil
	}
	return l.lostError()
}

func (l *lease) markLost(why kinesisload.LostReason, reason string) {
	l.once.Do(func() {
		l.mu.Lock()
		l.why, l.reason = why, reason
		l.mu.Unlock()
		close(l.lost)
	})
}

func (l *lease) askHandoff() { l.handOnce.Do(func() { close(l.handoff) }) }

func (l *lease) lostError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &kinesisload.LeaseLostError{Stream: l.m.stream, Shard: l.shard, Epoch: l.epoch, Why: l.why, Reason: l.reason}
}

func (l *lease) isLost() bool {
	select {
	case <-l.lost:
		return true
	default:
		return false
	}
}

var _ kinesisload.LeaseChecker = (*lease)(nil)

// Check implements [kinesisload.LeaseChecker]: the lease is lost once the
// host's fence passed (no heartbeat landed for LeaseDuration-FenceMargin
// on its clock), whether or not a round ran since.
func (l *lease) Check() error {
	m, h := l.m, l.m.h
	m.mu.Lock()
	if !l.isLost() && h.clock().Sub(m.lastOK) >= h.f.cfg.LeaseDuration-h.f.cfg.FenceMargin {
		m.lose(l, kinesisload.LostSelfFenced, "fenced: no heartbeat landed for too long")
	}
	m.mu.Unlock()
	if l.isLost() {
		return l.lostError()
	}
	return nil
}

// Commit implements [kinesisload.Lease].
func (l *lease) Commit(ctx context.Context, u kinesisload.ShardProgress) error {
	if u.ShardID != l.shard {
		return fmt.Errorf("coordtest: stream %s: commit of shard %s under the lease of shard %s", l.m.stream, u.ShardID, l.shard)
	}
	m, h := l.m, l.m.h
	if err := l.Check(); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var owner string
		var epoch uint64
		err := h.access(m.part, true, func(tb *table) error {
			it := tb.items[l.shard]
			if it == nil || it.Owner != h.id || it.Epoch != l.epoch {
				if it != nil {
					owner, epoch = it.Owner, it.Epoch
				}
				return errCondition
			}
			before := tb.visible(it)
			it.Progress = kinesisload.MergeProgress(before, u)
			if it.Progress.State != before.State {
				tb.lineage++
			}
			return nil
		})
		if errors.Is(err, ErrAnswerLost) {
			// Read back: landed when we still own it and u changes nothing.
			err = h.access(m.part, false, func(tb *table) error {
				it := tb.items[l.shard]
				if it == nil || it.Owner != h.id || it.Epoch != l.epoch {
					if it != nil {
						owner, epoch = it.Owner, it.Epoch
					}
					return errCondition
				}
				v := tb.visible(it)
				if same(kinesisload.MergeProgress(v, u), v) {
					return nil
				}
				return ErrRefused // did not land: write again
			})
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errCondition):
			m.mu.Lock()
			m.lose(l, kinesisload.LostCommitRefused, fmt.Sprintf("commit refused: owner is %q at epoch %d", owner, epoch))
			m.mu.Unlock()
			return l.lostError()
		case errors.Is(err, ErrRefused):
			// Throttled: the write did not land. Try again until the
			// lease would expire elsewhere: then it is lost.
			m.mu.Lock()
			if h.clock().Sub(m.lastOK) >= h.f.cfg.LeaseDuration-h.f.cfg.FenceMargin {
				m.lose(l, kinesisload.LostSelfFenced, "fenced: no heartbeat landed for too long")
			}
			m.mu.Unlock()
			if l.isLost() {
				return l.lostError()
			}
			time.Sleep(time.Millisecond)
			continue
		default:
			return err
		}
	}
}

func same(a, b kinesisload.ShardProgress) bool {
	return a.State == b.State && a.Position.Equal(b.Position) && slices.Equal(a.Parents, b.Parents)
}

// Release implements [kinesisload.Lease]: owner cleared on condition that
// owner and epoch are ours; a handoff request stays as the requester's
// reservation.
func (l *lease) Release(ctx context.Context) error {
	m, h := l.m, l.m.h
	l.mu.Lock()
	done := l.released
	l.released = true
	l.mu.Unlock()
	if done || l.isLost() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[l.shard] == l {
		delete(m.held, l.shard)
	}
	// Not ours to take back until the Loader offers it again (Acquire):
	// a released shard is for another host.
	delete(m.offer, l.shard)
	err := h.access(m.part, true, func(tb *table) error {
		it := tb.items[l.shard]
		if it == nil || it.Owner != h.id || it.Epoch != l.epoch {
			return nil // lost already: nothing to give up
		}
		it.Owner = ""
		if m.h.f.cfg.BalanceBy == kinesisload.BalanceByThroughput {
			it.Rate = l.meter.Rate()
		}
		tb.lineage++ // a free shard: wake the others
		return nil
	})
	if errors.Is(err, ErrAnswerLost) {
		err = nil // idempotent: it landed, or the lease expires
	}
	l.markLost(kinesisload.LostReleased, "released")
	return err
}

// sharedStore is the shared progress of a stream, through one member.
type sharedStore struct{ m *member }

func (s sharedStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	if err := s.check(ctx, stream); err != nil {
		return nil, err
	}
	out := map[string]kinesisload.ShardProgress{}
	err := s.m.h.access(s.m.part, false, func(tb *table) error {
		for id, it := range tb.items {
			p := tb.visible(it)
			if p.State == 0 && p.Position.Kind == 0 && len(p.Parents) == 0 {
				continue // pending only: invisible
			}
			p.ShardID = id
			p.Parents = slices.Clone(p.Parents)
			out[id] = p
		}
		return nil
	})
	return out, err
}

func (s sharedStore) check(ctx context.Context, stream string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stream != s.m.stream {
		return fmt.Errorf("coordtest: the membership of stream %s used for stream %s", s.m.stream, stream)
	}
	return nil
}

// Save merges every update into its shard's item: one unconditional,
// idempotent write per item.
func (s sharedStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	return s.m.saveEach(ctx, stream, updates, func(tb *table, u kinesisload.ShardProgress) {
		it := tb.items[u.ShardID]
		if it == nil {
			it = &item{}
			tb.items[u.ShardID] = it
			tb.lineage++
		}
		before := tb.visible(it)
		it.Progress = kinesisload.MergeProgress(before, u)
		if it.Progress.State != before.State {
			tb.lineage++
		}
	})
}

// saveEach applies every update to the table with apply, as one
// idempotent single-item write per update (made to land by retry), after
// checking ctx and stream. It is the loop of both stores' Save.
func (m *member) saveEach(ctx context.Context, stream string, updates []kinesisload.ShardProgress, apply func(tb *table, u kinesisload.ShardProgress)) error {
	if err := (sharedStore{m: m}).check(ctx, stream); err != nil {
		return err
	}
	for _, u := range updates {
		if u.ShardID == "" {
			return fmt.Errorf("coordtest: save to stream %s: an update has no shard ID", stream)
		}
		if err := m.retry(ctx, m.part, func(tb *table) error { apply(tb, u); return nil }); err != nil {
			return err
		}
	}
	return nil
}

// retry makes an idempotent write land: a refused write, or one whose
// answer was lost, is written again (writing it twice changes nothing
// more than once).
func (m *member) retry(ctx context.Context, stream string, fn func(tb *table) error) error {
	for {
		err := m.h.access(stream, true, fn)
		if err == nil || !(errors.Is(err, ErrRefused) || errors.Is(err, ErrAnswerLost)) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// stagingStore is the store of the host that holds the initialisation
// lock: Load shows what is committed, Save writes pending positions under
// the lock's token, visible only once the commit names it.
type stagingStore struct {
	m     *member
	batch string
}

func (s stagingStore) Load(ctx context.Context, stream string) (map[string]kinesisload.ShardProgress, error) {
	return sharedStore{m: s.m}.Load(ctx, stream)
}

func (s stagingStore) Save(ctx context.Context, stream string, updates []kinesisload.ShardProgress) error {
	return s.m.saveEach(ctx, stream, updates, func(tb *table, u kinesisload.ShardProgress) {
		it := tb.items[u.ShardID]
		if it == nil {
			it = &item{}
			tb.items[u.ShardID] = it
		}
		if it.Pending == nil {
			it.Pending = map[string]kinesisload.ShardProgress{}
		}
		p := it.Pending[s.batch]
		p.ShardID = u.ShardID
		it.Pending[s.batch] = kinesisload.MergeProgress(p, u)
	})
}

// Identity implements [kinesisload.PositionStore]: the identity item, when
// its generation is the session's; when the fleet started over since, an
// error wrapping a [*kinesisload.StreamMismatchError] (see StartOver).
func (s sharedStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	if err := s.check(ctx, stream); err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	var id kinesisload.StreamIdentity
	var gen uint64
	err := s.m.h.access(stream, false, func(tb *table) error { id, gen = tb.identity, tb.gen; return nil })
	if err != nil {
		return kinesisload.StreamIdentity{}, err
	}
	if gen != s.m.gen {
		return kinesisload.StreamIdentity{}, s.m.void()
	}
	return id, nil
}

// SetIdentity implements [kinesisload.PositionStore]: a conditional write
// of the identity item (it must be absent or equal, in the session's
// generation).
func (s sharedStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	if err := s.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("coordtest: stream %s: SetIdentity with the zero StreamIdentity", stream)
	}
	var stored kinesisload.StreamIdentity
	var gen uint64
	err := s.m.retry(ctx, stream, func(tb *table) error {
		stored, gen = tb.identity, tb.gen
		if stored.IsZero() && gen == s.m.gen {
			tb.identity = id
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case gen != s.m.gen:
		return s.m.void()
	case !stored.IsZero() && !stored.Equal(id):
		return &kinesisload.StreamMismatchError{Stream: stream, Stored: stored, Current: id}
	}
	return nil
}

// StartOver implements [kinesisload.PositionStore] for a fleet: one
// conditional write of the identity item, from (the stored identity, the
// session's generation) to (id, the next generation). Whoever wins, the
// session's generation is over: StartOver returns an error wrapping a
// [*kinesisload.StreamMismatchError] (the Loader starts a new session,
// which joins the new generation and initialises it through its lock as a
// first run), every lease of the session is void, and the old
// generation's items stay as they are, its archive. StartOver does nothing
// when id is the stored identity of the session's generation; it refuses
// an id created no later than the stored one (a host whose view of the
// stream is older than the fleet's must not move it back).
func (s sharedStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	if err := s.check(ctx, stream); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("coordtest: stream %s: StartOver with the zero StreamIdentity", stream)
	}
	m := s.m
	for {
		var stored kinesisload.StreamIdentity
		var gen uint64
		if err := m.h.access(stream, false, func(tb *table) error { stored, gen = tb.identity, tb.gen; return nil }); err != nil {
			return err
		}
		switch {
		case gen != m.gen:
			return m.void()
		case stored.Equal(id):
			return nil
		case !stored.IsZero() && !id.Created.After(stored.Created):
			return fmt.Errorf("coordtest: stream %s: start over on %s refused: the fleet's generation %d reads %s, created later or at once "+
				"(a host may start the fleet over only on a stream created after the one it reads)", stream, id, gen, stored)
		}
		err := m.h.access(stream, true, func(tb *table) error {
			if tb.gen != gen || !tb.identity.Equal(stored) {
				return errCondition
			}
			tb.archived = append(tb.archived, Generation{Gen: gen, Identity: stored, ReplacedBy: id})
			tb.identity, tb.gen = id, gen+1
			return nil
		})
		switch {
		case err == nil, errors.Is(err, errCondition), errors.Is(err, ErrAnswerLost):
			// Moved, by us or by another host (the read at the top
			// tells which generation is in force).
		case errors.Is(err, ErrRefused):
			if err := ctx.Err(); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// void ends the session's generation, if the fleet moved past it: every
// lease is lost ([kinesisload.LostStartedOver]) and Acquire returns the
// error void returns (nil while the generation is in force).
func (m *member) void() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkGen()
}

// checkGen reads the identity item and, when its generation is past the
// session's, voids the session (see void). m.mu must be held.
func (m *member) checkGen() error {
	if m.over != nil {
		return m.over
	}
	var cur kinesisload.StreamIdentity
	var gen uint64
	var old kinesisload.StreamIdentity
	if err := m.h.access(m.stream, false, func(tb *table) error {
		cur, gen = tb.identity, tb.gen
		for _, a := range tb.archived {
			if a.Gen == m.gen {
				old = a.Identity
			}
		}
		return nil
	}); err != nil || gen == m.gen {
		return nil
	}
	m.over = fmt.Errorf("coordtest: stream %s: the fleet started over in generation %d, on the stream re-created under the name; "+
		"this session belongs to generation %d: %w", m.stream, gen, m.gen,
		&kinesisload.StreamMismatchError{Stream: m.stream, Stored: old, Current: cur})
	for _, l := range m.held {
		m.lose(l, kinesisload.LostStartedOver, fmt.Sprintf("the fleet started over in generation %d (the stream was re-created)", gen))
	}
	for _, l := range m.granted {
		l.markLost(kinesisload.LostStartedOver, fmt.Sprintf("the fleet started over in generation %d (the stream was re-created)", gen))
	}
	m.granted = nil
	m.signal()
	return m.over
}

var _ kinesisload.StartStore = stagingStore{}

// LoadStart implements [kinesisload.StartStore]: the T0 in the init item,
// saved by this or an earlier holder of the initialisation lock; in a
// generation started over (see StartOver) that none saved,
// [kinesisload.StartOverT0] of its stream.
func (s stagingStore) LoadStart(ctx context.Context, stream string) (time.Time, bool, error) {
	if err := (sharedStore{m: s.m}).check(ctx, stream); err != nil {
		return time.Time{}, false, err
	}
	var t0 time.Time
	if err := s.m.h.access(s.m.part, false, func(tb *table) error { t0 = tb.init.T0; return nil }); err != nil || !t0.IsZero() || s.m.gen == 0 {
		return t0, err == nil && !t0.IsZero(), err
	}
	err := s.m.h.access(stream, false, func(tb *table) error {
		if tb.gen == s.m.gen {
			t0 = kinesisload.StartOverT0(tb.identity)
		}
		return nil
	})
	return t0, err == nil && !t0.IsZero(), err
}

// SaveStart implements [kinesisload.StartStore]: T0 is written into the
// init item, unless one is there, on condition that the lock is still
// ours; when it is not, a [*kinesisload.LeaseLostError].
func (s stagingStore) SaveStart(ctx context.Context, stream string, t0 time.Time) (time.Time, error) {
	if err := (sharedStore{m: s.m}).check(ctx, stream); err != nil {
		return time.Time{}, err
	}
	if t0.IsZero() {
		return time.Time{}, fmt.Errorf("coordtest: stream %s: SaveStart with the zero time", stream)
	}
	if pending, ok, err := s.LoadStart(ctx, stream); err != nil || ok {
		return pending, err
	}
	var got time.Time
	err := s.m.retry(ctx, s.m.part, func(tb *table) error {
		if tb.init.LockToken != s.batch || tb.init.Committed != "" {
			return errCondition
		}
		if tb.init.T0.IsZero() {
			tb.init.T0 = t0.UTC()
		}
		got = tb.init.T0
		return nil
	})
	if errors.Is(err, errCondition) {
		return time.Time{}, &kinesisload.LeaseLostError{Stream: stream, Why: kinesisload.LostCommitRefused, Reason: "the initialisation lock was taken over before the start time was saved"}
	}
	return got, err
}

// ClearStart implements [kinesisload.StartStore]: nothing is written. T0
// stays in the init item until the commit, which makes it moot (only the
// staging store, before the commit, reads it), so that a host taking over
// from one that died after ClearStart still resolves at it.
func (s stagingStore) ClearStart(ctx context.Context, stream string) error {
	return (sharedStore{m: s.m}).check(ctx, stream)
}

// Identity implements [kinesisload.PositionStore] (as the shared store).
func (s stagingStore) Identity(ctx context.Context, stream string) (kinesisload.StreamIdentity, error) {
	return sharedStore{m: s.m}.Identity(ctx, stream)
}

// SetIdentity implements [kinesisload.PositionStore] (as the shared store:
// every host of the fleet sees the same stream, so it is idempotent).
func (s stagingStore) SetIdentity(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return sharedStore{m: s.m}.SetIdentity(ctx, stream, id)
}

// StartOver implements [kinesisload.PositionStore] (as the shared store).
func (s stagingStore) StartOver(ctx context.Context, stream string, id kinesisload.StreamIdentity) error {
	return sharedStore{m: s.m}.StartOver(ctx, stream, id)
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
