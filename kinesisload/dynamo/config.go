package dynamo

import (
	"errors"
	"log/slog"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
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

	// RenewInterval is how often a host heartbeats (one write, whatever
	// the number of shards it holds), writes the positions it reached
	// (one write for all its shards, when any moved), and balances.
	// Default LeaseDuration/10.
	RenewInterval time.Duration

	// FenceMargin is how long before its leases could expire in any
	// other host's view a host that could not renew stops reading. It
	// must exceed RenewInterval and be less than LeaseDuration. Default
	// LeaseDuration/3.
	FenceMargin time.Duration

	// BalanceBy is what the hosts balance: [kinesisload.BalanceByCount]
	// (the default: each host within one shard of ceil(shards/hosts)) or
	// [kinesisload.BalanceByThroughput]. Every host of a fleet must use
	// the same value; a host that sees another balance otherwise logs a
	// warning.
	BalanceBy kinesisload.BalanceBy

	// CheckpointInterval is how often the positions the Loader commits
	// are written (one write per host for all its shards), while any
	// moved: by the first round at least CheckpointInterval less half a
	// RenewInterval after the last write, so with the default every round
	// writes them. A position is durable within CheckpointInterval of its
	// Commit; after a crash
	// (not a planned move) the records committed since are delivered
	// again, unless a TransactionalSink holds them. Default RenewInterval;
	// it must not be below it.
	CheckpointInterval time.Duration

	// ResyncInterval is how often a host reads its stream's whole
	// partition when no host changed anything (a change makes every host
	// read it at its next round). At least LeaseDuration; default 3
	// LeaseDuration.
	ResyncInterval time.Duration

	// InitStallTimeout bounds how long the holder of the fleet's
	// initialisation lock may go without a sign of progress before
	// another host takes the lock over. Default 10 LeaseDuration.
	InitStallTimeout time.Duration

	// CallTimeout bounds each DynamoDB call; a call that times out is
	// retried (a write is read back first to learn whether it landed).
	// Default RenewInterval.
	CallTimeout time.Duration

	// Logger receives the Coordinator's warnings. Default
	// slog.Default().
	Logger *slog.Logger
}

// DefaultLeaseDuration is [Config.LeaseDuration]'s default.
const DefaultLeaseDuration = fleet.DefaultLeaseDuration

// fleetConfig is the protocol's part of c.
func (c Config) fleetConfig() fleet.Config {
	return fleet.Config{HostID: c.HostID, LeaseDuration: c.LeaseDuration, RenewInterval: c.RenewInterval, FenceMargin: c.FenceMargin,
		BalanceBy: c.BalanceBy, CheckpointInterval: c.CheckpointInterval, ResyncInterval: c.ResyncInterval,
		InitStallTimeout: c.InitStallTimeout, CallTimeout: c.CallTimeout, Logger: c.Logger}
}

// withDefaults validates c and fills in its defaults (those of the
// protocol's [fleet.Config]).
func (c Config) withDefaults(fc fleet.Config) (Config, fleet.Config, error) {
	if c.Table == "" {
		return c, fc, errors.New("dynamo: Config.Table is required")
	}
	fc, err := fc.WithDefaults()
	if err != nil {
		return c, fc, err
	}
	c.HostID, c.LeaseDuration, c.RenewInterval, c.FenceMargin = fc.HostID, fc.LeaseDuration, fc.RenewInterval, fc.FenceMargin
	c.CheckpointInterval, c.ResyncInterval, c.InitStallTimeout, c.CallTimeout, c.Logger = fc.CheckpointInterval, fc.ResyncInterval, fc.InitStallTimeout, fc.CallTimeout, fc.Logger
	return c, fc, nil
}
