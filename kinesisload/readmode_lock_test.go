package kinesisload

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A shard's loop whose context ends (its lease lost, Run stopping) does not
// wait for another loop's lookup of the fan-out consumer, which may wait
// for the consumer to become ACTIVE for minutes. (The lookup held a
// sync.Mutex: the waiting loop could not be stopped, and a simulation's
// clock stood still.)
func TestConsumerLookupWaiterStopsWithItsContext(t *testing.T) {
	s := &session{fanout: fanoutSession{lock: make(chan struct{}, 1)}}
	s.fanout.lock <- struct{}{} // another loop is looking the consumer up
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := s.consumerARN(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("consumerARN while another lookup runs, context ended = %v, want DeadlineExceeded", err)
	}
}
