package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// One Resolver shared by the Loaders of a process, its QueueSize holding
// the largest batch (as WithResolver asks). Another stream's batch is
// queued in it while this Loader starts: the queue is full only for the
// moment. Run must wait or retry, not stop: nothing is wrong that a retry
// does not fix.
func TestASharedResolversBusyQueueDoesNotStopRun(t *testing.T) {
	s := newFakeStream(t, 2)
	s.put(shard0, "history")
	s.settle()
	shared, err := scan.NewResolver(scan.Config{Workers: 1, QueueSize: 2, Backoff: []time.Duration{time.Millisecond}, Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}

	// The other stream's batch of two shards: one scanning (held), one
	// queued.
	other := newFakeStream(t, 2)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	other.f.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: 1, Entered: entered, Block: release})
	otherDone := make(chan error, 1)
	go func() {
		_, err := shared.Resolve(context.Background(), scan.Request{Client: other.f, Stream: other.name, Shards: []string{shard0, shard1}})
		otherDone <- err
	}()
	<-entered

	rec, ih := newRecorder(), newInitHook()
	r := start(t, context.Background(), Config{Stream: s.name, Sink: rec}, WithClient(s.f),
		WithStore(memStore(t, journal.NewMemory())), WithResolver(shared), WithHooks(ih))
	select {
	case err := <-r.done:
		r.done <- err
		close(release)
		<-otherDone
		t.Fatalf("Run stopped while another batch was queued (queue full only for the moment): %v (ErrQueueFull: %v)", err, errors.Is(err, scan.ErrQueueFull))
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	if err := <-otherDone; err != nil {
		t.Fatalf("the other batch: %v", err)
	}
	ih.wait(t)
	s.put(shard0, "after")
	rec.waitFor(t, "after")
}
