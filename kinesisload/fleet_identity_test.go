package kinesisload_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload"
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

// A stream re-created under hosts that share it: no host reads the new
// stream with the old stream's progress. With StreamRecreatedStop every
// host stops with the *StreamMismatchError; with StreamRecreatedStartOver
// every host stops too, with the coordinator's refusal to start over (a
// fleet-wide start-over needs the whole fleet to move to a new generation
// of the table at once, which the in-memory fleet does not do), and the
// shared progress is left as it was, for the operator to decide.
func TestFleetRecreatedStreamNoHostReadsOldProgress(t *testing.T) {
	for _, policy := range []kinesisload.StreamRecreated{kinesisload.StreamRecreatedStop, kinesisload.StreamRecreatedStartOver} {
		t.Run(policy.String(), func(t *testing.T) {
			r := newFleetRig(t, 2)
			r.configure = func(c *kinesisload.Config) {
				c.OnStreamRecreated = policy
				c.ListShardsInterval = 50 * time.Millisecond
			}
			want := r.put(40)
			r.start("a")
			r.start("b")
			r.waitAll(want)
			before := r.fleet.Shards("orders")
			r.recreate(2)
			fresh := r.put(40) // on the new stream, same shard IDs
			for _, h := range []string{"a", "b"} {
				err := r.wait(h)
				if !errors.Is(err, kinesisload.ErrStreamMismatch) {
					t.Errorf("host %s: Run = %v, want an error wrapping ErrStreamMismatch", h, err)
				}
				var mm *kinesisload.StreamMismatchError
				if policy == kinesisload.StreamRecreatedStop && !errors.As(err, &mm) {
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
		})
	}
}
