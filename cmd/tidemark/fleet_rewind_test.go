package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/cmd/tidemark/internal/cli"
	"github.com/tidemark/tidemark/internal/emulator"
	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// timedRecorder is a Sink that keeps what it accepted with when.
type timedRecorder struct {
	mu  sync.Mutex
	log []timed
}

type timed struct {
	shard, data string
	at          time.Time
}

func (r *timedRecorder) Deliver(ctx context.Context, b kinesisload.Batch) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range b.Records {
		r.log = append(r.log, timed{shard: b.ShardID, data: string(rec.Data), at: now})
	}
	return nil
}

func (r *timedRecorder) all() []timed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]timed(nil), r.log...)
}

// Rewind during a running fleet, as an operator runs it: two hosts on
// dynalite read a kinesis-local stream while a producer writes to both
// shards; tidemark rewind moves one shard back. The shard restarts at the
// new position (its records after the position are delivered again, in
// order), the other shard is not delivered again, and nothing the
// producer wrote is lost. How soon it restarts is logged, not asserted
// (real clocks on a loaded machine: 0.3 to 0.7 s idle, 4.5 s once at a
// load of 8); that the hosts act on a rewind at their next round, not at
// a lease's expiry, is asserted on a manual clock by kinesisload/fleet's
// TestRewindIsSeenAtTheNextRoundNotAfterResync.
func TestRewindDuringARunningFleetRestartsTheShardAtTheNewPosition(t *testing.T) {
	const lease = 4 * time.Second
	kin := emulator.Start(t, emulator.KinesisLocal)
	dyn := emulator.Start(t, emulator.Dynalite)
	kc := kin.Client
	newStream(t, kc, "live", 2)
	low := putN(t, kc, "live", lowKey, "low", 4)
	putN(t, kc, "live", highKey, "high", 4)

	rec := &timedRecorder{}
	for _, h := range []string{"host-a", "host-b"} {
		startLoader(t, kinesisload.Config{Stream: "live", Sink: rec, StartPosition: scan.TrimHorizon()},
			kinesisload.WithClient(kc), kinesisload.WithCoordinator(coordinator(t, dyn.Endpoint, "fleet", h, lease)))
	}
	delivered := func(data string) bool {
		for _, d := range rec.all() {
			if d.data == data {
				return true
			}
		}
		return false
	}
	waitUntil(t, 30*time.Second, func() bool { return delivered("low-4") && delivered("high-4") })

	// A producer writes to both shards all along.
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		produced []string
	)
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, k := range []struct{ name, key string }{{"live-low", lowKey}, {"live-high", highKey}} {
				data := fmt.Sprintf("%s-%d", k.name, i)
				if _, err := kc.PutRecord(context.Background(), &kinesis.PutRecordInput{StreamName: aws.String("live"), Data: []byte(data),
					PartitionKey: aws.String("pk"), ExplicitHashKey: aws.String(k.key)}); err != nil {
					t.Errorf("producer: %v", err)
					return
				}
				mu.Lock()
				produced = append(produced, data)
				mu.Unlock()
			}
		}
	})
	stopProducer := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopProducer()
	time.Sleep(500 * time.Millisecond)

	began := time.Now()
	code, out, _ := tidemark(t, "rewind", "--table", "fleet", "--stream", "live", "--endpoint", dyn.Endpoint, "--kinesis-endpoint", kin.Endpoint,
		"--shards", "shardId-000000000000", "--to", "AFTER_SEQUENCE_NUMBER:"+low[1], "--by", "oncall", "--reason", "replay low")
	if code != cli.ExitOK || !strings.Contains(out, "lose them at their next round") {
		t.Fatalf("rewind = %d:\n%s", code, out)
	}
	t.Logf("the rewind command took %v", time.Since(began))
	var restarted time.Time
	waitUntil(t, 30*time.Second, func() bool {
		for _, d := range rec.all() {
			if d.data == "low-3" && d.at.After(began) {
				restarted = d.at
				return true
			}
		}
		return false
	})
	t.Logf("the shard restarted at the new position %v after the rewind began (lease duration %v)", restarted.Sub(began), lease)

	time.Sleep(time.Second)
	stopProducer()
	mu.Lock()
	all := append([]string(nil), produced...)
	mu.Unlock()
	waitUntil(t, 30*time.Second, func() bool {
		for _, p := range all {
			if !delivered(p) {
				return false
			}
		}
		return true
	})

	// Shard 0 again from low-3, in order; shard 1 once each.
	var again []string
	seen := map[string]int{}
	for _, d := range rec.all() {
		seen[d.data]++
		if d.shard == "shardId-000000000000" && d.at.After(began) && strings.HasPrefix(d.data, "low-") {
			again = append(again, d.data)
		}
	}
	if strings.Join(again, " ") != "low-3 low-4" {
		t.Errorf("after the rewind shard 0 delivered the old records %v, want low-3 low-4", again)
	}
	for data, n := range seen {
		if strings.HasPrefix(data, "high") || strings.HasPrefix(data, "live-high") {
			if n != 1 {
				t.Errorf("%s of the shard not rewound was delivered %d times", data, n)
			}
		}
	}

	code, out, _ = tidemark(t, "status", "--table", "fleet", "--stream", "live", "--endpoint", dyn.Endpoint, "--kinesis-endpoint", kin.Endpoint, "--heartbeat-wait", "1s")
	if code != cli.ExitOK || !strings.Contains(out, "by oncall") || !strings.Contains(out, "(replay low)") {
		t.Errorf("status after the rewind = %d, want healthy and the rewind shown:\n%s", code, out)
	}
}

// waitUntil polls cond until it holds or d passes.
func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("the condition did not hold within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
