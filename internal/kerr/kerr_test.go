package kerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("stream s shard x: GetRecords: %w", err) }
	resp := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}
	}
	tests := []struct {
		name                                    string
		err                                     error
		throttled, expired, notFound, retryable bool
	}{
		{"nil", nil, false, false, false, false},
		{"provisioned throughput", wrap(&types.ProvisionedThroughputExceededException{Message: aws.String("Rate exceeded")}), true, false, false, true},
		{"limit exceeded", &types.LimitExceededException{}, true, false, false, true},
		{"kms throttling", &types.KMSThrottlingException{}, true, false, false, true},
		{"generic throttling code", &smithy.GenericAPIError{Code: "ThrottlingException"}, true, false, false, true},
		{"expired iterator", wrap(&types.ExpiredIteratorException{}), false, true, false, false},
		{"not found", wrap(&types.ResourceNotFoundException{}), false, false, true, false},
		{"invalid argument", &types.InvalidArgumentException{}, false, false, false, false},
		{"access denied", &types.AccessDeniedException{}, false, false, false, false},
		{"internal failure", &types.InternalFailureException{}, false, false, false, true},
		{"server fault code", &smithy.GenericAPIError{Code: "ServiceUnavailable", Fault: smithy.FaultServer}, false, false, false, true},
		{"client fault code", &smithy.GenericAPIError{Code: "UnrecognizedClientException", Fault: smithy.FaultClient}, false, false, false, false},
		{"HTTP 503", resp(503), false, false, false, true},
		{"HTTP 403", resp(403), false, false, false, false},
		{"per-call timeout", wrap(context.DeadlineExceeded), false, false, false, true},
		{"cancelled", wrap(context.Canceled), false, false, false, false},
		{"connection reset", wrap(&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}), false, false, false, true},
		{"truncated body", wrap(io.ErrUnexpectedEOF), false, false, false, true},
		{"undecodable response", wrap(&smithy.DeserializationError{Err: errors.New("unexpected end of JSON input")}), false, false, false, true},
		{"plain error", errors.New("bad"), false, false, false, false},
	}
	for _, tt := range tests {
		if got := IsThrottled(tt.err); got != tt.throttled {
			t.Errorf("%s: IsThrottled = %v, want %v", tt.name, got, tt.throttled)
		}
		if got := IsExpiredIterator(tt.err); got != tt.expired {
			t.Errorf("%s: IsExpiredIterator = %v, want %v", tt.name, got, tt.expired)
		}
		if got := IsNotFound(tt.err); got != tt.notFound {
			t.Errorf("%s: IsNotFound = %v, want %v", tt.name, got, tt.notFound)
		}
		if got := IsRetryable(tt.err); got != tt.retryable {
			t.Errorf("%s: IsRetryable = %v, want %v", tt.name, got, tt.retryable)
		}
	}
}
