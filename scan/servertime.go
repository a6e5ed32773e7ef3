package scan

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/middleware"

	"github.com/tidemark/tidemark/internal/kerr"
)

// HostClockBound is how far this host's clock is trusted to be from
// Kinesis's. It is used only when no response carries a server time (a
// [Client] that does not pass the SDK's response metadata through): then
// [Resolver.Now] returns this host's clock minus HostClockBound, so that T0
// is never later than Kinesis's clock and no record is taken for "before the
// start" that was not. Five minutes is the skew beyond which AWS refuses a
// request signed with this host's clock (SigV4).
const HostClockBound = 5 * time.Minute

// serverTimeKey keys the server time a non-SDK Client records in a
// response's metadata with [SetServerTime].
type serverTimeKey struct{}

// SetServerTime records t as the server's clock when it answered, in the
// metadata of a response. The SDK records the HTTP Date of every real
// response itself; an in-memory Kinesis (such as
// [github.com/tidemark/tidemark/kinesisload/kinesistest]) calls this to
// serve the same information. Like an HTTP Date, t should be floored to the
// second.
func SetServerTime(md *middleware.Metadata, t time.Time) {
	md.Set(serverTimeKey{}, t)
}

// ServerTime returns the server's clock when it answered, from a response's
// metadata: the SDK's record of the HTTP Date header (whole seconds), or
// what [SetServerTime] recorded. ok is false when neither is there.
func ServerTime(md middleware.Metadata) (t time.Time, ok bool) {
	if t, ok := awsmiddleware.GetServerTime(md); ok && !t.IsZero() {
		return t, true
	}
	t, ok = md.Get(serverTimeKey{}).(time.Time)
	return t, ok && !t.IsZero()
}

// Now returns Kinesis's clock at the moment Now was called, to the
// millisecond, for use as [Request.At]. It makes one ListShards call on
// stream (MaxResults 1) with the Resolver's call timeout and retries, and
// takes the server time of the answer (its HTTP Date, whole seconds, see
// [ServerTime]) minus the time elapsed on this host ([Config.Now]) since the
// call began. The result is never later than Kinesis's clock at the call,
// and at most one second plus the call's duration earlier. When the answer
// carries no server time, Now returns this host's clock minus
// [HostClockBound].
func (r *Resolver) Now(ctx context.Context, client Client, stream string) (time.Time, error) {
	if client == nil {
		return time.Time{}, fmt.Errorf("%w: stream %q: Client is nil", ErrInvalidRequest, stream)
	}
	if stream == "" {
		return time.Time{}, fmt.Errorf("%w: Stream is empty", ErrInvalidRequest)
	}
	s := &shardScan{cfg: &r.cfg, client: client, stream: stream}
	began := r.cfg.Now()
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream), MaxResults: aws.Int32(1)}
	var out *kinesis.ListShardsOutput
	err := s.call(ctx, "ListShards", func(ctx context.Context) (err error) {
		out, err = client.ListShards(ctx, in, noSDKRetries)
		if err == nil && out == nil {
			err = fmt.Errorf("%w: ListShards returned no output and no error", kerr.ErrOddAnswer)
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("scan: stream %q: reading Kinesis's clock: ListShards: %w", stream, err)
	}
	elapsed := max(r.cfg.Now().Sub(began), 0)
	if t, ok := ServerTime(out.ResultMetadata); ok {
		return ms(t.Add(-elapsed)), nil
	}
	return ms(began.Add(-HostClockBound)), nil
}
