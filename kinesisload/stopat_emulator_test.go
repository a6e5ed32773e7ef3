package kinesisload

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/scan"
)

// A bounded replay on kinesis-local, as an operator runs one to reprocess
// a window under a journal of its own: every record that arrived before
// StopAt is delivered once, none at or after it, the children of a shard
// split before the bound are followed, and Run returns nil by itself.
// Kinesis's clock here is the host's (kinesis-local stamps arrivals with
// it), so the bound is taken between two groups of puts with a margin of
// a second on each side.
func TestStopAtReplaysAWindowOnKinesisLocal(t *testing.T) {
	emu := emulator.Start(t, emulator.KinesisLocal)
	c := emu.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "replay-it"
	if _, err := c.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	if err := emulator.WaitStreamActive(ctx, c, name); err != nil {
		t.Fatal(err)
	}
	put := func(prefix string, n int) []string {
		t.Helper()
		var data []string
		for i := range n {
			d := fmt.Sprintf("%s-%03d", prefix, i)
			if _, err := c.PutRecord(ctx, &kinesis.PutRecordInput{StreamName: aws.String(name), PartitionKey: aws.String(d), Data: []byte(d)}); err != nil {
				t.Fatalf("put %s: %v", d, err)
			}
			data = append(data, d)
		}
		return data
	}
	want := put("parent", 20)
	splitHalf(ctx, t, c, name, "shardId-000000000000")
	want = append(want, put("child", 20)...)
	time.Sleep(time.Second)
	bound := time.Now()
	time.Sleep(time.Second)
	after := put("after", 20)

	rec := newRecorder()
	cfg := Config{Stream: name, Sink: rec, Dir: t.TempDir(), StartPosition: scan.TrimHorizon(), StopAt: bound,
		IdleWait: 200 * time.Millisecond, ListShardsInterval: 300 * time.Millisecond}
	replay := func() {
		t.Helper()
		l, err := New(cfg, WithClient(c), WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		defer rcancel()
		if err := l.Run(rctx); err != nil {
			t.Fatalf("Run with StopAt = %v, want nil once every shard is done", err)
		}
	}
	replay()
	got := map[string]int{}
	for _, e := range rec.events() {
		if e.kind == "deliver" {
			got[e.data]++
		}
	}
	for _, d := range want {
		if got[d] != 1 {
			t.Errorf("record %s (before the bound) delivered %d times, want once", d, got[d])
		}
	}
	for _, d := range after {
		if got[d] != 0 {
			t.Errorf("record %s (after the bound) delivered %d times, want none", d, got[d])
		}
	}
	// The replay is over: a second Run on its journal reads nothing more.
	n := len(rec.events())
	replay()
	for _, e := range rec.events()[n:] {
		if e.kind == "deliver" {
			t.Errorf("the second Run delivered %s (shard %s): the replay was done", e.data, e.shard)
		}
	}
}
