package kinesisload_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
	"github.com/tidemark/tidemark/scan"
)

// recreate deletes the rig's stream and creates it again under its name:
// a new identity, and the same shard IDs from shardId-000000000000.
func (r *fleetRig) recreate(shards int) {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.fake.DeleteStream(ctx, &kinesis.DeleteStreamInput{StreamName: aws.String("orders")}); err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.fake.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String("orders"), ShardCount: aws.Int32(int32(shards))}); err != nil {
		r.t.Fatal(err)
	}
}

// wait returns what host's Run returned by itself.
func (r *fleetRig) wait(host string) error {
	r.t.Helper()
	select {
	case err := <-r.done[host]:
		delete(r.runs, host)
		return err
	case <-time.After(60 * time.Second):
		r.t.Fatalf("host %s: Run did not return", host)
		return nil
	}
}

// A stream re-created under hosts that share it, with StreamRecreatedStop:
// every host stops with the *StreamMismatchError, no host reads the new
// stream with the old stream's progress, and the shared progress is left
// as it was, for the operator to decide.
func TestFleetRecreatedStreamNoHostReadsOldProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.configure = func(c *kinesisload.Config) {
			c.OnStreamRecreated = kinesisload.StreamRecreatedStop
			c.ListShardsInterval = 50 * time.Millisecond
		}
		want := r.put(40)
		r.start("a")
		r.start("b")
		r.waitAll(want)
		// Every delivered batch's commit landed (within a round of it).
		deadline := time.Now().Add(30 * time.Second)
		for !r.settled() {
			if time.Now().After(deadline) {
				t.Fatal("the positions of the delivered records were not committed within 30 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		before := r.fleet.Shards("orders")
		r.recreate(2)
		fresh := r.put(40) // on the new stream, same shard IDs
		for _, h := range []string{"a", "b"} {
			err := r.wait(h)
			var mm *kinesisload.StreamMismatchError
			if !errors.Is(err, kinesisload.ErrStreamMismatch) || !errors.As(err, &mm) {
				t.Errorf("host %s: Run = %v, want a *StreamMismatchError", h, err)
			}
		}
		for _, d := range r.sink.deliveries() {
			if slices.Contains(fresh, d.data) {
				t.Errorf("host %s delivered %s of the new stream: it read it with the old stream's progress", d.host, d.data)
			}
		}
		after := r.fleet.Shards("orders")
		for id, s := range before {
			if got := after[id].Progress; !got.Position.Equal(s.Progress.Position) || got.State != s.Progress.State {
				t.Errorf("shard %s: the shared progress changed from %v %v to %v %v after the stream was re-created",
					id, s.Progress.State, s.Progress.Position, got.State, got.Position)
			}
		}
		if g := r.fleet.Generations("orders"); len(g) != 1 {
			t.Errorf("the fleet has generations %+v, want only the first (nothing started over)", g)
		}
	})
}

