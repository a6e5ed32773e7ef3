package coordtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// Errors of the fault hooks, kept for code that names them: a fault now
// answers with an error wrapping [fleet.ErrUnknown] (a throttled write, a
// lost answer) or, after Kill, [fleet.ErrDown], and the protocol reads a
// write whose answer was lost back.
var (
	// ErrHostDown is [fleet.ErrDown]: every call of a host after
	// [Fleet.Kill] fails with it, nothing landing.
	ErrHostDown = fleet.ErrDown
	// ErrRefused describes a write that [Fleet.Refuse] refused: it did
	// not land (like a throttled DynamoDB call).
	ErrRefused = errors.New("coordtest: write refused")
	// ErrAnswerLost describes a write that [Fleet.LoseAnswers] made land
	// (or not, by its condition) without telling: like a timeout.
	ErrAnswerLost = errors.New("coordtest: the answer to a write was lost")
)

// Config sets the timing of a [Fleet]. The zero Config is valid.
type Config struct {
	// LeaseDuration is how long a host's heartbeat must stand still, on
	// an observer's own clock, before the observer takes the host for
	// dead and its leases for free. Default 10 s.
	LeaseDuration time.Duration
	// RenewInterval is how often a host heartbeats and balances: one
	// round per interval. Default LeaseDuration/5.
	RenewInterval time.Duration
	// FenceMargin is how long before its lease could expire in another
	// host's view a host that could not renew stops reading. It must
	// exceed RenewInterval. Default LeaseDuration/3.
	FenceMargin time.Duration
	// BalanceBy is what the hosts balance: [kinesisload.BalanceByCount]
	// (the default) or [kinesisload.BalanceByThroughput].
	BalanceBy kinesisload.BalanceBy
}

// Fleet is an in-memory fleet: hosts, each a [fleet.Coordinator]
// ([Fleet.Host]), sharing one [fleet.MemoryTable], each through a
// [fleet.FaultyTable] of its own for the fault hooks. Time is a manual
// clock that moves only by [Fleet.Advance]; each host reads it with its
// own skew ([Fleet.Skew]); no decision of liveness compares two hosts'
// clocks.
type Fleet struct {
	cfg   Config
	table *fleet.MemoryTable

	mu    sync.Mutex
	now   time.Duration // since the fleet was made
	start time.Time
	hosts map[string]*Host
}

// New returns an empty Fleet.
func New(cfg Config) (*Fleet, error) {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 10 * time.Second
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.LeaseDuration / 5
	}
	if cfg.FenceMargin == 0 {
		cfg.FenceMargin = cfg.LeaseDuration / 3
	}
	if _, err := (fleet.Config{LeaseDuration: cfg.LeaseDuration, RenewInterval: cfg.RenewInterval, FenceMargin: cfg.FenceMargin, BalanceBy: cfg.BalanceBy,
		HostID: "check"}).WithDefaults(); err != nil {
		return nil, fmt.Errorf("coordtest: %w", err)
	}
	return &Fleet{cfg: cfg, table: fleet.NewMemoryTable(), start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), hosts: map[string]*Host{}}, nil
}

// Config returns the fleet's timing, with defaults filled in.
func (f *Fleet) Config() Config { return f.cfg }

// Table returns the table the hosts share, for tools and tests (such as
// [fleet.Inspect]).
func (f *Fleet) Table() *fleet.MemoryTable { return f.table }

// Host is one host of a [Fleet]: a [kinesisload.Coordinator] whose rounds
// run when the fleet's time advances.
type Host struct {
	f     *Fleet
	id    string
	coord *fleet.Coordinator
	table *fleet.FaultyTable

	// Guarded by f.mu.
	skew   time.Duration
	killed bool
	// round is closed when the host's last round returns; a round that
	// met a pause waits in it until Resume, and Advance neither waits for
	// it nor starts another meanwhile.
	round chan struct{}
}

var _ kinesisload.Coordinator = (*Host)(nil)

// Host returns the host named id, making it on first use. Its Coordinator
// may Join any stream.
func (f *Fleet) Host(id string) *Host {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.hosts[id]
	if h != nil {
		return h
	}
	h = &Host{f: f, id: id, table: fleet.NewFaultyTable(f.table)}
	coord, err := fleet.New(h.table, fleet.Config{HostID: id, LeaseDuration: f.cfg.LeaseDuration, RenewInterval: f.cfg.RenewInterval,
		FenceMargin: f.cfg.FenceMargin, BalanceBy: f.cfg.BalanceBy, ManualRounds: true, Clock: h.clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(fmt.Sprintf("coordtest: a configuration New accepted is refused: %v", err)) // New validated it
	}
	h.coord = coord
	f.hosts[id] = h
	return h
}

// ID returns the host's name.
func (h *Host) ID() string { return h.id }

// Join implements [kinesisload.Coordinator].
func (h *Host) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	return h.coord.Join(ctx, stream)
}

