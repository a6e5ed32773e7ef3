package dynamo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// clock is a host's own monotonic clock. Only differences of one host's
// readings are ever used.
type clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Coordinator is the DynamoDB [kinesisload.Coordinator]: give one to each
// host's Loader with [kinesisload.WithCoordinator]; the hosts of an
// application share its table. It is safe for concurrent use; one
// Coordinator may join several streams, each once at a time.
type Coordinator struct {
	api API
	cfg Config
	clk clock
	// manual: rounds run only when tick is called (tests), not on
	// tickers.
	manual bool

	tableMu sync.Mutex
	tableOK bool

	mu      sync.Mutex
	members map[string]*member
}

var _ kinesisload.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator over the table cfg.Table, reached through api
// (a *dynamodb.Client). It validates cfg; the table is checked (and
// created, when cfg.CreateTable allows) at the first Join.
func New(api API, cfg Config) (*Coordinator, error) {
	return newCoordinator(api, cfg, realClock{}, false)
}

func newCoordinator(api API, cfg Config, clk clock, manual bool) (*Coordinator, error) {
	if api == nil {
		return nil, errors.New("dynamo: New: the DynamoDB client is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Coordinator{api: api, cfg: cfg, clk: clk, manual: manual, members: map[string]*member{}}, nil
}

// Config returns the Coordinator's configuration with defaults filled in
// (HostID among them).
func (c *Coordinator) Config() Config { return c.cfg }

// sleep waits d of real time, or until ctx ends.
func (c *Coordinator) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff returns the pause before retry attempt (0-based): 20 ms
// doubling to 1 s, with full jitter.
func backoff(attempt int) time.Duration {
	d := 20 * time.Millisecond << min(attempt, 6)
	d = min(d, time.Second)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

// tick runs one round of every member (tests with a manual clock) and
// waits for them.
func (c *Coordinator) tick() {
	c.mu.Lock()
	ms := slices.Collect(maps.Values(c.members))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(m.tick)
	}
	wg.Wait()
}

// Join implements [kinesisload.Coordinator]: it checks the table (creating
// it when allowed), registers this host's heartbeat item for stream
// (counter incremented, left cleared) and starts its heartbeat and
// balance rounds.
func (c *Coordinator) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	if stream == "" {
		return nil, errors.New("dynamo: Join: the stream name is empty")
	}
	if err := c.ensureTable(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.members[stream] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("dynamo: host %s joined stream %s twice", c.cfg.HostID, stream)
	}
	c.mu.Unlock()
	bg, cancel := context.WithCancel(context.Background())
	m := &member{c: c, stream: stream, ctx: bg, cancel: cancel, held: map[string]*lease{}, unsure: map[string]uint64{}, seen: map[string]seen{},
		offer: map[string]bool{}, wake: make(chan struct{}, 1), ticks: make(chan chan struct{}), quit: make(chan struct{}), rounds: make(chan struct{})}
	// The generation in force: the session belongs to it to the end.
	ii, err := m.readIdentity(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	m.gen, m.part = ii.gen, partition(stream, ii.gen)
	began := c.clk.Now()
	counter, err := m.register(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	m.counter, m.lastOK = counter, began
	c.mu.Lock()
	if c.members[stream] != nil {
		c.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("dynamo: host %s joined stream %s twice", c.cfg.HostID, stream)
	}
	c.members[stream] = m
	c.mu.Unlock()
	if c.manual {
		m.wg.Go(m.manualLoop)
	} else {
		m.wg.Go(m.beatLoop)
		m.wg.Go(m.balanceLoop)
	}
	return m, nil
}

// seen is what a member last observed of another host's heartbeat, on its
// own clock.
type seen struct {
	counter uint64
	left    bool
	at      time.Time
}

// unknownCounter marks a host noticed (as the holder of the
// initialisation lock) before its heartbeat was read.
const unknownCounter = math.MaxUint64

// member is a host's session on one stream, in the generation that was
// current when it joined.
type member struct {
	c      *Coordinator
	stream string
	// gen is the session's generation, part the partition key of its
	// items (heartbeats, init, shards; see partition).
	gen    uint64
	part   string
	ctx    context.Context // cancelled by Leave: ends the rounds' calls
	cancel context.CancelFunc
	ticks  chan chan struct{}
	quit   chan struct{}
	wg     sync.WaitGroup
	wake   chan struct{}
	beatMu sync.Mutex // one heartbeat at a time
	ballMu sync.Mutex // one balance at a time

	roundsMu sync.Mutex
	rounds   chan struct{} // closed and replaced after every balance

	mu        sync.Mutex
	counter   uint64    // our heartbeat counter as last written
	lastOK    time.Time // start of our last heartbeat known to have landed
	fenced    bool
	left      bool
	committed string // the committed initialisation batch, once known
	seen      map[string]seen
	held      map[string]*lease
	granted   []*lease
	offer     map[string]bool
	digest    uint64
	// unsure maps a shard to the epoch of a take that may have landed
	// with no lease to show for it: its answer was lost and could not be
	// read back, or it landed after Leave began (Leave ends the rounds'
	// calls). Leave gives these up too, on condition of that epoch.
	unsure map[string]uint64
	// over is set once the fleet started over in a later generation:
	// the session's leases are void, and Acquire returns it.
	over error
	// genBad is the start of the first of the rounds in a row that
	// could not read the identity item; zero once one could (see
	// genDue).
	genBad time.Time

	// Balance state, touched by the balance round only.
	steal string
	// rates are our shards' rates as last published; hearts the
	// heartbeats as read by the last round (balancing by throughput).
	rates   map[string]float64
	hearts  map[string]heart
	stealAt time.Time
}

// register writes the heartbeat item at Join: counter+1, left cleared.
func (m *member) register(ctx context.Context) (uint64, error) {
	c := m.c
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		out, err := c.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(c.cfg.Table),
			Key:                       itemKey(m.part, prefixHost+c.cfg.HostID),
			UpdateExpression:          aws.String("ADD #c :one SET #l = :f"),
			ExpressionAttributeNames:  map[string]string{"#c": "counter", "#l": "left"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1), ":f": &types.AttributeValueMemberBOOL{Value: false}},
			ReturnValues:              types.ReturnValueAllNew,
		})
		cancel()
		switch classify(err) {
		case classOK:
			return getN(out.Attributes, "counter")
		case classFatal:
			return 0, c.fatal("UpdateItem", err)
		}
		// Unknown: read back. Whatever the counter is, the next
		// heartbeat is conditional on it (and adopts it if it moved).
		if item, rerr := c.get(ctx, m.part, prefixHost+c.cfg.HostID); rerr == nil && item != nil && !getBool(item, "left") {
			return getN(item, "counter")
		}
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return 0, fmt.Errorf("dynamo: host %s joining stream %s: %w", c.cfg.HostID, m.stream, err)
		}
	}
}

