package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// lagPage is how many records status reads at most per shard to measure
// its lag: a shard further behind shows "at least".
const lagPage = 1000

// Lag is how far a shard's committed position is behind the shard's tip,
// measured from Kinesis: a read from the position.
type Lag struct {
	// Records counts the Kinesis records after the position, up to
	// lagPage; More says there are more.
	Records int  `json:"records"`
	More    bool `json:"more,omitempty"`
	// MillisBehindLatest is Kinesis's measure at the position: how far
	// behind the tip it is in time.
	MillisBehindLatest int64 `json:"millis_behind_latest"`
	// OldestUnread is the arrival time of the first record after the
	// position (none when caught up); OldestUnreadAge its age when
	// measured, in milliseconds.
	OldestUnread    *time.Time `json:"oldest_unread,omitempty"`
	OldestUnreadAge int64      `json:"oldest_unread_age_ms,omitempty"`
	// Ended says the read reached the end of a closed shard.
	Ended bool `json:"ended,omitempty"`
	// Error is why the lag could not be measured.
	Error string `json:"error,omitempty"`
}

// String says it for a person.
func (l Lag) String() string {
	if l.Error != "" {
		return "unknown (" + l.Error + ")"
	}
	n := fmt.Sprint(l.Records)
	if l.More {
		n = "≥" + n
	}
	s := n + " records"
	if l.OldestUnread != nil {
		s += ", oldest " + (time.Duration(l.OldestUnreadAge) * time.Millisecond).Round(time.Second).String()
	}
	if l.MillisBehindLatest > 0 {
		s += fmt.Sprintf(", %s behind", (time.Duration(l.MillisBehindLatest) * time.Millisecond).Round(time.Second))
	}
	return s
}

// measureLag reads the shard from pos: the records after it (up to
// lagPage, following empty pages a few times while Kinesis says it is
// behind), and the age of the first.
func measureLag(ctx context.Context, kc scan.Client, stream, shard string, pos scan.Position, now time.Time) Lag {
	in, err := pos.IteratorInput(stream, shard)
	if err != nil {
		return Lag{Error: err.Error()}
	}
	it, err := kc.GetShardIterator(ctx, in)
	if err != nil {
		return Lag{Error: "GetShardIterator: " + err.Error()}
	}
	var lag Lag
	iter := it.ShardIterator
	for calls := 0; iter != nil && calls < 5; calls++ {
		out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(lagPage - lag.Records))})
		if err != nil {
			return Lag{Error: "GetRecords: " + err.Error()}
		}
		if lag.OldestUnread == nil && len(out.Records) > 0 && out.Records[0].ApproximateArrivalTimestamp != nil {
			t := out.Records[0].ApproximateArrivalTimestamp.UTC()
			lag.OldestUnread = &t
			lag.OldestUnreadAge = max(now.Sub(t).Milliseconds(), 0)
		}
		if calls == 0 {
			lag.MillisBehindLatest = aws.ToInt64(out.MillisBehindLatest)
		}
		lag.Records += len(out.Records)
		iter = out.NextShardIterator
		switch {
		case iter == nil:
			lag.Ended = true
			return lag
		case lag.Records >= lagPage:
			lag.More = true
			return lag
		case aws.ToInt64(out.MillisBehindLatest) == 0:
			return lag // at the tip
		}
	}
	if iter != nil && lag.Records > 0 {
		lag.More = true
	}
	return lag
}

// streamIdentity asks Kinesis for the stream's identity.
func streamIdentity(ctx context.Context, kc scan.Client, stream string) (kinesisload.StreamIdentity, error) {
	out, err := kc.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(stream)})
	if err != nil {
		return kinesisload.StreamIdentity{}, fmt.Errorf("stream %s: DescribeStreamSummary: %w", stream, err)
	}
	d := out.StreamDescriptionSummary
	if d == nil || d.StreamARN == nil || d.StreamCreationTimestamp == nil {
		return kinesisload.StreamIdentity{}, fmt.Errorf("stream %s: DescribeStreamSummary returned no ARN or creation time", stream)
	}
	return kinesisload.StreamIdentity{ARN: *d.StreamARN, Created: d.StreamCreationTimestamp.UTC()}, nil
}

// listShards lists every shard of the stream Kinesis retains.
func listShards(ctx context.Context, kc scan.Client, stream string) ([]types.Shard, error) {
	var out []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		page, err := kc.ListShards(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("stream %s: ListShards: %w", stream, err)
		}
		out = append(out, page.Shards...)
		if page.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: page.NextToken}
	}
}

// resolveNow resolves shards to just after their last record that
// arrived before now on Kinesis's clock (TRIM_HORIZON for an empty
// shard): what tidemark makes of LATEST, concrete. It returns the time.
func resolveNow(ctx context.Context, kc scan.Client, stream string, shards []string) (map[string]scan.Position, time.Time, error) {
	r, err := scan.NewResolver(scan.Config{})
	if err != nil {
		return nil, time.Time{}, err
	}
	at, err := r.Now(ctx, kc, stream)
	if err != nil {
		return nil, time.Time{}, err
	}
	res, err := r.Resolve(ctx, scan.Request{Client: kc, Stream: stream, Shards: shards, At: at})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("resolving the tip of the shards at %s: %w", at.Format(time.RFC3339Nano), err)
	}
	out := make(map[string]scan.Position, len(res))
	for _, sr := range res {
		out[sr.Shard] = sr.Position
	}
	return out, at, nil
}

// firstRecordAt reads the shard from pos and returns its first record,
// nil when there is none.
func firstRecordAt(ctx context.Context, kc scan.Client, stream, shard string, pos scan.Position) (*types.Record, error) {
	in, err := pos.IteratorInput(stream, shard)
	if err != nil {
		return nil, err
	}
	it, err := kc.GetShardIterator(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("shard %s: GetShardIterator %s: %w", shard, pos, err)
	}
	iter := it.ShardIterator
	for calls := 0; iter != nil && calls < 5; calls++ {
		out, err := kc.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(1)})
		if err != nil {
			return nil, fmt.Errorf("shard %s: GetRecords from %s: %w", shard, pos, err)
		}
		if len(out.Records) > 0 {
			return &out.Records[0], nil
		}
		if aws.ToInt64(out.MillisBehindLatest) == 0 {
			return nil, nil
		}
		iter = out.NextShardIterator
	}
	return nil, nil
}

// checkSequence asks Kinesis whether pos (a sequence position) is one of
// the shard's: an iterator at it.
func checkSequence(ctx context.Context, kc scan.Client, stream, shard string, pos scan.Position) error {
	in, err := scan.AtSequence(pos.Sequence).IteratorInput(stream, shard)
	if err != nil {
		return err
	}
	if _, err := kc.GetShardIterator(ctx, in); err != nil {
		var inv *types.InvalidArgumentException
		if errors.As(err, &inv) {
			return fmt.Errorf("shard %s: %s is not a sequence number of this shard: %w", shard, pos.Sequence, err)
		}
		return fmt.Errorf("shard %s: checking sequence number %s: %w", shard, pos.Sequence, err)
	}
	return nil
}
