package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/dynamo"
)

// binary is the tidemark command built once for the tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidemark-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "tidemark")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tidemark:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		// goleak's VerifyTestMain exits; run the check ourselves so the
		// binary's directory is removed.
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
	}()
	os.Exit(code)
}

// tidemark runs the built command as an operator does and returns its
// exit status and output.
func tidemark(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDTIDEMARKTEST", "AWS_SECRET_ACCESS_KEY=secret",
		"AWS_REGION="+emulator.Region, "AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("tidemark %v: %v", args, err)
	}
	t.Logf("$ tidemark %s\n(exit %d)\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// Hash keys that route a record to the lower or the upper half of the
// hash key space: to shard 0 or 1 of a two-shard stream, or to the lower
// or upper child of a split at the middle.
var (
	lowKey  = "0"
	highKey = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)).String()
	midKey  = new(big.Int).Lsh(big.NewInt(1), 127).String()
)

// put writes one record with the explicit hash key and returns its
// sequence number.
func put(t *testing.T, kc *kinesis.Client, stream, hashKey string, data []byte) string {
	t.Helper()
	out, err := kc.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String(stream), Data: data,
		PartitionKey: aws.String("pk"), ExplicitHashKey: aws.String(hashKey)})
	if err != nil {
		t.Fatalf("put %q to %s: %v", data, stream, err)
	}
	return *out.SequenceNumber
}

// putN writes n records named prefix-1..n and returns their sequence
// numbers.
func putN(t *testing.T, kc *kinesis.Client, stream, hashKey, prefix string, n int) []string {
	t.Helper()
	var seqs []string
	for i := 1; i <= n; i++ {
		seqs = append(seqs, put(t, kc, stream, hashKey, fmt.Appendf(nil, "%s-%d", prefix, i)))
	}
	return seqs
}

// got is one user record a Sink accepted.
type got struct {
	shard, seq string
	sub        int64
	data       string
}

// recorder is a Sink that keeps what it accepted, in order.
type recorder struct {
	mu  sync.Mutex
	log []got
}

func (r *recorder) Deliver(ctx context.Context, b kinesisload.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range b.Records {
		r.log = append(r.log, got{shard: b.ShardID, seq: rec.SequenceNumber, sub: rec.SubSequenceNumber, data: string(rec.Data)})
	}
	return nil
}

func (r *recorder) all() []got {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// data returns the payloads accepted, in order.
func (r *recorder) data() []string {
	var out []string
	for _, g := range r.all() {
		out = append(out, g.data)
	}
	return out
}

// waitFor polls until every payload of want was accepted, then returns
// every payload accepted (in order); it fails t after the deadline.
func (r *recorder) waitFor(t *testing.T, deadline time.Duration, want ...string) []string {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		have := map[string]bool{}
		for _, d := range r.data() {
			have[d] = true
		}
		missing := 0
		for _, w := range want {
			if !have[w] {
				missing++
			}
		}
		if missing == 0 {
			return r.data()
		}
		if time.Now().After(end) {
			t.Fatalf("after %v, %d of %v not delivered; delivered: %v", deadline, missing, want, r.data())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loader is a Loader running in the test.
type loader struct {
	l    *kinesisload.Loader
	done chan error
}

// startLoader starts a Loader; Stop closes it. The test's cleanup stops
// it too.
func startLoader(t *testing.T, cfg kinesisload.Config, opts ...kinesisload.Option) *loader {
	t.Helper()
	if cfg.IdleWait == 0 {
		cfg.IdleWait = 200 * time.Millisecond
	}
	if cfg.ListShardsInterval == 0 {
		cfg.ListShardsInterval = 300 * time.Millisecond
	}
	// The Loader's log, shown when the test fails.
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the log of the Loader of stream %s:\n%s", cfg.Stream, logs.String())
		}
	})
	opts = append(opts, kinesisload.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	l, err := kinesisload.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ld := &loader{l: l, done: make(chan error, 1)}
	go func() { ld.done <- l.Run(context.Background()) }()
	t.Cleanup(func() { ld.stop(t) })
	return ld
}

// stop closes the Loader gracefully and waits for Run.
func (ld *loader) stop(t *testing.T) {
	if ld.l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = ld.l.Close(ctx)
	select {
	case err := <-ld.done:
		if err != nil && !errors.Is(err, kinesisload.ErrClosed) {
			t.Errorf("Run: %v", err)
		}
	case <-ctx.Done():
		t.Error("Run did not return after Close")
	}
	ld.l = nil
}

// dynamoClient is a DynamoDB client of dynalite at endpoint.
func dynamoClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{Region: emulator.Region, BaseEndpoint: aws.String(endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTIDEMARKTEST", "secret", "")})
}

// coordinator is a fleet host's coordinator on table, with a short lease.
func coordinator(t *testing.T, endpoint, table, host string, lease time.Duration) *dynamo.Coordinator {
	t.Helper()
	c, err := dynamo.New(dynamoClient(endpoint), dynamo.Config{Table: table, CreateTable: true, HostID: host, LeaseDuration: lease})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newStream creates a stream of n shards on kinesis-local and waits
// until it is ACTIVE.
func newStream(t *testing.T, kc *kinesis.Client, name string, n int) kinesisload.StreamIdentity {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kc.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(n))}); err != nil {
		t.Fatal(err)
	}
	return waitActive(t, ctx, kc, name)
}

func waitActive(t *testing.T, ctx context.Context, kc *kinesis.Client, name string) kinesisload.StreamIdentity {
	t.Helper()
	if err := emulator.WaitStreamActive(ctx, kc, name); err != nil {
		t.Fatal(err)
	}
	out, err := kc.DescribeStreamSummary(ctx, &kinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	d := out.StreamDescriptionSummary
	return kinesisload.StreamIdentity{ARN: *d.StreamARN, Created: d.StreamCreationTimestamp.UTC()}
}

// split splits shard at the middle of the hash key space and waits; the
// children are the next two shard IDs.
func split(t *testing.T, kc *kinesis.Client, stream, shard string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kc.SplitShard(ctx, &kinesis.SplitShardInput{StreamName: aws.String(stream), ShardToSplit: aws.String(shard), NewStartingHashKey: aws.String(midKey)}); err != nil {
		t.Fatal(err)
	}
	waitActive(t, ctx, kc, stream)
	for {
		out, err := kc.ListShards(ctx, &kinesis.ListShardsInput{StreamName: aws.String(stream)})
		if err != nil {
			t.Fatal(err)
		}
		if open := slices.IndexFunc(out.Shards, func(s types.Shard) bool {
			return s.SequenceNumberRange.EndingSequenceNumber == nil && aws.ToString(s.ParentShardId) == shard
		}); open >= 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the split's children never showed")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logBuffer is a log destination safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