// Coordinator returns the host's [fleet.Coordinator].
func (h *Host) Coordinator() *fleet.Coordinator { return h.coord }

// clock returns the host's own monotonic reading. Only differences of one
// host's readings are ever used.
func (h *Host) clock() time.Time {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.start.Add(h.f.now + h.skew)
}

// Advance moves every host's clock forward by d, in steps of at most
// RenewInterval, and after each step runs one round of every host that is
// neither paused nor killed, and waits for them. A paused host does
// nothing while time passes: a round that meets the pause (the host was
// paused during it) waits for Resume, Advance goes on without waiting for
// it, and the host has no other round until that one returns. Advance is
// called from one goroutine at a time.
func (f *Fleet) Advance(d time.Duration) {
	for d > 0 {
		step := min(d, f.cfg.RenewInterval)
		d -= step
		f.mu.Lock()
		f.now += step
		var hs []*Host
		var rounds []chan struct{}
		for _, h := range f.hosts {
			if h.killed || h.table.Paused() || h.round != nil && !isClosed(h.round) {
				continue
			}
			h.round = make(chan struct{})
			hs, rounds = append(hs, h), append(rounds, h.round)
		}
		f.mu.Unlock()
		for i, h := range hs {
			go func() {
				defer close(rounds[i])
				h.coord.Round()
			}()
		}
		for i, h := range hs {
			for !isClosed(rounds[i]) && !h.table.Paused() {
				select {
				case <-rounds[i]:
				case <-time.After(time.Millisecond):
				}
			}
		}
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Kill makes host id die: from now on every call of it fails with an
// error wrapping [fleet.ErrDown] (nothing lands), and it heartbeats no
// more. Its leases are not released; they expire in the others' view.
func (f *Fleet) Kill(id string) {
	h := f.Host(id)
	f.mu.Lock()
	h.killed = true
	f.mu.Unlock()
	h.table.Kill()
}

// Pause freezes host id, like SIGSTOP: its calls wait until [Fleet.Resume],
// and it does no round while time passes. A call already in flight
// completes.
func (f *Fleet) Pause(id string) { f.Host(id).table.Pause() }

// Resume undoes [Fleet.Pause]. The host's next round sees how much time
// passed, and fences itself if it could not renew for long enough.
func (f *Fleet) Resume(id string) { f.Host(id).table.Resume() }

// Refuse makes the next n writes of host id fail without landing, as
// throttled writes do.
func (f *Fleet) Refuse(id string, n int) { f.Host(id).table.Refuse(n) }

// LoseAnswers makes the next n writes of host id take effect as usual but
// answer as if they timed out.
func (f *Fleet) LoseAnswers(id string, n int) { f.Host(id).table.LoseAnswers(n) }

// Skew sets host id's clock offset: its clock reads the fleet's time plus
// d. No decision of liveness compares clocks across hosts, so a skew
// changes none; a take's epoch is at least the seconds since 2000 on the
// taker's clock (a host skewed before 2000 moves epochs by one).
func (f *Fleet) Skew(id string, d time.Duration) {
	h := f.Host(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	h.skew = d
}

// Writes returns how many writes host id made (landed or not), for tests
// of the coordination cost.
func (f *Fleet) Writes(id string) int { return f.Host(id).table.Writes() }

// Reads returns how many reads (items or partitions) host id made.
func (f *Fleet) Reads(id string) int { return f.Host(id).table.Reads() }

// ShardInfo is what the table holds for one shard.
type ShardInfo = fleet.ShardInfo

// Generation is one generation of a stream's progress in the table.
type Generation = fleet.Generation

// Shards returns the table of stream's current generation as every host
// sees it, with the positions the owners last wrote.
func (f *Fleet) Shards(stream string) map[string]ShardInfo {
	info, err := fleet.Inspect(context.Background(), f.table, stream)
	if err != nil {
		return nil
	}
	return info.Shards
}

// Generations returns stream's generations, oldest first; the last is the
// current one. A stream never started over has one, generation 0.
func (f *Fleet) Generations(stream string) []Generation {
	info, err := fleet.Inspect(context.Background(), f.table, stream)
	if err != nil {
		return nil
	}
	var out []Generation
	for _, a := range info.Archived {
		out = append(out, a.Generation)
	}
	return append(out, Generation{Gen: info.Generation, Identity: info.Identity})
}

// ShardsOf returns the table of stream's generation gen (an archived one
// after a start-over) as every host saw it.
func (f *Fleet) ShardsOf(stream string, gen uint64) map[string]ShardInfo {
	info, err := fleet.Inspect(context.Background(), f.table, stream)
	if err != nil {
		return nil
	}
	if gen == info.Generation {
		return info.Shards
	}
	for _, a := range info.Archived {
		if a.Gen == gen {
			return a.Shards
		}
	}
	return map[string]ShardInfo{}
}