func (m *member) manualLoop() {
	for {
		select {
		case ack := <-m.ticks:
			m.beat()
			m.balance()
			close(ack)
		case <-m.quit:
			return
		}
	}
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

func (m *member) balanceLoop() {
	t := time.NewTicker(m.c.cfg.RenewInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.balance()
		case <-m.quit:
			return
		}
	}
}

// tick runs one round on the member's goroutine and waits for it.
func (m *member) tick() {
	ack := make(chan struct{})
	select {
	case m.ticks <- ack:
	case <-m.quit:
		return
	}
	select {
	case <-ack:
	case <-m.quit:
	}
}

func (m *member) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// fenceDue reports whether too long passed since our last heartbeat
// landed. m.mu must be held.
func (m *member) fenceDue(now time.Time) bool {
	cfg := m.c.cfg
	return now.Sub(m.lastOK) >= cfg.LeaseDuration-cfg.FenceMargin
}

// genDue reports whether the rounds have failed to read the session's
// generation for too long: the fleet may have started over since, and
// nothing fences the old generation's items (its commits land in the
// archive), so a host that cannot read the identity item must stop
// reading as a host that cannot renew does. Slow rounds that read it do
// not count. m.mu must be held.
func (m *member) genDue(now time.Time) bool {
	cfg := m.c.cfg
	return m.over == nil && !m.genBad.IsZero() && now.Sub(m.genBad) >= cfg.LeaseDuration-cfg.FenceMargin
}

