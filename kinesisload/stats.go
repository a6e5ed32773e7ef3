package kinesisload

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/scan"
)

// Stats is a snapshot of a [Loader], from [Loader.Stats]: enough for a
// readiness probe (Initialised) and a liveness view (per shard lag,
// retries and the last error).
type Stats struct {
	// Stream is the stream the Loader reads.
	Stream string
	// Running is true while Run is running (also while it retries a
	// failed initialisation, and while paused).
	Running bool
	// Paused is true between [Loader.Pause] and [Loader.Resume].
	Paused bool
	// Initialised is true once the current session's initialisation is
	// journaled and the shards are being read; false before, while
	// paused, and after Run returned.
	Initialised bool
	// WaitingForStream is when Run began to wait for the stream to be
	// ACTIVE again (gone, DELETING or CREATING, with
	// [StreamRecreatedStartOver]; see Config.StreamWaitTimeout); zero
	// while it does not wait.
	WaitingForStream time.Time
	// Retries counts the retries of calls that are not about one shard
	// (ListShards, initialisation) since the Loader was created.
	Retries int
	// LastError is the last error of such a call that was retried, and
	// LastErrorAt when it happened; empty and zero if none.
	LastError   string
	LastErrorAt time.Time
	// Shards are the shards the Loader tracks, by ShardID.
	Shards []ShardStats
	// Leases are the leases this host holds now, by ShardID: the shards
	// it reads. With the default coordinator (one process) every shard
	// being read has one, at epoch 0.
	Leases []LeaseStats
	// LeasesAcquired, LeasesLost and LeasesHandedOff count, since the
	// Loader was created, the leases this host started reading under,
	// lost, and handed off on a planned move: the events of
	// [HookLeaseAcquired], [HookLeaseLost] and [HookLeaseHandedOff].
	LeasesAcquired, LeasesLost, LeasesHandedOff int
	// LeasesLostBy counts LeasesLost by reason (such as [LostSinkFenced]:
	// a TransactionalSink refused a batch of this host's that another
	// host had overtaken); nil until a lease is lost.
	LeasesLostBy map[LostReason]int
	// Windows counts the windows of batches delivered and committed since
	// the Loader was created (see Config.MaxBatchWait, [MultiSink]: the
	// events of [HookWindowDelivered]), and WindowsBy by what closed them;
	// nil until a window is.
	Windows   int
	WindowsBy map[WindowReason]int
}

// LeaseStats is one lease this host holds, in [Stats].
type LeaseStats struct {
	ShardID string
	// Epoch is the lease's fencing epoch.
	Epoch uint64
	// Reason says why it was granted.
	Reason AcquireReason
	// Since is when this host started reading under it.
	Since time.Time
}

// ShardStats is the state of one shard in [Stats].
type ShardStats struct {
	ShardID string
	// State is the shard's durable state.
	State ShardState
	// Position is where reading resumes, as committed: the start, the
	// position after the last record the Sink accepted, or SHARD_END.
	Position scan.Position
	// Reading is true while a consume loop runs for the shard.
	Reading bool
	// MillisBehindLatest is what the shard's last GetRecords page (or
	// fan-out event) reported; -1 until one was read. It is as old as
	// ReadAge: while the shard cannot be read (an outage, throttling, a
	// Sink that holds its loop, a shard this host does not read) it keeps
	// its last value, which says nothing of the records that arrive
	// meanwhile. Watch LagMillis.
	MillisBehindLatest int64
	// LastReadAt is when the shard's last page (or event) was read
	// successfully, empty pages included: a shard that is read, idle or
	// not, has a recent one. Zero until a page was read.
	LastReadAt time.Time
	// ReadAge is how long before the snapshot LastReadAt was: the time
	// the shard has gone unread. -1 until a page was read.
	ReadAge time.Duration
	// LagMillis bounds how far behind the stream's tip the shard's
	// reading is: MillisBehindLatest plus ReadAge in milliseconds, since
	// records may have arrived since the last read. It grows while the
	// shard is not read, and is about an idle poll (Config.IdleWait)
	// while an idle shard is. -1 until a page was read.
	LagMillis int64
	// OutOfRange counts the KPL user records delivered from the shard
	// whose hash keys lie outside its range, and DecodeFailed the
	// records delivered whole because they could not be decoded, since
	// the Loader was created (see [HookHashKeyOutOfRange] and
	// [HookDecodeFailed]; the log has at most a line a minute of each
	// per shard).
	OutOfRange, DecodeFailed int
	// WindowRecords and WindowBytes are the shard's records read and not
	// yet committed because they wait in windows (see
	// Config.MaxBatchWait): in the open window, and in the one being
	// delivered. WindowSince is when the oldest of them was read (zero
	// when there is none), and WindowAge how long before the snapshot
	// that was: the lag the windows add to LagMillis. 0 without windows.
	WindowRecords int
	WindowBytes   int64
	WindowSince   time.Time
	WindowAge     time.Duration
	// Retries counts the retries of the shard's Kinesis calls and Sink
	// deliveries since the Loader was created.
	Retries int
	// LastError is the last error that was retried for the shard, and
	// LastErrorAt when it happened; empty and zero if none.
	LastError   string
	LastErrorAt time.Time
}

