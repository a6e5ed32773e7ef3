// Package kerr classifies errors returned by Kinesis calls, using the SDK's
// typed errors, so that retry decisions are made in one place.
package kerr

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// IsThrottled reports whether err means the caller exceeded a Kinesis rate
// limit: ProvisionedThroughputExceededException on data calls,
// LimitExceededException on control calls, KMSThrottlingException, or a
// generic throttling code from the service.
func IsThrottled(err error) bool {
	if err == nil {
		return false
	}
	var pte *types.ProvisionedThroughputExceededException
	var lee *types.LimitExceededException
	var kte *types.KMSThrottlingException
	if errors.As(err, &pte) || errors.As(err, &lee) || errors.As(err, &kte) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "ThrottlingException", "Throttling", "ThrottledException",
			"RequestThrottledException", "TooManyRequestsException",
			"RequestLimitExceeded", "SlowDown":
			return true
		}
	}
	return false
}

// ErrOddAnswer marks an answer Kinesis should not give, such as no output
// and no error, or the end of a shard that ListShards lists as open. Like a
// 5xx it says nothing about the request: [IsRetryable] holds for it.
var ErrOddAnswer = errors.New("odd answer from Kinesis")

// IsExpiredIterator reports whether err says the shard iterator has expired
// (iterators are valid for five minutes), so a new one must be requested.
func IsExpiredIterator(err error) bool {
	var e *types.ExpiredIteratorException
	return errors.As(err, &e)
}

// IsNotFound reports whether err says the stream or shard does not exist.
func IsNotFound(err error) bool {
	var e *types.ResourceNotFoundException
	return errors.As(err, &e)
}

// IsRetryable reports whether the same call may succeed if made again later:
// throttling, server-side failures (5xx, InternalFailure), and transport
// errors such as a reset connection or a per-call timeout. A cancelled or
// expired parent context is not retryable; callers check their own context
// before retrying.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if IsThrottled(err) || errors.Is(err, ErrOddAnswer) {
		return true
	}
	var ife *types.InternalFailureException
	if errors.As(err, &ife) {
		return true
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultServer {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// A response cut short (a truncated body, a connection closed mid-read)
	// fails to deserialize: nothing was applied on our side, and every call
	// tidemark makes is safe to repeat.
	var de *smithy.DeserializationError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &de) {
		return true
	}
	// The SDK's own classifiers know about the remaining transport faults
	// (connection resets, truncated bodies, EOF mid-response).
	for _, c := range retry.DefaultRetryables {
		if c.IsErrorRetryable(err).Bool() {
			return true
		}
	}
	return false
}