// genUnread is the reason of a lease lost by genDue. m.mu must be held.
func (m *member) genUnread(now time.Time) string {
	return fmt.Sprintf("fenced: the stream's generation (the identity item) could not be read for %v; the fleet may have started over", now.Sub(m.genBad))
}

// checkFence fences the host when its fence is due: every lease is lost.
// It also drops every lease when the generation is due (genDue), without
// fencing the host: its next round that reads the generation in force
// takes shards again. m.mu must be held.
func (m *member) checkFence() {
	now := m.c.clk.Now()
	if m.genDue(now) {
		for _, l := range m.held {
			m.lose(l, kinesisload.LostSelfFenced, m.genUnread(now))
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

// beat writes counter+1 on condition that the counter is ours; a write
// whose outcome is unknown is read back.
func (m *member) beat() {
	m.beatMu.Lock()
	defer m.beatMu.Unlock()
	c := m.c
	m.mu.Lock()
	if m.left {
		m.mu.Unlock()
		return
	}
	cur, fenceAt := m.counter, m.lastOK.Add(c.cfg.LeaseDuration-c.cfg.FenceMargin)
	began := c.clk.Now()
	var rates map[string]float64
	if c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		rates = make(map[string]float64, len(m.held))
		for id, l := range m.held {
			rates[id] = l.meter.Tick(began)
		}
		m.rates = rates
	}
	m.mu.Unlock()
	timeout := c.cfg.CallTimeout
	if !c.manual {
		// The call must not outlive the moment we fence: after it, the
		// fence is checked.
		if d := fenceAt.Sub(began); d > 0 && d < timeout {
			timeout = d
		}
	}
	ctx, cancel := context.WithTimeout(m.ctx, timeout)
	defer cancel()
	next := cur + 1
	in := &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.cfg.Table),
		Key:                       itemKey(m.part, prefixHost+c.cfg.HostID),
		UpdateExpression:          aws.String("SET #c = :next, #l = :f"),
		ConditionExpression:       aws.String("#c = :cur"),
		ExpressionAttributeNames:  map[string]string{"#c": "counter", "#l": "left"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":next": n(next), ":cur": n(cur), ":f": &types.AttributeValueMemberBOOL{Value: false}},
	}
	if rates != nil {
		// The rates ride on the heartbeat: no write of their own.
		in.UpdateExpression = aws.String("SET #c = :next, #l = :f, #r = :r")
		in.ExpressionAttributeNames["#r"] = "rates"
		in.ExpressionAttributeValues[":r"] = rateAttr(rates)
	}
	if cur == 0 {
		// Our item was removed (see collect): write it afresh.
		in.ConditionExpression = aws.String("attribute_not_exists(#c)")
		delete(in.ExpressionAttributeValues, ":cur")
	}
	_, err := c.api.UpdateItem(ctx, in)
	if classify(err) == classFatal {
		m.fail("UpdateItem", err)
	}
	landed, adopt, gone := err == nil, uint64(0), false
	if cl := classify(err); cl == classCondition || cl == classUnknown {
		item, rerr := c.get(ctx, m.part, prefixHost+c.cfg.HostID)
		switch {
		case rerr != nil:
		case item == nil:
			gone = true
		default:
			got, _ := getN(item, "counter")
			switch {
			case got == next && !getBool(item, "left"):
				landed = true
			case got != cur:
				adopt = got // our counter moved under us (an earlier life)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case landed:
		m.counter, m.lastOK = next, began
		if !m.fenceDue(c.clk.Now()) {
			m.fenced = false
		}
	case adopt != 0:
		m.counter = adopt
	case gone:
		m.counter = 0
	}
	m.checkFence()
}

// collectFactor times LeaseDuration is how long a host's heartbeat must
// stand still in an observer's view before the observer removes its item
// (a host that left is removed at once), when the host owns no shard and
// holds no initialisation lock: stateless hosts with fresh IDs would
// otherwise pile up heartbeat items that every round reads.
const collectFactor = 3

// collect removes the heartbeat items of hosts that left or died long ago
// and own nothing, on condition that their counter has not moved: a host
// that comes back writes its item afresh. At most a few per round.
func (m *member) collect(snap *snapshot, now time.Time) {
	c := m.c
	owns := map[string]bool{snap.init.lockOwner: snap.init.committed == ""}
	for _, it := range snap.shards {
		owns[it.owner] = true
	}
	var gone []string
	m.mu.Lock()
	for id, hb := range snap.hearts {
		s, ok := m.seen[id]
		if id == c.cfg.HostID || !ok || owns[id] || s.counter != hb.counter {
			continue
		}
		if hb.left || now.Sub(s.at) >= collectFactor*c.cfg.LeaseDuration {
			gone = append(gone, id)
		}
	}
	m.mu.Unlock()
	slices.Sort(gone)
	for _, id := range gone[:min(len(gone), 4)] {
		hb := snap.hearts[id]
		ctx, cancel := context.WithTimeout(m.ctx, c.cfg.CallTimeout)
		_, err := c.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                 aws.String(c.cfg.Table),
			Key:                       itemKey(m.part, prefixHost+id),
			ConditionExpression:       aws.String("#c = :c AND #l = :l"),
			ExpressionAttributeNames:  map[string]string{"#c": "counter", "#l": "left"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": n(hb.counter), ":l": &types.AttributeValueMemberBOOL{Value: hb.left}},
		})
		cancel()
		if err == nil {
			m.mu.Lock()
			delete(m.seen, id)
			m.mu.Unlock()
		}
	}
}

// alive reports whether host id counts as alive in m's view: its
// heartbeat moved within LeaseDuration of m's clock, and it has not left.
// m.mu must be held.
func (m *member) alive(id string, now time.Time) bool {
	if id == m.c.cfg.HostID {
		return !m.fenced
	}
	s, ok := m.seen[id]
	return ok && !s.left && now.Sub(s.at) < m.c.cfg.LeaseDuration
}

// free reports whether it may be taken by m: unowned, owned by a host m
// takes for dead, or owned by m in an earlier life; and not reserved by a
// handoff to another live host. m.mu must be held.
func (m *member) free(it *shardItem, now time.Time) bool {
	me := m.c.cfg.HostID
	if it.handoff != "" && it.handoff != me && m.alive(it.handoff, now) {
		return false
	}
	switch {
	case it.owner == "":
		return true
	case it.owner == me:
		return true // a lease of ours we no longer hold
	default:
		return !m.alive(it.owner, now)
	}
}

// leasable reports whether a shard may be read: not COMPLETED, every
// parent in the table COMPLETED.
func leasable(vis map[string]kinesisload.ShardProgress, p kinesisload.ShardProgress) bool {
	if p.State == kinesisload.StateCompleted || p.Position.Kind == scan.KindShardEnd {
		return false
	}
	for _, par := range p.Parents {
		if pp, ok := vis[par]; ok && pp.State != kinesisload.StateCompleted {
			return false
		}
	}
	return true
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

// balance is one round of observation and balance: read the stream's
// items, observe heartbeats, lose leases whose owner or epoch changed,
// answer handoff requests, write coalesced positions that are due, take
// free shards up to the fair share, and ask for one shard from the most
// loaded host when nothing was free.
func (m *member) balance() {
	m.ballMu.Lock()
	defer m.ballMu.Unlock()
	defer m.roundDone()
	c, me := m.c, m.c.cfg.HostID
	m.mu.Lock()
	m.checkFence()
	stop := m.left || m.fenced
	m.mu.Unlock()
	if stop {
		return
	}
	began := c.clk.Now()
	snap, err := c.query(m.ctx, m.part)
	if err != nil {
		if classify(err) == classFatal {
			m.fail("Query", err)
			return
		}
		// Transient; the next round tries again. Whether the fleet
		// started over is still read: an old generation's leases are
		// fenced by nothing else.
		m.readGen(began, nil)
		return
	}
	// Has the fleet started over? Generation 0's Query read the identity
	// item; a later generation's partition does not hold it.
	if !m.readGen(began, snap) {
		return
	}
	now := c.clk.Now()
	committed := snap.init.committed
	vis := make(map[string]kinesisload.ShardProgress, len(snap.shards))
	for id, it := range snap.shards {
		vis[id] = it.visible(committed)
	}

	m.mu.Lock()
	if m.left || m.fenced {
		m.mu.Unlock()
		return
	}
	if committed != "" {
		m.committed = committed
	}
	m.hearts = snap.hearts
	for id, hb := range snap.hearts {
		if id == me {
			continue
		}
		s, ok := m.seen[id]
		if !ok || s.counter != hb.counter || s.left != hb.left {
			m.seen[id] = seen{counter: hb.counter, left: hb.left, at: now}
		}
	}
	if d := digest(vis, committed); d != m.digest {
		m.digest = d
		m.signal()
	}
	for id, epoch := range m.unsure {
		if it, ok := snap.shards[id]; !ok || it.owner != me || it.epoch != epoch {
			delete(m.unsure, id) // it did not land, or moved on since
		}
	}
	var flush []*lease
	for id, l := range m.held {
		it, ok := snap.shards[id]
		switch {
		case !ok || it.owner != me || it.epoch != l.epoch:
			owner, epoch := "", uint64(0)
			if ok {
				owner, epoch = it.owner, it.epoch
			}
			m.lose(l, kinesisload.LostExpired, fmt.Sprintf("owner is %q at epoch %d", owner, epoch))
			continue
		case it.handoff != "" && it.handoff != me:
			l.askHandoff()
		}
		flush = append(flush, l)
	}
	// Fair share by count over the leasable shards and the live hosts.
	live := 1
	for id := range snap.hearts {
		if id != me && m.alive(id, now) {
			live++
		}
	}
	load := map[string]int{}
	var candidates []string
	total := 0
	for id, it := range snap.shards {
		if !leasable(vis, vis[id]) {
			continue
		}
		total++
		if it.owner != "" && it.owner != me && m.alive(it.owner, now) {
			load[it.owner]++
		}
		if m.offer[id] && m.held[id] == nil && m.free(it, now) {
			candidates = append(candidates, id)
		}
	}
	target := int(math.Ceil(float64(total) / float64(live)))
	mine := 0 // a COMPLETED shard not released yet does not count
	for id := range m.held {
		if leasable(vis, vis[id]) {
			mine++
		}
	}
	m.mu.Unlock()

	m.collect(snap, now)

	// Coalesced positions that are due.
	if c.cfg.CheckpointInterval > 0 {
		for _, l := range flush {
			_ = l.flush(m.ctx, false)
		}
	}

	// Reserved for us first, then expired and unowned, in random order
	// so that hosts taking at once rarely collide.
	mrand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	slices.SortStableFunc(candidates, func(a, b string) int {
		ra, rb := snap.shards[a].handoff == me, snap.shards[b].handoff == me
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
		if mine >= target && snap.shards[id].handoff != me {
			break
		}
		if m.take(snap.shards[id], committed) {
			mine++
			took = true
		}
	}
	if m.steal != "" {
		m.mu.Lock()
		l := m.held[m.steal]
		m.mu.Unlock()
		if l != nil || now.Sub(m.stealAt) >= c.cfg.LeaseDuration {
			if l == nil {
				m.withdraw(m.steal)
			}
			m.steal = ""
		}
	}
	// One steal at a time, only when nothing was free: from the most
	// loaded host, when it holds at least two more than we do.
	if !took && m.steal == "" && c.cfg.BalanceBy == kinesisload.BalanceByThroughput {
		m.stealByThroughput(snap, vis, now)
	} else if !took && m.steal == "" {
		victim, most := "", 0
		for _, id := range slices.Sorted(maps.Keys(load)) {
			if load[id] > most {
				victim, most = id, load[id]
			}
		}
		if victim != "" && most >= mine+2 {
			m.mu.Lock()
			var theirs []string
			for id, it := range snap.shards {
				if it.owner == victim && it.handoff == "" && m.offer[id] && leasable(vis, vis[id]) {
					theirs = append(theirs, id)
				}
			}
			m.mu.Unlock()
			if len(theirs) > 0 {
				id := theirs[mrand.IntN(len(theirs))]
				if m.request(snap.shards[id]) {
					m.steal, m.stealAt = id, now
				}
			}
		}
	}
	m.mu.Lock()
	if len(m.granted) > 0 {
		m.signal()
	}
	m.mu.Unlock()
}

// stealByThroughput asks for the shard [kinesisload.PickSteal] picks from
// the live host of the highest load (sum of its shards' weights, by the
// rates in its heartbeat).
func (m *member) stealByThroughput(snap *snapshot, vis map[string]kinesisload.ShardProgress, now time.Time) {
	me := m.c.cfg.HostID
	m.mu.Lock()
	load := map[string]float64{}
	mine := 0.0
	for id, it := range snap.shards {
		if !leasable(vis, vis[id]) {
			continue
		}
		switch {
		case m.held[id] != nil:
			mine += kinesisload.Weight(m.rates[id])
		case it.owner != "" && it.owner != me && m.alive(it.owner, now):
			load[it.owner] += kinesisload.Weight(snap.hearts[it.owner].rates[id])
		}
	}
	victim, most := "", 0.0
	for _, id := range slices.Sorted(maps.Keys(load)) {
		if load[id] > most {
			victim, most = id, load[id]
		}
	}
	theirs := map[string]float64{}
	for id, it := range snap.shards {
		if victim != "" && it.owner == victim && it.handoff == "" && m.offer[id] && leasable(vis, vis[id]) {
			theirs[id] = kinesisload.Weight(snap.hearts[victim].rates[id])
		}
	}
	m.mu.Unlock()
	if victim == "" {
		return
	}
	if id := kinesisload.PickSteal(mine, most, theirs); id != "" && m.request(snap.shards[id]) {
		m.steal, m.stealAt = id, now
	}
}

// digest summarises what the Loader should see change: the shards, their
// states, and the initialisation commit.
func digest(vis map[string]kinesisload.ShardProgress, committed string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(committed))
	for _, id := range slices.Sorted(maps.Keys(vis)) {
		fmt.Fprintf(h, "|%s=%d", id, vis[id].State)
	}
	return h.Sum64()
}

// take acquires the shard as it was read: owner us, epoch+1, on condition
// that the item is unchanged. A write whose outcome is unknown is read
// back.
func (m *member) take(was *shardItem, committed string) bool {
	c, me := m.c, m.c.cfg.HostID
	p := was.visible(committed)
	if p.State < kinesisload.StateActive {
		p.State = kinesisload.StateActive // every parent is COMPLETED
	}
	next := was.folded(p, committed)
	next.owner, next.epoch, next.handoff, next.ver, next.rate = me, max(was.epoch, epochBase(m.gen))+1, "", was.ver+1, 0
	err := c.putShard(m.ctx, m.part, was, next, false)
	if cl := classify(err); cl == classCondition || cl == classUnknown {
		// A refused condition may be the SDK's retry of a write that
		// landed: read back either way.
		got, rerr := c.getShard(m.ctx, m.part, was.id)
		if rerr != nil {
			m.mu.Lock()
			m.unsure[was.id] = next.epoch // it may have landed
			m.mu.Unlock()
			return false
		}
		if got.owner != me || got.epoch != next.epoch {
			return false
		}
		next, err = got, nil
	}
	if err != nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left || m.fenced {
		// Ours in the table, but no lease: Leave gives it up (a fenced
		// host's expires, or it takes it again).
		m.unsure[was.id] = next.epoch
		return false
	}
	delete(m.unsure, was.id)
	granted := next.visible(committed)
	l := &lease{m: m, shard: was.id, epoch: next.epoch, progress: granted, acquired: m.acquireReason(was), cache: next, lastWrite: c.clk.Now(),
		lost: make(chan struct{}), handoff: make(chan struct{})}
	// The rate its last owner published in its heartbeat, or when it
	// released the shard.
	if r := m.hearts[was.owner].rates[was.id]; r > 0 {
		l.meter.Seed(r)
	} else if was.rate > 0 {
		l.meter.Seed(was.rate)
	}
	m.held[was.id] = l
	m.granted = append(m.granted, l)
	return true
}

// acquireReason says why a shard whose item was as in was is taken by m.
func (m *member) acquireReason(was *shardItem) kinesisload.AcquireReason {
	me := m.c.cfg.HostID
	switch {
	case was.owner == me:
		return kinesisload.AcquireReclaimed
	case was.owner != "":
		return kinesisload.AcquireExpired
	case was.handoff == me:
		return kinesisload.AcquireHandoff // its owner released it to us
	case was.epoch == 0:
		return kinesisload.AcquireInitial
	default:
		return kinesisload.AcquireUnowned
	}
}

// request asks the owner of the shard to hand it over.
func (m *member) request(was *shardItem) bool {
	next := *was
	next.handoff, next.ver = m.c.cfg.HostID, was.ver+1
	err := m.c.putShard(m.ctx, m.part, was, &next, false)
	return classify(err) == classOK || classify(err) == classUnknown
}

// withdraw removes our handoff request on the shard.
func (m *member) withdraw(id string) {
	_ = m.update(m.ctx, id, nil, func(it *shardItem) *shardItem {
		if it.handoff != m.c.cfg.HostID {
			return nil
		}
		next := *it
		next.handoff = ""
		return &next
	}, 3)
}

// lose marks l lost. m.mu must be held.
func (m *member) lose(l *lease, why kinesisload.LostReason, reason string) {
	l.markLost(why, reason)
	if m.held[l.shard] == l {
		delete(m.held, l.shard)
	}
	m.granted = slices.DeleteFunc(m.granted, func(g *lease) bool { return g == l })
}

// update makes an idempotent read-modify-write of a shard's item land:
// mutate returns the item as it should be (its ver is set here), or nil
// when nothing is to change. was is the item as last read (nil: read it).
// A condition failure or an unknown outcome reads the item again and
// retries; attempts > 0 bounds the tries.
func (m *member) update(ctx context.Context, id string, was *shardItem, mutate func(*shardItem) *shardItem, attempts int) error {
	c := m.c
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if attempts > 0 && attempt >= attempts {
			return fmt.Errorf("dynamo: stream %s: shard %s: gave up after %d attempts", m.stream, id, attempts)
		}
		if was == nil {
			got, err := c.getShard(ctx, m.part, id)
			switch classify(err) {
			case classOK:
				was = got
			case classFatal:
				return c.fatal("GetItem", err)
			default:
				if err := c.sleep(ctx, backoff(attempt)); err != nil {
					return err
				}
				continue
			}
		}
		next := mutate(was)
		if next == nil {
			return nil
		}
		next.id, next.exists, next.ver = id, true, was.ver+1
		err := c.putShard(ctx, m.part, was, next, false)
		switch classify(err) {
		case classOK:
			return nil
		case classFatal:
			return c.fatal("PutItem", err)
		case classUnknown:
			if err := c.sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		was = nil
	}
}

// readGen reads the identity item (from snap, generation 0's Query, when
// given) and voids the session when the fleet started over; a round that
// began at began and could not read it counts towards genDue. It reports
// whether the round may go on: the generation was read, and is the
// session's.
func (m *member) readGen(began time.Time, snap *snapshot) bool {
	ident, err := identityItem{}, error(nil)
	if snap != nil && m.gen == 0 {
		ident = snap.ident
	} else {
		var item map[string]types.AttributeValue
		if item, err = m.c.get(m.ctx, m.stream, itemIdentity); err == nil && item != nil {
			ident, err = decodeIdentity(item)
		}
	}
	if classify(err) == classFatal {
		m.fail("GetItem", err)
		return false
	}
	m.mu.Lock()
	switch {
	case err == nil:
		m.genBad = time.Time{}
	case m.genBad.IsZero():
		m.genBad = began
	}
	m.mu.Unlock()
	return err == nil && m.void(ident) == nil
}

// void ends the session when ii, the identity item as read, is of a later
// generation than the session's: every lease is lost
// ([kinesisload.LostStartedOver]), and Acquire returns the error void
// returns, which wraps a [*kinesisload.StreamMismatchError]. It returns
// nil while the session's generation is in force.
func (m *member) void(ii identityItem) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over != nil || ii.gen <= m.gen {
		return m.over
	}
	var old kinesisload.StreamIdentity
	for _, a := range ii.archived {
		if a.Gen == m.gen {
			old = a.Identity
		}
	}
	m.over = fmt.Errorf("dynamo: table %s: stream %s: the fleet started over in generation %d, on the stream re-created under the name; "+
		"this session belongs to generation %d: %w", m.c.cfg.Table, m.stream, ii.gen, m.gen,
		&kinesisload.StreamMismatchError{Stream: m.stream, Stored: old, Current: ii.id})
	reason := fmt.Sprintf("the fleet started over in generation %d (the stream was re-created)", ii.gen)
	for _, l := range m.held {
		m.lose(l, kinesisload.LostStartedOver, reason)
	}
	for _, l := range m.granted {
		l.markLost(kinesisload.LostStartedOver, reason)
	}
	m.granted = nil
	m.signal()
	return m.over
}

// fail ends the session on an error a round met that no retry fixes (an
// item that cannot be decoded, access denied, the table gone): Acquire
// returns it as a [*TableError], and the Loader stops with it, instead of
// a host that silently reads nothing. The first error stands.
func (m *member) fail(op string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over == nil {
		m.over = m.c.fatal(op, err)
		m.signal()
	}
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
// balance round; Acquire hands out those for shards of ready and releases
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
		// a failed Release is not retried by Leave, so the shard would
		// stay this host's until its lease expired.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.c.cfg.LeaseDuration)
		defer cancel()
		for _, l := range drop {
			_ = l.Release(rctx)
		}
	}
	return out, nil
}