// A stream re-created under three hosts that share it, with
// StreamRecreatedStartOver: the whole fleet moves to a new generation of
// the table at once. Every host keeps running and reads the new stream
// from its start (Config.StartPosition, TRIM_HORIZON), none with the old
// stream's positions (the new stream reuses the shard IDs, so an old
// AFTER_SEQUENCE_NUMBER applied to it would skip its first records); the
// old generation's progress stays, as it was, the archive.
func TestFleetRecreatedStreamStartsOverFleetWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.configure = func(c *kinesisload.Config) {
			c.OnStreamRecreated = kinesisload.StreamRecreatedStartOver
			c.ListShardsInterval = 50 * time.Millisecond
		}
		hosts := []string{"a", "b", "c"}
		want := r.put(40)
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
		before := r.fleet.Shards("orders")
		r.recreate(3)
		newID := r.identity()
		fresh := r.put(60) // on the new stream, shard IDs from shardId-000000000000 again
		r.waitAll(fresh)

		// Every host moved: each holds a shard of the new generation, and
		// none stopped.
		deadline = time.Now().Add(30 * time.Second)
		for {
			owners := map[string]bool{}
			for _, s := range r.fleet.Shards("orders") {
				owners[s.Owner] = true
			}
			if owners["a"] && owners["b"] && owners["c"] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not every host reads the new stream: the new generation's owners are %v", owners)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, h := range hosts {
			select {
			case err := <-r.done[h]:
				t.Errorf("host %s: Run returned %v after the stream was re-created, want it to go on with the new stream", h, err)
			default:
			}
		}
		gens := r.fleet.Generations("orders")
		if len(gens) != 2 {
			t.Fatalf("generations %+v, want the first, archived, and a second", gens)
		}
		if !gens[0].Identity.Equal(oldID) || !gens[0].ReplacedBy.Equal(newID) || !gens[1].Identity.Equal(newID) || gens[1].Gen != 1 {
			t.Errorf("generations %+v, want generation 0 of %s replaced by generation 1 of %s", gens, oldID, newID)
		}
		// The archive is the old progress as it was.
		archived := r.fleet.ShardsOf("orders", 0)
		for id, s := range before {
			if got := archived[id].Progress; !got.Position.Equal(s.Progress.Position) || got.State != s.Progress.State {
				t.Errorf("archived shard %s: %v %v, want the old stream's %v %v", id, got.State, got.Position, s.Progress.State, s.Progress.Position)
			}
		}
		// The new generation holds the new stream's positions only.
		oldSeq := map[string]bool{}
		newSeq := map[string]bool{}
		for _, d := range r.sink.deliveries() {
			if slices.Contains(fresh, d.data) {
				newSeq[d.seq] = true
			} else {
				oldSeq[d.seq] = true
			}
		}
		for id, s := range r.fleet.Shards("orders") {
			if seq := s.Progress.Position.Sequence; seq != "" && !newSeq[seq] {
				t.Errorf("shard %s of the new generation is at %v, not a position of the new stream (an old one: %v)", id, s.Progress.Position, oldSeq[seq])
			}
		}
		// Exactly the fresh records after the re-creation, each once per
		// unplanned move at most: none is missing (checked by waitAll).
	})
}

// settled reports whether every shard's committed position is the last
// record delivered from it.
func (r *fleetRig) settled() bool {
	last := map[string]string{}
	for _, d := range r.sink.deliveries() {
		last[d.shard] = d.seq
	}
	shards := r.fleet.Shards("orders")
	for id, seq := range last {
		if shards[id].Progress.Position.Sequence != seq {
			return false
		}
	}
	return true
}

// identity returns the rig's stream's identity as Kinesis tells it.
func (r *fleetRig) identity() kinesisload.StreamIdentity {
	r.t.Helper()
	out, err := r.fake.DescribeStreamSummary(context.Background(), &kinesis.DescribeStreamSummaryInput{StreamName: aws.String("orders")})
	if err != nil {
		r.t.Fatal(err)
	}
	d := out.StreamDescriptionSummary
	return kinesisload.StreamIdentity{ARN: aws.ToString(d.StreamARN), Created: d.StreamCreationTimestamp.UTC()}
}

// The same with LATEST: the new stream arrived wholly after the fleet's
// first T0, so the fleet reads it from its beginning, also the records it
// received before any host noticed it. (Before the fix the new generation
// resolved LATEST anew and skipped them.)
func TestFleetRecreatedStreamWithLatestReadsItFromItsBeginning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFleetRig(t, 2)
		r.configure = func(c *kinesisload.Config) {
			c.StartPosition = scan.Latest()
			c.OnStreamRecreated = kinesisload.StreamRecreatedStartOver
			c.ListShardsInterval = 50 * time.Millisecond
		}
		for _, h := range []string{"a", "b"} {
			r.start(h)
		}
		// Initialised: what is put now is delivered.
		first := r.put(10)
		r.waitAll(first)
		for _, h := range []string{"a", "b"} {
			r.loads[h].Pause()
		}
		r.recreate(2)
		early := r.put(20)
		time.Sleep(1100 * time.Millisecond) // a T0 taken from now on is after them
		for _, h := range []string{"a", "b"} {
			r.loads[h].Resume()
		}
		late := r.put(20)
		r.waitAll(append(early, late...))
	})
}
