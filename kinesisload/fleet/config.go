package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// Config sets a [Coordinator]'s host and timing. The zero Config is valid:
// every field has a documented default.
type Config struct {
	// HostID names this host in the table: the owner of its leases and
	// its entry in the roster. It must be unique among the hosts
	// (processes) of the application that run at once, and must not
	// contain '#'. Default: the hostname, the process ID and 6 random hex
	// digits, so that a restarted process is a new host.
	HostID string

	// LeaseDuration is how long a host's heartbeat must stand still, on
	// an observer's own monotonic clock, before the observer takes the
	// host for dead and its shards for free: the bound on failover after
	// a crash (a dead host's shards move after between one and two lease
	// durations). Default 10 s.
	LeaseDuration time.Duration

	// RenewInterval is how often a host heartbeats (one write of its
	// roster entry, whatever the number of shards it holds), writes the
	// positions it reached (one write for all its shards, when any
	// moved), and balances. Default LeaseDuration/10.
	RenewInterval time.Duration

	// FenceMargin is how long before its leases could expire in any
	// other host's view a host that could not renew stops reading: it
	// fences itself once LeaseDuration-FenceMargin passed since the start
	// of its last heartbeat that landed. It must exceed RenewInterval and
	// be less than LeaseDuration. Default LeaseDuration/3.
	FenceMargin time.Duration

	// BalanceBy is what the hosts balance: [kinesisload.BalanceByCount]
	// (the default: each host within one shard of ceil(shards/hosts)) or
	// [kinesisload.BalanceByThroughput]: each host publishes its load in
	// its heartbeat and its shards' rates with its positions, and steals
	// by the rule of [kinesisload.PickStealWithin], with a margin of a
	// sixteenth of the heaviest shard's rate (at least RateFloor), from
	// the most loaded host it can narrow the spread with. Every host of a
	// fleet must use the same value; a host that sees another balance
	// otherwise logs a warning (and weighs a host balancing by count at
	// RateFloor a shard).
	BalanceBy kinesisload.BalanceBy

	// CheckpointInterval is how often the positions the Loader commits
	// are written (one write per host for all its shards), while any
	// moved: by the first round at least CheckpointInterval less half a
	// RenewInterval after the last write (rounds jitter), so with the
	// default every round writes them. A position is durable within
	// CheckpointInterval (plus a call) of its Commit; after a crash (not a planned move) the records committed
	// since are delivered again, unless a TransactionalSink holds them.
	// Default RenewInterval; it must not be below it.
	CheckpointInterval time.Duration

	// ResyncInterval is how often a host reads its stream's whole
	// partition (every shard item) when its heartbeat shows no change by
	// any host: a change (a lease taken, released or asked for, a state
	// advanced, a shard added) makes every host read it at its next
	// round. At least LeaseDuration; default 3 LeaseDuration (30 s).
	ResyncInterval time.Duration

	// InitStallTimeout bounds how long the holder of the fleet's
	// initialisation lock may go without a sign of progress (a shard
	// resolved, a retry, a write of its batch) before another host takes
	// the lock over; the stalled holder's commit is then refused (fenced
	// by its token). Default 10 LeaseDuration (100 s).
	InitStallTimeout time.Duration

	// CallTimeout bounds each call of the table; a call that times out is
	// retried (a write is read back first to learn whether it landed). A
	// heartbeat's call is also bounded by the moment the host would
	// fence itself. Default RenewInterval.
	CallTimeout time.Duration

	// Logger receives the coordinator's warnings (a host that balances
	// otherwise, hosts of an older version). Default: slog.Default().
	Logger *slog.Logger

	// Clock, if set, is the host's monotonic clock (only differences of
	// its readings are used), for tests that drive time by hand. For
	// deterministic tests and simulations; leave it unset otherwise.
	Clock func() time.Time

	// ManualRounds makes the rounds run only when [Coordinator.Round] is
	// called, not on tickers. For deterministic tests and simulations;
	// leave it unset otherwise.
	ManualRounds bool
}

// DefaultLeaseDuration is [Config.LeaseDuration]'s default.
const DefaultLeaseDuration = 10 * time.Second

// WithDefaults validates c and returns it with its defaults filled in. Its
// messages name the field and its value.
func (c Config) WithDefaults() (Config, error) {
	if c.HostID == "" {
		c.HostID = defaultHostID()
	}
	if strings.Contains(c.HostID, "#") {
		return c, fmt.Errorf("fleet: Config.HostID = %q: must not contain '#'", c.HostID)
	}
	if err := c.BalanceBy.Validate("fleet: Config.BalanceBy"); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"LeaseDuration", c.LeaseDuration}, {"RenewInterval", c.RenewInterval}, {"FenceMargin", c.FenceMargin},
		{"CheckpointInterval", c.CheckpointInterval}, {"ResyncInterval", c.ResyncInterval}, {"InitStallTimeout", c.InitStallTimeout}, {"CallTimeout", c.CallTimeout}} {
		if f.v < 0 {
			return c, fmt.Errorf("fleet: Config.%s = %v: must not be negative (0 means the default)", f.name, f.v)
		}
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 10
	}
	if c.FenceMargin == 0 {
		c.FenceMargin = c.LeaseDuration / 3
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = c.RenewInterval
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = 3 * c.LeaseDuration
	}
	if c.InitStallTimeout == 0 {
		c.InitStallTimeout = 10 * c.LeaseDuration
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = c.RenewInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	switch {
	case c.RenewInterval <= 0 || c.CallTimeout <= 0:
		// A tenth of a LeaseDuration under 10 ns: rounds on a zero
		// ticker, calls under a zero timeout (Join would never succeed).
		return c, fmt.Errorf("fleet: Config.LeaseDuration = %v: too short: RenewInterval (%v) and CallTimeout (%v), a tenth of it by default, must be positive", c.LeaseDuration, c.RenewInterval, c.CallTimeout)
	case c.FenceMargin <= c.RenewInterval:
		return c, fmt.Errorf("fleet: Config.FenceMargin = %v: must exceed RenewInterval = %v (a host checks its fence once a round)", c.FenceMargin, c.RenewInterval)
	case c.FenceMargin >= c.LeaseDuration:
		return c, fmt.Errorf("fleet: Config.FenceMargin = %v: must be less than LeaseDuration = %v", c.FenceMargin, c.LeaseDuration)
	case c.CheckpointInterval < c.RenewInterval:
		return c, fmt.Errorf("fleet: Config.CheckpointInterval = %v: must be at least RenewInterval = %v (positions are written by the rounds)", c.CheckpointInterval, c.RenewInterval)
	case c.ResyncInterval < c.LeaseDuration:
		return c, fmt.Errorf("fleet: Config.ResyncInterval = %v: must be at least LeaseDuration = %v", c.ResyncInterval, c.LeaseDuration)
	}
	return c, nil
}

func defaultHostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "host"
	}
	name = strings.ReplaceAll(name, "#", "-")
	return name + "-" + strconv.Itoa(os.Getpid()) + "-" + newToken()[:6]
}

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