// Stats returns a snapshot of the Loader. It is safe to call at any time,
// from any goroutine, and cheap enough for a probe.
func (l *Loader) Stats() Stats {
	l.mu.Lock()
	running, paused := l.running, l.paused
	l.mu.Unlock()
	s := l.stats.snapshot()
	s.Stream, s.Running, s.Paused = l.cfg.Stream, running, paused
	return s
}

// statsTracker holds what [Loader.Stats] reports. Every method is safe for
// concurrent use.
type statsTracker struct {
	// clock is the time of the snapshots and of the reads; time.Now
	// unless a test sets it before the Loader runs.
	clock func() time.Time

	mu          sync.Mutex
	initialised bool
	waiting     time.Time
	retries     int
	lastErr     string
	lastErrAt   time.Time
	shards      map[string]*ShardStats
	leases      map[string]LeaseStats
	// acquired, lost and handedOff count lease events; lostBy counts
	// lost by reason.
	acquired, lost, handedOff int
	lostBy                    map[LostReason]int
	// windows counts the windows delivered; windowsBy by reason.
	windows   int
	windowsBy map[WindowReason]int
}

// leaseEnd is how a lease ended, for the counts of [Stats] (a lost
// lease: see leaseLost).
type leaseEnd uint8

const (
	endUncounted leaseEnd = iota // its shard ended, or left to expire: not counted
	endHandedOff
)

func (t *statsTracker) shard(id string) *ShardStats {
	if t.shards == nil {
		t.shards = map[string]*ShardStats{}
	}
	s := t.shards[id]
	if s == nil {
		s = &ShardStats{ShardID: id, MillisBehindLatest: -1}
		t.shards[id] = s
	}
	return s
}

// setInitialised marks the session initialised (reading) or not.
func (t *statsTracker) setInitialised(v bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.initialised = v
	if !v {
		for _, s := range t.shards {
			s.Reading = false
		}
		clear(t.leases) // the session left the fleet
	}
}

// leaseAcquired records a lease this host reads under from at.
func (t *statsTracker) leaseAcquired(shard string, epoch uint64, why AcquireReason, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases == nil {
		t.leases = map[string]LeaseStats{}
	}
	t.leases[shard] = LeaseStats{ShardID: shard, Epoch: epoch, Reason: why, Since: at}
	t.acquired++
}

// leaseEnded records that the lease of shard ended how.
func (t *statsTracker) leaseEnded(shard string, how leaseEnd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.leases, shard)
	if how == endHandedOff {
		t.handedOff++
	}
}

// leaseLost records that the lease of shard was lost, and why.
func (t *statsTracker) leaseLost(shard string, why LostReason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.leases, shard)
	t.lost++
	if t.lostBy == nil {
		t.lostBy = map[LostReason]int{}
	}
	t.lostBy[why]++
}

// position returns shard's committed position as last saved.
func (t *statsTracker) position(shard string) scan.Position {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.shards[shard]; s != nil {
		return s.Position
	}
	return scan.Position{}
}

// saved merges durable updates of shard progress.
func (t *statsTracker) saved(updates []ShardProgress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, u := range updates {
		if u.ShardID == "" {
			continue
		}
		s := t.shard(u.ShardID)
		p := merge(ShardProgress{ShardID: u.ShardID, State: s.State, Position: s.Position}, u)
		s.State, s.Position = p.State, p.Position
	}
}

