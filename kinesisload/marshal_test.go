package kinesisload

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tidemark/tidemark/scan"
)

// Every value a hook passes marshals: logging each with slog's JSON
// handler prints no error, the zero From of a new shard's first state is
// "NONE", and an SDK error (whose HTTP request holds functions) is its
// message.
func TestHookValuesMarshal(t *testing.T) {
	req, _ := http.NewRequest(http.MethodPost, "https://kinesis.us-east-1.amazonaws.com", nil)
	req.GetBody = func() (io.ReadCloser, error) { return nil, nil }
	sdkErr := &smithy.OperationError{ServiceID: "Kinesis", OperationName: "GetRecords", Err: &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 500, Request: req}},
		Err:      &types.InternalFailureException{Message: aws.String("internal failure")},
	}}
	events := []any{
		ShardStateChanged{Stream: "orders", ShardID: shard0, To: StateActive},
		ShardStateChanged{Stream: "orders", ShardID: shard0, From: StateActive, To: StateDraining},
		BatchDelivered{Stream: "orders", ShardID: shard0, Records: 2, Bytes: 10, Latency: time.Millisecond, Attempts: 1},
		InitResolved{Stream: "orders", Resolved: 1, Positions: map[string]scan.Position{shard0: scan.AfterSequence("42"), shard1: scan.TrimHorizon()}, Duration: time.Second},
		InitProgress{Stream: "orders", ShardID: shard0, Position: scan.AfterSequence("42"), Done: 1, Total: 2},
		Fetched{Stream: "orders", ShardID: shard0, Records: 1},
		Throttled{Stream: "orders", ShardID: shard0, Op: "GetRecords", Backoff: time.Second, Err: sdkErr},
		Retry{Stream: "orders", ShardID: shard0, Op: "GetRecords", Attempt: 1, Backoff: time.Second, Err: sdkErr},
		Retry{Stream: "orders", Op: "ListShards", Attempt: 1},
		IteratorRenewed{Stream: "orders", ShardID: shard0, From: "AFTER_SEQUENCE_NUMBER:42"},
		LeaseAcquired{Stream: "orders", ShardID: shard0, Epoch: 3, Reason: AcquireExpired, Position: scan.AfterSequence("42")},
		LeaseLost{Stream: "orders", ShardID: shard0, Epoch: 3, Reason: LostCommitRefused, Held: time.Second,
			Err: &LeaseLostError{Stream: "orders", Shard: shard0, Epoch: 3, Why: LostCommitRefused, Reason: "owner is b at epoch 4"}},
		LeaseHandedOff{Stream: "orders", ShardID: shard0, Epoch: 3, Reason: HandoffRebalance, Position: scan.AfterSequence("42"), Held: time.Second},
	}
	for _, e := range events {
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("hook", "event", e)
		out := buf.String()
		if strings.Contains(out, "!ERROR") {
			t.Errorf("%T does not marshal: %s", e, out)
			continue
		}
		if !json.Valid(buf.Bytes()) {
			t.Errorf("%T: invalid JSON: %s", e, out)
		}
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("hook", "event", events[0])
	if !strings.Contains(buf.String(), `"From":"NONE"`) {
		t.Errorf("the zero From is not NONE: %s", &buf)
	}
	buf.Reset()
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("hook", "event", events[7])
	if !strings.Contains(buf.String(), "internal failure") {
		t.Errorf("Retry.Err is not its message: %s", &buf)
	}
	buf.Reset()
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("hook", "event", events[len(events)-2])
	if !strings.Contains(buf.String(), `"Reason":"commit_refused"`) || !strings.Contains(buf.String(), "owner is b at epoch 4") {
		t.Errorf("LeaseLost's reason is not its name, or Err not its message: %s", &buf)
	}
	if got := ShardState(0).String(); got != "NONE" {
		t.Errorf("ShardState(0).String() = %q, want NONE", got)
	}
	var s ShardState = StateActive
	if err := s.UnmarshalText([]byte("NONE")); err != nil || s != 0 {
		t.Errorf("UnmarshalText(NONE) = %v, %v; want 0", s, err)
	}
}
