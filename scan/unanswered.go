package scan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/kerr"
)

// errUnanswered marks an AT_TIMESTAMP probe the endpoint left unanswered
// while it answered a control call on the same shard at once. It is not
// retryable: the probe takes it for "no record at or after that time".
var errUnanswered = errors.New("AT_TIMESTAMP GetShardIterator unanswered while the endpoint answers")

// probeIterator gets the AT_TIMESTAMP iterator of a probe. An endpoint may
// leave such a request open when no record arrived at or after the time
// (kinesalite does), which no retry fixes. So each attempt waits at most
// ProbeTimeout; if that passes, a control GetShardIterator AT_TIMESTAMP at
// the anchor's arrival time, where a record is known to exist (s.control),
// is made with the same wait. If the
// control answers, the endpoint is up and silent only about this time: the
// probe fails with errUnanswered. If the control does not answer either,
// the endpoint is slow or down: that is transient, and the attempt fails
// with the probe's timeout, which the call layer retries like any other,
// with twice the wait next time (up to CallTimeout), so a slow network is
// never taken for a silent endpoint. A transient outage therefore never
// ends a probe, and never turns a shard into a full scan.
func (s *shardScan) probeIterator(ctx context.Context, in *kinesis.GetShardIteratorInput) (*kinesis.GetShardIteratorOutput, error) {
	wait := min(s.cfg.ProbeTimeout, s.cfg.CallTimeout)
	var out *kinesis.GetShardIteratorOutput
	err := s.call(ctx, "GetShardIterator", func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, wait)
		o, err := s.client.GetShardIterator(pctx, in, noSDKRetries)
		timedOut := pctx.Err() != nil
		cancel()
		switch {
		case err == nil && o == nil:
			return fmt.Errorf("%w: GetShardIterator returned no output and no error", kerr.ErrOddAnswer)
		case err == nil:
			out = o
			return nil
		case !timedOut || ctx.Err() != nil:
			// An answer (an error), or the attempt's own timeout.
			return err
		case s.answers(ctx, wait):
			return fmt.Errorf("%w: no answer in %v", errUnanswered, wait)
		}
		wait = min(2*wait, s.cfg.CallTimeout)
		return err
	})
	return out, err
}

// controlAt is the control position of a search whose anchor is r: an
// AT_TIMESTAMP at r's arrival time, the same request as a probe at a time
// where a record is known to be, so an endpoint slow at AT_TIMESTAMP (not
// silent) is slow at the control too; AT_SEQUENCE_NUMBER r if r has no
// arrival time.
func controlAt(r record) Position {
	if r.haveTS {
		return AtTimestamp(ms(r.ts))
	}
	return AtSequence(r.seq)
}

// answers reports whether a GetShardIterator at s.control, paced like the
// probes, answers within wait.
func (s *shardScan) answers(ctx context.Context, wait time.Duration) bool {
	in, err := s.control.IteratorInput(s.stream, s.shard)
	if err != nil {
		return false
	}
	// A GetShardIterator of the shard like the probes: paced with them.
	if err := s.pace(ctx, "GetShardIterator"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	s.stats.Calls++
	_, err = s.client.GetShardIterator(ctx, in, noSDKRetries)
	return err == nil
}

// beforeAt returns the records of a page that arrived before T0: the page
// up to its first record that arrived at or after T0 (arrival times are
// in shard order). Without T0, or for records without an arrival time, it
// is the whole page.
func (s *shardScan) beforeAt(recs []types.Record) []types.Record {
	if !s.haveAt {
		return recs
	}
	for i := range recs {
		if ts := recs[i].ApproximateArrivalTimestamp; ts != nil && !ms(*ts).Before(s.at) {
			return recs[:i]
		}
	}
	return recs
}
