package kinesistest

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

func TestManualClock(t *testing.T) {
	c := NewManualClock(t0)
	if got := c.Advance(90 * time.Second); !got.Equal(t0.Add(90*time.Second)) || !c.Now().Equal(got) {
		t.Errorf("Advance returned %v, Now %v; want %v", got, c.Now(), t0.Add(90*time.Second))
	}
	c.Set(t0)
	if !c.Now().Equal(t0) {
		t.Errorf("after Set, Now = %v, want %v", c.Now(), t0)
	}
}

func TestZeroManualClockDrivesExpiry(t *testing.T) {
	// The zero ManualClock stands at the zero time; iterators still carry
	// their issue time exactly and expire on schedule.
	var c ManualClock
	x := &fixture{t: t, f: New(WithClock(&c)), clock: &c, stream: "s"}
	NewStream(t, x.f, "s", 1)
	x.put("0", "a")
	c.Advance(time.Second) // not the zero time itself: a time near it
	it := x.iter(shard0, types.ShardIteratorTypeTrimHorizon, "", nil)
	c.Advance(300 * time.Second)
	if _, err := x.getErr(it, 0); err != nil {
		t.Errorf("at 300 s: %v", err)
	}
	c.Advance(time.Millisecond)
	if _, err := x.getErr(it, 0); errorKind(err) != "ExpiredIterator" {
		t.Errorf("after 300 s: %v, want ExpiredIterator", err)
	}
}
