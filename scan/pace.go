package scan

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/internal/backoff"
)

// DefaultCallInterval is the least time between two calls of one operation
// on one shard when [Config.CallInterval] is zero: Kinesis serves 5
// GetRecords and 5 GetShardIterator calls per second per shard.
const DefaultCallInterval = 200 * time.Millisecond

// configClock is the [backoff.Clock] of a Config's Now and Sleep, so that
// pacing runs on the same (possibly manual) clock as the backoff.
type configClock struct{ cfg *Config }

func (c configClock) Now() time.Time { return c.cfg.Now() }

func (c configClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	return c.cfg.Sleep(ctx, d)
}

// pace waits until op may be called on the scan's shard: one pacer per
// operation, each letting one call through per [Config.CallInterval].
func (s *shardScan) pace(ctx context.Context, op string) error {
	if s.cfg.CallInterval <= 0 {
		return nil
	}
	p := s.pacers[op]
	if p == nil {
		if s.pacers == nil {
			s.pacers = map[string]*backoff.Pacer{}
		}
		p = backoff.NewPacer(s.cfg.CallInterval, configClock{s.cfg})
		s.pacers[op] = p
	}
	return p.Wait(ctx)
}
