package kinesisload

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/journal"
	"github.com/tidemark/tidemark/scan"
)

// refuser is a Sink that refuses the first n calls with err (every call
// when n < 0) and counts its calls.
type refuser struct {
	*recorder
	mu    sync.Mutex
	calls int
}

func newRefuser(n int, err func(call int) error) *refuser {
	r := &refuser{recorder: newRecorder()}
	r.fail = func(Batch) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls++
		if n < 0 || r.calls <= n {
			return err(r.calls)
		}
		return nil
	}
	return r
}

func (r *refuser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// The zero SinkRetries is the default, and the default retries a
// transiently refused batch without limit: a destination down for 60
// tries (12 times the old default bound of 5) is waited out, every retry
// in the hooks and Stats, and then everything is delivered.
func TestSinkOutageIsWaitedOutByDefault(t *testing.T) {
	if got := DefaultConfig().SinkRetries; got != SinkRetriesForever {
		t.Errorf("DefaultConfig().SinkRetries = %d, want SinkRetriesForever", got)
	}
	if got := (Config{}).withDefaults().SinkRetries; got != SinkRetriesForever {
		t.Errorf("the zero SinkRetries means %d, want SinkRetriesForever", got)
	}
	s := newFakeStream(t, 1)
	sink := newRefuser(60, func(call int) error { return fmt.Errorf("connection refused (call %d)", call) })
	hk := &retryLog{}
	cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), SinkBackoff: time.Millisecond, SinkMaxBackoff: time.Millisecond}
	r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())), WithHooks(hk, sink.recorder))
	s.put(shard0, "r1")
	sink.waitFor(t, "r1")
	if n := hk.maxAttempt("Deliver", shard0); n != 60 {
		t.Errorf("Deliver retried %d times, want 60", n)
	}
	st := r.l.Stats()
	if len(st.Shards) != 1 || st.Shards[0].Retries != 60 || !strings.Contains(st.Shards[0].LastError, "connection refused (call 60)") {
		t.Errorf("Stats.Shards = %+v, want 60 retries, the last error the 60th refusal", st.Shards)
	}
	if err := r.stop(t); !errors.Is(err, ErrClosed) {
		t.Errorf("Run = %v, want ErrClosed", err)
	}
}

// A permanent error stops Run at the first refusal, whatever SinkRetries
// says, with a *RunError of class ErrSink naming the shard and the batch
// and wrapping both ErrPermanent and the Sink's error; so does a panic.
// SinkNoRetries stops at the first transient refusal, and a positive
// SinkRetries after that many retries.
func TestSinkPermanentErrorsStopAtOnce(t *testing.T) {
	errBadRecord := errors.New("record 7 does not fit column data")
	tests := []struct {
		name    string
		retries int
		err     func(int) error
		calls   int    // calls of the Sink before Run stops
		says    string // in Run's error
		wrap    []error
	}{
		{"permanent, default retries", 0, func(int) error { return Permanent(errBadRecord) }, 1, "with a permanent error", []error{ErrPermanent, errBadRecord}},
		{"permanent, retries forever", SinkRetriesForever, func(int) error { return fmt.Errorf("insert: %w", Permanent(errBadRecord)) }, 1, "with a permanent error", []error{ErrPermanent, errBadRecord}},
		{"permanent after transient ones", 0, func(call int) error {
			if call < 3 {
				return errBoom
			}
			return Permanent(errBadRecord)
		}, 3, "with a permanent error (try 3)", []error{ErrPermanent, errBadRecord}},
		{"panic", 0, func(int) error { panic(errBadRecord) }, 1, "with a permanent error", []error{ErrPanicked, errBadRecord}},
		{"no retries", SinkNoRetries, func(int) error { return errBoom }, 1, "1 times", []error{errBoom}},
		{"three retries", 3, func(int) error { return errBoom }, 4, "4 times", []error{errBoom}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeStream(t, 1)
			sink := newRefuser(-1, tt.err)
			cfg := Config{Stream: s.name, Sink: sink, StartPosition: scan.TrimHorizon(), SinkRetries: tt.retries,
				SinkBackoff: time.Millisecond, SinkMaxBackoff: time.Millisecond}
			seq := s.put(shard0, "r1")
			r := start(t, context.Background(), cfg, WithClient(s.f), WithStore(memStore(t, journal.NewMemory())))
			err := r.wait(t)
			checkStop(t, err, s.name, shard0, "Deliver", ErrSink)
			for _, w := range tt.wrap {
				if !errors.Is(err, w) {
					t.Errorf("Run = %v, want it to wrap %v", err, w)
				}
			}
			if !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), "ending at "+scan.AfterSequence(seq).String()) {
				t.Errorf("Run = %q, want it to say %q and name the batch (ending at %v)", err, tt.says, scan.AfterSequence(seq))
			}
			if n := sink.count(); n != tt.calls {
				t.Errorf("the Sink was called %d times, want %d", n, tt.calls)
			}
		})
	}
}

// Permanent keeps the message, unwraps to ErrPermanent and the cause, and
// is nil for nil.
func TestPermanent(t *testing.T) {
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	var pe *PanicError
	cause := fmt.Errorf("wrapped: %w", &PanicError{Where: "x"})
	err := Permanent(cause)
	if err.Error() != cause.Error() || !errors.Is(err, ErrPermanent) || !errors.As(err, &pe) {
		t.Errorf("Permanent(%v) = %v: want the message, ErrPermanent and the cause", cause, err)
	}
	if errors.Is(errBoom, ErrPermanent) {
		t.Error("a plain error is permanent")
	}
}

// SinkNoRetries is valid, anything below it is not.
func TestSinkRetriesValues(t *testing.T) {
	base := Config{Stream: "s", Sink: newRecorder()}
	for _, n := range []int{SinkNoRetries, SinkRetriesForever, 0, 1, 100} {
		c := base
		c.SinkRetries = n
		if err := c.Validate(); err != nil {
			t.Errorf("SinkRetries %d: Validate = %v", n, err)
		}
	}
	c := base
	c.SinkRetries = SinkNoRetries - 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SinkRetries = -3") {
		t.Errorf("SinkRetries -3: Validate = %v, want an error naming it", err)
	}
}
