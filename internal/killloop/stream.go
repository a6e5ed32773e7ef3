package killloop

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload/kinesislocal"
	"github.com/tidemark/tidemark/scan"
)

// NewClient returns a Kinesis client for endpoint on transport tr (wrapped
// in kinesislocal.Transport, for SubscribeToShard), with static
// credentials and the emulator's region, and the SDK's own retries.
func NewClient(endpoint string, tr *http.Transport) *kinesis.Client {
	return kinesis.New(kinesis.Options{
		Region:       emulator.Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", ""),
		HTTPClient:   &http.Client{Transport: kinesislocal.Transport(tr)},
	})
}

// NewTestClient is NewClient on a transport of its own whose idle
// connections are closed when the test ends.
func NewTestClient(t testing.TB, endpoint string) *kinesis.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return NewClient(endpoint, tr)
}

// Covers reports whether a record at seq is at or before position p, that
// is, committed when p is a shard's committed position.
func Covers(p scan.Position, seq string) bool {
	switch p.Kind {
	case scan.KindShardEnd:
		return true
	case scan.KindAfterSequence:
		return scan.CompareSequence(seq, p.Sequence) <= 0
	case scan.KindAtSequence:
		return scan.CompareSequence(seq, p.Sequence) < 0
	}
	return false
}

// CreateStream creates stream name with shards shards and waits until it
// is ACTIVE.
func CreateStream(ctx context.Context, t testing.TB, c *kinesis.Client, name string, shards int32) {
	t.Helper()
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	if err := emulator.WaitStreamActive(ctx, c, name); err != nil {
		t.Fatal(err)
	}
}

// Written is one record a producer wrote: where it landed and its data.
type Written struct {
	Shard, Seq, Data string
}

// PutAll writes records with the given data, retrying what failed, and
// returns where each landed.
func PutAll(ctx context.Context, c *kinesis.Client, stream string, data []string) ([]Written, error) {
	var out []Written
	pending := data
	var last error
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt > 50 {
			return out, fmt.Errorf("put %d records to %s: still failing after 50 attempts: %v", len(pending), stream, last)
		}
		entries := make([]types.PutRecordsRequestEntry, len(pending))
		for i, d := range pending {
			entries[i] = types.PutRecordsRequestEntry{Data: []byte(d), PartitionKey: aws.String(d[:min(len(d), 64)])}
		}
		res, err := c.PutRecords(ctx, &kinesis.PutRecordsInput{StreamName: aws.String(stream), Records: entries})
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			last = err
			time.Sleep(50 * time.Millisecond) // e.g. the stream is UPDATING
			continue
		}
		var again []string
		for i, r := range res.Records {
			if r.ErrorCode != nil {
				last = fmt.Errorf("%s: %s", aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage))
				again = append(again, pending[i])
				continue
			}
			out = append(out, Written{Shard: aws.ToString(r.ShardId), Seq: aws.ToString(r.SequenceNumber), Data: pending[i]})
		}
		pending = again
	}
	return out, nil
}

// ListShards returns every shard of stream, closed ones included.
func ListShards(ctx context.Context, t testing.TB, c *kinesis.Client, stream string) []types.Shard {
	t.Helper()
	var shards []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(stream)}
	for {
		out, err := c.ListShards(ctx, in)
		if err != nil {
			t.Fatalf("ListShards %s: %v", stream, err)
		}
		shards = append(shards, out.Shards...)
		if aws.ToString(out.NextToken) == "" {
			return shards
		}
		in = &kinesis.ListShardsInput{NextToken: out.NextToken}
	}
}

// OpenShards returns the shards of shards that have no ending sequence
// number.
func OpenShards(shards []types.Shard) []types.Shard {
	var open []types.Shard
	for _, s := range shards {
		if s.SequenceNumberRange.EndingSequenceNumber == nil {
			open = append(open, s)
		}
	}
	return open
}

// Split splits the first open shard in two halves, waits until the stream
// is ACTIVE again and says what it did.
func Split(ctx context.Context, t testing.TB, c *kinesis.Client, stream string) string {
	t.Helper()
	s := OpenShards(ListShards(ctx, t, c, stream))[0]
	lo, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(s.HashKeyRange.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	if _, err := c.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: s.ShardId, NewStartingHashKey: aws.String(mid.String())}); err != nil {
		t.Fatalf("split %s: %v", aws.ToString(s.ShardId), err)
	}
	if err := emulator.WaitStreamActive(ctx, c, stream); err != nil {
		t.Fatal(err)
	}
	return "split " + aws.ToString(s.ShardId)
}

// Merge merges the first two adjacent open shards; with fewer than two
// open shards it splits instead. It says what it did.
func Merge(ctx context.Context, t testing.TB, c *kinesis.Client, stream string) string {
	t.Helper()
	open := OpenShards(ListShards(ctx, t, c, stream))
	for _, a := range open {
		for _, b := range open {
			ae, _ := new(big.Int).SetString(aws.ToString(a.HashKeyRange.EndingHashKey), 10)
			bs, _ := new(big.Int).SetString(aws.ToString(b.HashKeyRange.StartingHashKey), 10)
			if new(big.Int).Add(ae, big.NewInt(1)).Cmp(bs) != 0 {
				continue
			}
			if _, err := c.MergeShards(ctx, &kinesis.MergeShardsInput{StreamName: aws.String(stream), ShardToMerge: a.ShardId, AdjacentShardToMerge: b.ShardId}); err != nil {
				t.Fatalf("merge %s %s: %v", aws.ToString(a.ShardId), aws.ToString(b.ShardId), err)
			}
			if err := emulator.WaitStreamActive(ctx, c, stream); err != nil {
				t.Fatal(err)
			}
			return "merge " + aws.ToString(a.ShardId) + " " + aws.ToString(b.ShardId)
		}
	}
	return Split(ctx, t, c, stream)
}

// Producer writes records with unique data until stopped.
type Producer struct {
	stop    chan struct{}
	done    chan struct{}
	written []Written
	err     error
}

// StartProducer writes a batch of 10 records ("r-000000" on) every 100 ms
// with put until Finish. A batch in flight when Finish is called is
// finished and recorded, so that Written holds every record that reached
// the stream.
func StartProducer(ctx context.Context, put func(ctx context.Context, data []string) ([]Written, error)) *Producer {
	p := &Producer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		next := 0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-ctx.Done():
				p.err = ctx.Err()
				return
			case <-tick.C:
			}
			batch := make([]string, 10)
			for i := range batch {
				batch[i] = fmt.Sprintf("r-%06d", next)
				next++
			}
			w, err := put(ctx, batch)
			p.written = append(p.written, w...)
			if err != nil {
				p.err = err
				return
			}
		}
	}()
	return p
}

// Finish stops the producer, waits for its last batch and returns what it
// wrote and the error that stopped it early, if any. Call it once.
func (p *Producer) Finish() ([]Written, error) {
	close(p.stop)
	<-p.done
	return p.written, p.err
}

// Done returns a channel closed once the producer stopped.
func (p *Producer) Done() <-chan struct{} { return p.done }
