package kinesisload_test

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// The host that wins the initialisation lock saves T0 and dies before its
// commit; records are put; the host that takes the initialisation over
// resolves LATEST at the first host's T0, so those records are delivered
// (with a T0 of its own they would be "before the start" and skipped).
func TestFleetTakeOverResolvesAtTheFirstStartTime(t *testing.T) {
	r := newFleetRig(t, 2)
	r.configure = func(c *kinesisload.Config) { c.StartPosition = scan.Latest() }
	// Host a's first GetShardIterator (the LATEST resolution, which starts
	// after T0 is saved) says so and then waits for its context to end.
	resolving := make(chan struct{}, 1)
	r.fake.Inject(kinesistest.Fault{Op: kinesistest.OpGetShardIterator, Nth: 1, Entered: resolving, Block: make(chan struct{})})
	r.start("a")
	select {
	case <-resolving:
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
