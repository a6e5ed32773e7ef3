package dynamo

import (
	"context"
	"sync"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/fleet"
)

// Coordinator is the DynamoDB [kinesisload.Coordinator]: the fleet
// protocol ([fleet.Coordinator]) over the DynamoDB [Table]. Give one to
// each host's Loader with [kinesisload.WithCoordinator]; the hosts of an
// application share its table. It is safe for concurrent use; one
// Coordinator may join several streams, each once at a time.
type Coordinator struct {
	*fleet.Coordinator
	cfg   Config
	table *Table

	tableMu sync.Mutex
	tableOK bool
}

var _ kinesisload.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator over the table cfg.Table, reached through api
// (a *dynamodb.Client). It validates cfg; the table is checked (and
// created, when cfg.CreateTable allows) at the first Join.
func New(api API, cfg Config) (*Coordinator, error) {
	return newCoordinator(api, cfg, cfg.fleetConfig())
}

// newCoordinator is New with the protocol's configuration given (tests
// set its clock and manual rounds).
func newCoordinator(api API, cfg Config, fc fleet.Config) (*Coordinator, error) {
	if api == nil {
		return nil, errNilAPI
	}
	cfg, fc, err := cfg.withDefaults(fc)
	if err != nil {
		return nil, err
	}
	t := NewTable(api, cfg.Table, cfg.CallTimeout)
	c, err := fleet.New(t, fc)
	if err != nil {
		return nil, err
	}
	return &Coordinator{Coordinator: c, cfg: cfg, table: t}, nil
}

// Config returns the Coordinator's configuration with defaults filled in
// (HostID among them).
func (c *Coordinator) Config() Config { return c.cfg }

// DynamoTable returns the Coordinator's [Table].
func (c *Coordinator) DynamoTable() *Table { return c.table }

// ensureTable checks that the table exists with the right key, creating
// it when Config.CreateTable allows. It succeeds once per Coordinator.
func (c *Coordinator) ensureTable(ctx context.Context) error {
	c.tableMu.Lock()
	defer c.tableMu.Unlock()
	if c.tableOK {
		return nil
	}
	if err := c.table.Ensure(ctx, c.cfg.CreateTable); err != nil {
		return err
	}
	c.tableOK = true
	return nil
}

// Join implements [kinesisload.Coordinator]: it checks the table
// (creating it when allowed), then joins the stream's fleet (see
// [fleet.Coordinator.Join]).
func (c *Coordinator) Join(ctx context.Context, stream string) (kinesisload.Membership, error) {
	if err := c.ensureTable(ctx); err != nil {
		return nil, err
	}
	return c.Coordinator.Join(ctx, stream)
}

// Inspect reads stream's items for tools and tests (see [fleet.Inspect]).
// It does not join the fleet and writes nothing.
func (c *Coordinator) Inspect(ctx context.Context, stream string) (StreamInfo, error) {
	if err := c.ensureTable(ctx); err != nil {
		return StreamInfo{}, err
	}
	return fleet.Inspect(ctx, c.table, stream)
}
