package kinesisload_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/coordtest"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// gatedClient is a host's Kinesis client whose GetRecords calls wait while
// the gate is closed: a process frozen between two pages.
type gatedClient struct {
	*kinesistest.Fake
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

func (c *gatedClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed, c.open = true, make(chan struct{})
	}
}

func (c *gatedClient) reopen() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.closed = false
		close(c.open)
	}
}

func (c *gatedClient) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	c.mu.Lock()
	closed, open := c.closed, c.open
	c.mu.Unlock()
	if closed {
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Fake.GetRecords(ctx, in, opts...)
}

// A host frozen past its lease (no round, no read) wakes while another
// host reads its shard: before its rounds notice the loss, it starts no
// Deliver under the lease it lost: its own fence (the time since its last
// heartbeat landed) tells it first. (Before the fix it delivered the next
// page under its old lease within milliseconds of waking, and a plain Sink
// got those records twice.)
func TestFleetHostWokenPastItsLeaseStartsNoDelivery(t *testing.T) {
	f := kinesistest.New(kinesistest.WithoutLimits())
	kinesistest.NewStream(t, f, "orders", 1)
	fl, err := coordtest.New(coordtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lease, renew := fl.Timing()
	sink := &fleetSink{}
	clients := map[string]*gatedClient{}
	run := func(host string) func() {
		c := &gatedClient{Fake: f}
		clients[host] = c
		l, err := kinesisload.New(kinesisload.Config{Stream: "orders", Sink: sink.forHost(host), StartPosition: scan.TrimHorizon(), IdleWait: 200 * time.Millisecond},
			kinesisload.WithClient(c), kinesisload.WithCoordinator(fl.Host(host)), kinesisload.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	// advanceUntil moves the fleet's time until cond holds.
	advanceUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			fl.Advance(renew)
			time.Sleep(time.Millisecond)
		}
	}
	owner := func() string { return fl.Shards("orders")["shardId-000000000000"].Owner }
	stopA := run("a")
	defer stopA()
	advanceUntil("host a to hold the shard", func() bool { return owner() == "a" })
	stopB := run("b")
	defer stopB()
	put := func(data string) {
		if _, err := f.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: ptr("orders"), PartitionKey: ptr("k"), Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(data string) []string {
		var hosts []string
		for _, d := range sink.deliveries() {
			if d.data == data {
				hosts = append(hosts, d.host)
			}
		}
		return hosts
	}
	put("r1")
	advanceUntil("r1 delivered and committed", func() bool {
		return len(delivered("r1")) == 1 && fl.Shards("orders")["shardId-000000000000"].Progress.Position.Kind == scan.KindAfterSequence
	})

	// Host a freezes between two pages: no read, no round.
	clients["a"].close()
	time.Sleep(50 * time.Millisecond) // its reader waits in GetRecords
	fl.Pause("a")
	advanceUntil("host b to take the shard", func() bool { return owner() == "b" })
	put("r2")
	deadline := time.Now().Add(30 * time.Second)
	for len(delivered("r2")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("host b never delivered r2")
		}
		time.Sleep(time.Millisecond)
	}
	// Host a wakes: its reader gets r2 at once; no round runs (the
	// fleet's time stands still).
	fl.Resume("a")
	clients["a"].reopen()
	time.Sleep(300 * time.Millisecond)
	for _, h := range delivered("r2") {
		if h == "a" {
			t.Errorf("host a delivered r2 under the lease it lost while frozen (lease %v, renew %v)", lease, renew)
		}
	}
}

func ptr(s string) *string { return &s }