// Leave implements [kinesisload.Membership]: the rounds stop, every lease
// still held is released (its coalesced position written first), so is
// every shard a take may have won without a lease to show for it (see
// member.unsure), and the heartbeat item is marked left so that the other
// hosts count this host out at once.
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
	// No round runs any more: what it took is in held or unsure.
	m.mu.Lock()
	held := slices.Collect(maps.Values(m.held))
	for id, epoch := range m.unsure {
		if l := m.held[id]; l == nil || l.epoch != epoch {
			// Not read yet (cache nil): released only if the item says
			// it is ours at that epoch.
			held = append(held, &lease{m: m, shard: id, epoch: epoch, lost: make(chan struct{}), handoff: make(chan struct{})})
		}
	}
	m.unsure = map[string]uint64{}
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
	errs = append(errs, m.markLeft(ctx))
	c := m.c
	c.mu.Lock()
	if c.members[m.stream] == m {
		delete(c.members, m.stream)
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// markLeft sets left on the heartbeat item: idempotent, so retried a few
// times; when it does not land the heartbeat expires instead.
func (m *member) markLeft(ctx context.Context) error {
	c := m.c
	var err error
	for attempt := range 3 {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		_, err = c.api.UpdateItem(cctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(c.cfg.Table),
			Key:                       itemKey(m.part, prefixHost+c.cfg.HostID),
			UpdateExpression:          aws.String("SET #l = :t"),
			ExpressionAttributeNames:  map[string]string{"#l": "left"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}},
		})
		cancel()
		switch classify(err) {
		case classOK:
			return nil
		case classFatal:
			return c.fatal("UpdateItem", err)
		}
		if c.sleep(ctx, backoff(attempt)) != nil {
			break
		}
	}
	return fmt.Errorf("dynamo: host %s leaving stream %s: %w (its heartbeat expires instead)", c.cfg.HostID, m.stream, err)
}