// resumed sets shard's position to where a lease resumes reading it,
// which may be behind what was saved before (a rewind).
func (t *statsTracker) resumed(shard string, pos scan.Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shard(shard).Position = pos
}

// restart sets the shards' state and position to seed, the progress a
// session starts from, which may be behind what was saved before (a
// rewind, or a re-created stream whose shards reuse the old stream's
// IDs), and drops the shards seed does not hold.
func (t *statsTracker) restart(seed []ShardProgress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := make(map[string]bool, len(seed))
	for _, p := range seed {
		s := t.shard(p.ShardID)
		s.State, s.Position = p.State, p.Position
		keep[p.ShardID] = true
	}
	maps.DeleteFunc(t.shards, func(id string, _ *ShardStats) bool { return !keep[id] })
}

// forget drops shards, pruned from the store: Kinesis no longer lists
// them and no Loader reads them again.
func (t *statsTracker) forget(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		delete(t.shards, id)
	}
}

// reading records whether a consume loop runs for shard.
func (t *statsTracker) reading(shard string, v bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shard(shard).Reading = v
}

// fetched records a page read successfully and the lag it reported.
func (t *statsTracker) fetched(shard string, behind int64) {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shard(shard)
	s.MillisBehindLatest, s.LastReadAt = behind, now
}

// windowed records what shard has in windows: records, bytes, and when
// the oldest was read (zero: none).
func (t *statsTracker) windowed(shard string, records int, bytes int64, since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shard(shard)
	s.WindowRecords, s.WindowBytes, s.WindowSince = records, bytes, since
}

// windowDelivered counts a window delivered, closed for why.
func (t *statsTracker) windowDelivered(why WindowReason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.windows++
	if t.windowsBy == nil {
		t.windowsBy = map[WindowReason]int{}
	}
	t.windowsBy[why]++
}

// waitingForStream records since when Run waits for the stream; zero when
// it does not.
func (t *statsTracker) waitingForStream(since time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waiting = since
}

// outOfRange counts n user records of shard outside its hash key range.
func (t *statsTracker) outOfRange(shard string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shard(shard).OutOfRange += n
}

// decodeFailed counts a record of shard that could not be decoded.
func (t *statsTracker) decodeFailed(shard string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shard(shard).DecodeFailed++
}

// retried counts one retry; shard is empty for a call about the stream.
func (t *statsTracker) retried(shard string, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if shard == "" {
		t.retries++
		t.lastErr, t.lastErrAt = msg, now
		return
	}
	s := t.shard(shard)
	s.Retries++
	s.LastError, s.LastErrorAt = msg, now
}

func (t *statsTracker) snapshot() Stats {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Initialised: t.initialised, WaitingForStream: t.waiting, Retries: t.retries, LastError: t.lastErr, LastErrorAt: t.lastErrAt}
	for _, sh := range t.shards {
		c := *sh
		c.ReadAge, c.LagMillis = -1, -1
		if !c.LastReadAt.IsZero() {
			c.ReadAge = max(now.Sub(c.LastReadAt), 0)
			c.LagMillis = max(c.MillisBehindLatest, 0) + c.ReadAge.Milliseconds()
		}
		if !c.WindowSince.IsZero() {
			c.WindowAge = max(now.Sub(c.WindowSince), 0)
		}
		s.Shards = append(s.Shards, c)
	}
	slices.SortFunc(s.Shards, func(a, b ShardStats) int { return strings.Compare(a.ShardID, b.ShardID) })
	for _, ls := range t.leases {
		s.Leases = append(s.Leases, ls)
	}
	slices.SortFunc(s.Leases, func(a, b LeaseStats) int { return strings.Compare(a.ShardID, b.ShardID) })
	s.LeasesAcquired, s.LeasesLost, s.LeasesHandedOff = t.acquired, t.lost, t.handedOff
	if t.lostBy != nil {
		s.LeasesLostBy = maps.Clone(t.lostBy)
	}
	s.Windows = t.windows
	if t.windowsBy != nil {
		s.WindowsBy = maps.Clone(t.windowsBy)
	}
	return s
}
