package kinesisload

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// nilListClient answers the first ListShards calls with no output and no
// error, as a broken proxy could.
type nilListClient struct {
	scan.Client
	left atomic.Int32
}

func (c *nilListClient) ListShards(ctx context.Context, in *kinesis.ListShardsInput, opts ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if c.left.Add(-1) >= 0 {
		return nil, nil
	}
	return c.Client.ListShards(ctx, in, opts...)
}

// TestListShardsWithNoOutputIsRetried: a ListShards answer with neither
// output nor error is an odd answer, retried like a transient failure;
// the Loader neither panics nor stops, and reads the stream.
func TestListShardsWithNoOutputIsRetried(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "a")
	s.put(shard1, "b")
	c := &nilListClient{Client: s.f}
	c.left.Store(6)
	rec := newRecorder()
	// Six retries at the default backoff wait half a minute; the retry,
	// not the wait, is what is checked.
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon(), KinesisMaxBackoff: 100 * time.Millisecond},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	want := map[string]bool{"a": true, "b": true}
	for len(want) > 0 {
		delete(want, <-rec.notify)
	}
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}
	if c.left.Load() >= 0 {
		t.Fatalf("the odd answers were not all given (%d left)", c.left.Load())
	}
}

// noARNDescribeClient answers the first DescribeStreamSummary calls with a
// summary that has no StreamARN, as a broken proxy could.
type noARNDescribeClient struct {
	scan.Client
	left atomic.Int32
}

func (c *noARNDescribeClient) DescribeStreamSummary(ctx context.Context, in *kinesis.DescribeStreamSummaryInput, opts ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	out, err := c.Client.DescribeStreamSummary(ctx, in, opts...)
	if err == nil && c.left.Add(-1) >= 0 {
		d := *out.StreamDescriptionSummary
		d.StreamARN = nil
		return &kinesis.DescribeStreamSummaryOutput{StreamDescriptionSummary: &d}, nil
	}
	return out, err
}

// TestDescribeStreamWithoutARNIsRetried: a DescribeStreamSummary answer
// without the stream's ARN is an odd answer, retried like a transient
// failure (as every other odd answer is), not a reason to stop Run.
func TestDescribeStreamWithoutARNIsRetried(t *testing.T) {
	s := newFakeStream(t, 1)
	s.put(shard0, "a")
	c := &noARNDescribeClient{Client: s.f}
	c.left.Store(2)
	rec := newRecorder()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec, StartPosition: scan.TrimHorizon()},
		WithClient(c), WithStore(memStore(t, journal.NewMemory())))
	select {
	case got := <-rec.notify:
		if got != "a" {
			t.Fatalf("delivered %q, want a", got)
		}
	case err := <-r.done:
		t.Fatalf("Run stopped on the odd answer: %v", err)
	}
	if err := r.stop(t); err != ErrClosed {
		t.Fatalf("Run = %v", err)
	}
	if c.left.Load() >= 0 {
		t.Fatalf("the odd answers were not all given (%d left)", c.left.Load())
	}
}
