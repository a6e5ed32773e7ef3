package dynamo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
)

// Config configures a [Coordinator]. Table is required; every other field
// has a documented default.
type Config struct {
	// Table is the DynamoDB table of the application: one per
	// application, shared by every host and every stream it loads. Its
	// key is the partition key "stream" (S) and the sort key "item" (S).
	// Required.
	Table string

	// CreateTable lets the Coordinator create the table when it does not
	// exist, with on-demand (PAY_PER_REQUEST) billing, and wait until it
	// is ACTIVE; it needs the dynamodb:CreateTable permission. Without
	// it, a missing table is an error naming the table and the
	// permission. Default false.
	CreateTable bool

	// HostID names this host in the table: the owner of its leases and
	// the key of its heartbeat item. It must be unique among the hosts
	// (processes) of the application that run at once. Default: the
	// hostname, the process ID and 6 random hex digits, so that a
	// restarted process is a new host.
	HostID string

	// LeaseDuration is how long a host's heartbeat counter must stay
	// unchanged, on an observer's own monotonic clock, before the
	// observer takes the host for dead and its shards for free: the
	// bound on failover time after a crash (a dead host's shards move
	// after between one and two lease durations). Shorter means faster
	// failover and more risk that a host paused longer than
	// LeaseDuration-FenceMargin (a long GC, a stalled network) fences
	// itself. Default 10 s.
	LeaseDuration time.Duration

	// RenewInterval is how often a host writes its heartbeat (one write
	// per host, however many shards it holds) and balances. Default
	// LeaseDuration/10: a joining host takes its fair share in about
	// fair share x 2 x RenewInterval (one steal at a time, two rounds
	// each), within 3 lease durations up to a share of 15 shards.
	RenewInterval time.Duration

	// FenceMargin is how long before its leases could expire in any
	// other host's view a host that could not renew stops reading: it
	// fences itself (every Lease.Lost is closed, nothing more is
	// committed) once LeaseDuration-FenceMargin passed since the start
	// of its last heartbeat that landed. It must exceed RenewInterval
	// and be less than LeaseDuration. Default LeaseDuration/3.
	FenceMargin time.Duration

	// BalanceBy is what the hosts balance: [kinesisload.BalanceByCount]
	// (the default: each host within one shard of ceil(shards/hosts)) or
	// [kinesisload.BalanceByThroughput]: each host publishes its shards'
	// rates (bytes/s, a one-minute moving average of what the Sink
	// accepted) in its heartbeat item, which it writes anyway, and a host
	// steals by the rule of [kinesisload.PickSteal]. Every host of a
	// fleet must use the same value.
	BalanceBy kinesisload.BalanceBy

	// CheckpointInterval coalesces a shard's position commits: a Commit
	// that only moves the position is written at most once per interval
	// (the Coordinator's renew round writes the latest one when it is
	// due), so a busy shard costs one write per interval however many
	// batches it commits. Commits that change a state (DRAINING,
	// COMPLETED) or parents are written at once, and a handoff, a
	// Release and Leave write the coalesced position first. The
	// trade-off: after a crash (not a planned move), the records of up
	// to CheckpointInterval plus one batch are delivered again, and a
	// coalesced Commit returns before its position is durable. With a
	// TransactionalSink, whose own stored positions are the truth, it
	// costs nothing in correctness. Zero (the default) writes every
	// Commit before it returns.
	CheckpointInterval time.Duration

	// CallTimeout bounds each DynamoDB call; a call that times out is
	// retried (a write is read back first to learn whether it landed).
	// A heartbeat's call is also bounded by the moment the host would
	// fence itself. Default RenewInterval.
	CallTimeout time.Duration
}

// DefaultLeaseDuration is [Config.LeaseDuration]'s default.
const DefaultLeaseDuration = 10 * time.Second

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		return c, errors.New("dynamo: Config.Table is required")
	}
	if c.HostID == "" {
		c.HostID = defaultHostID()
	}
	if strings.ContainsAny(c.HostID, "#") {
		return c, fmt.Errorf("dynamo: Config.HostID = %q: must not contain '#'", c.HostID)
	}
	if err := c.BalanceBy.Validate("dynamo: Config.BalanceBy"); err != nil {
		return c, err
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
	if c.CallTimeout == 0 {
		c.CallTimeout = c.RenewInterval
	}
	switch {
	case c.LeaseDuration < 0:
		return c, fmt.Errorf("dynamo: Config.LeaseDuration = %v: must not be negative", c.LeaseDuration)
	case c.RenewInterval < 0:
		return c, fmt.Errorf("dynamo: Config.RenewInterval = %v: must not be negative", c.RenewInterval)
	case c.FenceMargin < 0:
		return c, fmt.Errorf("dynamo: Config.FenceMargin = %v: must not be negative", c.FenceMargin)
	case c.CheckpointInterval < 0:
		return c, fmt.Errorf("dynamo: Config.CheckpointInterval = %v: must not be negative", c.CheckpointInterval)
	case c.CallTimeout < 0:
		return c, fmt.Errorf("dynamo: Config.CallTimeout = %v: must not be negative", c.CallTimeout)
	case c.FenceMargin <= c.RenewInterval:
		return c, fmt.Errorf("dynamo: Config.FenceMargin = %v: must exceed RenewInterval = %v (a host checks its fence once a round)", c.FenceMargin, c.RenewInterval)
	case c.FenceMargin >= c.LeaseDuration:
		return c, fmt.Errorf("dynamo: Config.FenceMargin = %v: must be less than LeaseDuration = %v", c.FenceMargin, c.LeaseDuration)
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
