package kinesisload_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// stallingClient is the fake, except that its first GetShardIterator
// (the LATEST resolution, which starts after T0 is saved) says so on
// resolving and then waits for its context to end.
type stallingClient struct {
	*kinesistest.Fake
	once      sync.Once
	resolving chan struct{}
}

func (c *stallingClient) GetShardIterator(ctx context.Context, in *kinesis.GetShardIteratorInput, optFns ...func(*kinesis.Options)) (*kinesis.GetShardIteratorOutput, error) {
	c.once.Do(func() { close(c.resolving) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// The host that wins the initialisation lock saves T0 and dies before its
// commit; records are put; the host that takes the initialisation over
// resolves LATEST at the first host's T0, so those records are delivered
// (with a T0 of its own they would be "before the start" and skipped).
func TestFleetTakeOverResolvesAtTheFirstStartTime(t *testing.T) {
	r := newFleetRig(t, 2)
	r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
	stall := &stallingClient{Fake: r.fake, resolving: make(chan struct{})}
	r.clients = map[string]scan.Client{"a": stall}
	r.start("a")
	select {
	case <-stall.resolving:
	case err := <-r.done["a"]:
		t.Fatalf("host a: Run returned before resolving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("host a never began resolving LATEST")
	}
	r.kill("a")
	want := r.put(20)
	// Kinesis's Date is whole seconds: let its clock pass the records, so
	// that a T0 taken now would be after them.
	time.Sleep(1100 * time.Millisecond)
	r.start("b")
	r.waitAll(want)
	for _, d := range r.sink.deliveries() {
		if d.host != "b" {
			t.Errorf("record %s delivered by host %s, which died before its commit", d.data, d.host)
		}
	}
}
