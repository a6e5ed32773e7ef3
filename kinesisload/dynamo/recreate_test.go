package dynamo

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
)

// identity returns the rig's stream's identity as Kinesis tells it.
func (r *loaderRig) identity() kinesisload.StreamIdentity {
	r.t.Helper()
	out, err := r.fake.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	if err != nil {
		r.t.Fatal(err)
	}
	d := out.StreamDescriptionSummary
	return kinesisload.StreamIdentity{ARN: aws.ToString(d.StreamARN), Created: d.StreamCreationTimestamp.UTC()}
}

// recreate deletes the rig's stream and creates it again under its name:
// a new identity, and the same shard IDs from shardId-000000000000.
func (r *loaderRig) recreate(shards int) {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.fake.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("orders")}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(int32(shards))}); err != nil {
		r.t.Fatal(err)
	}
}

// settled reports whether every shard's committed position is the last
// record delivered from it.
func (r *loaderRig) settled() bool {
	last := map[string]string{}
	for _, d := range r.sink.deliveries() {
		last[d.shard] = d.seq
	}
	info, err := r.coords["a"].Inspect(context.Background(), "orders")
	if err != nil {
		return false
	}
	for id, seq := range last {
		if info.Shards[id].Progress.Position.Sequence != seq {
			return false
		}
	}
	return true
}

// A stream re-created under three Loaders sharing it through dynalite,
// with StreamRecreatedStartOver: the fleet moves to a new generation of
// the table at once; every host goes on and reads the new stream from its
// start (TRIM_HORIZON), none with the old stream's positions (the new
// stream reuses the shard IDs, so an old position would skip its first
// records); the old generation stays in the table, as it was, and Inspect
// shows it as archived.
func TestLoadersRecreatedStreamStartOverFleetWide(t *testing.T) {
	r := newLoaderRig(t, 2)
	r.recreated = kinesisload.StreamRecreatedStartOver
	hosts := []string{"a", "b", "c"}
	want := r.put(60)
	for _, h := range hosts {
		r.start(h)
	}
	r.waitAll(want)
	// Every delivered batch committed: the progress the archive must keep.
	deadline := time.Now().Add(30 * time.Second)
	for !r.settled() {
		if time.Now().After(deadline) {
			t.Fatal("the positions of the delivered records were not committed within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	oldID := r.identity()
	before, err := r.coords["a"].Inspect(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	r.recreate(3)
	newID := r.identity()
	fresh := r.put(90)
	r.waitAll(fresh)
	r.waitOwners(hosts...) // of the new generation: 3 shards, one each
	for _, h := range hosts {
		select {
		case err := <-r.done[h]:
			t.Errorf("host %s: Run returned %v after the stream was re-created, want it to go on with the new stream", h, err)
		default:
		}
	}
	info, err := r.coords["a"].Inspect(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Generation != 1 || !info.Identity.Equal(newID) || !info.Initialised || len(info.Shards) != 3 {
		t.Errorf("after the start-over: generation %d, identity %s, initialised %v, %d shards; want 1, %s, true, 3",
			info.Generation, info.Identity, info.Initialised, len(info.Shards), newID)
	}
	if len(info.Archived) != 1 {
		t.Fatalf("archived generations %+v, want generation 0", info.Archived)
	}
	a := info.Archived[0]
	if a.Gen != 0 || !a.Identity.Equal(oldID) || !a.ReplacedBy.Equal(newID) {
		t.Errorf("archived %+v, want generation 0 of %s replaced by %s", a.Generation, oldID, newID)
	}
	for id, sh := range before.Shards {
		if got := a.Shards[id].Progress; !got.Position.Equal(sh.Progress.Position) || got.State != sh.Progress.State {
			t.Errorf("archived shard %s: %v %v, want the old stream's %v %v", id, got.State, got.Position, sh.Progress.State, sh.Progress.Position)
		}
	}
	newSeq := map[string]bool{}
	for _, d := range r.sink.deliveries() {
		if slices.Contains(fresh, d.data) {
			newSeq[d.seq] = true
		}
	}
	for id, sh := range info.Shards {
		if seq := sh.Progress.Position.Sequence; seq != "" && !newSeq[seq] {
			t.Errorf("shard %s of the new generation is at %v, not a position of the new stream", id, sh.Progress.Position)
		}
		if sh.Epoch == 0 || sh.Owner == "" {
			t.Errorf("shard %s of the new stream: owner %q, epoch %d; want leased", id, sh.Owner, sh.Epoch)
		}
	}
}
