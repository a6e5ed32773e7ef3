package kinesisload

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
)

// allHooks implements every hook interface and counts the events.
type allHooks struct {
	mu        sync.Mutex
	progress  []InitProgress
	init      []InitResolved
	delivered []BatchDelivered
	fetched   int
	behind    map[string]int64
	throttled []Throttled
	retries   []Retry
	states    []ShardStateChanged
}

func (h *allHooks) OnInitProgress(e InitProgress) {
	h.mu.Lock()
	h.progress = append(h.progress, e)
	h.mu.Unlock()
}
func (h *allHooks) OnInitResolved(e InitResolved) {
	h.mu.Lock()
	h.init = append(h.init, e)
	h.mu.Unlock()
}
func (h *allHooks) OnBatchDelivered(e BatchDelivered) {
	h.mu.Lock()
	h.delivered = append(h.delivered, e)
	h.mu.Unlock()
}
func (h *allHooks) OnFetched(e Fetched) {
	h.mu.Lock()
	h.fetched++
	h.behind[e.ShardID] = e.MillisBehindLatest
	h.mu.Unlock()
}
func (h *allHooks) OnThrottled(e Throttled) {
	h.mu.Lock()
	h.throttled = append(h.throttled, e)
	h.mu.Unlock()
}
func (h *allHooks) OnRetry(e Retry) { h.mu.Lock(); h.retries = append(h.retries, e); h.mu.Unlock() }
func (h *allHooks) OnShardState(e ShardStateChanged) {
	h.mu.Lock()
	h.states = append(h.states, e)
	h.mu.Unlock()
}

func TestHooksReportEveryEvent(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "h0")
	s.settle()
	h := &allHooks{behind: map[string]int64{}}
	rec := newRecorder()
	ih := newInitHook()
	// The first GetRecords of the scan of shard 1 is throttled.
	s.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetRecords, Shard: shard1, Nth: 1,
		Err: &types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded")}})
	resolver := fastResolver(t)
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())),
		WithResolver(resolver), WithHooks(h, ih))
	ih.wait(t)
	s.put(shard0, "a")
	s.put(shard0, "b")
	s.put(shard1, "c")
	rec.waitFor(t, "a", "b", "c")
	time.Sleep(50 * time.Millisecond) // one more empty poll per shard
	r.stop(t)

	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.progress) != 2 || h.progress[len(h.progress)-1].Done != 2 || h.progress[0].Total != 2 {
		t.Errorf("init progress = %+v, want 2 events ending at 2 of 2", h.progress)
	}
	if len(h.init) != 1 || h.init[0].Resolved != 2 || len(h.init[0].Positions) != 2 {
		t.Errorf("init resolved = %+v, want one event with 2 resolved positions", h.init)
	}
	records := 0
	for _, d := range h.delivered {
		records += d.Records
		if d.Bytes <= 0 || d.Attempts != 1 {
			t.Errorf("batch delivered %+v: want bytes and one attempt", d)
		}
	}
	if records != 3 {
		t.Errorf("hooks saw %d delivered records, want 3", records)
	}
	if h.fetched < 2 || len(h.behind) != 2 {
		t.Errorf("fetched %d pages from %d shards, want every shard reported", h.fetched, len(h.behind))
	}
	if len(h.throttled) != 1 || h.throttled[0].ShardID != shard1 {
		t.Errorf("throttled = %+v, want one event for %s", h.throttled, shard1)
	}
	if len(h.retries) != 1 || h.retries[0].Op != "GetRecords" {
		t.Errorf("retries = %+v, want the scan's one retry of GetRecords", h.retries)
	}
	active := 0
	for _, e := range h.states {
		if e.To == StateActive && e.From == 0 {
			active++
		}
	}
	if active != 2 {
		t.Errorf("state changes = %+v, want both shards new -> ACTIVE", h.states)
	}
}
