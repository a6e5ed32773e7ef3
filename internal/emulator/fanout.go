package emulator

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/aws/smithy-go/eventstream"
)

// initialResponse is an http.RoundTripper for kinesis-local's
// SubscribeToShard. kinesis-local 0.6.2 implements enhanced fan-out, but
// its event stream does not begin with the initial-response event that
// the Go SDK reads first, so the stock client fails with "expected
// initial-response, got SubscribeToShardEvent". initialResponse puts an
// empty initial-response message in front of every successful
// SubscribeToShard answer and leaves every other answer as it is. For
// tests only: against Kinesis it would add a second initial-response
// (which the SDK would then report as an event of an unknown type).
type initialResponse struct{ next http.RoundTripper }

// InitialResponseTransport wraps next so that a SubscribeToShard answer
// from kinesis-local begins with the initial-response event the Go SDK
// waits for (see [NewClient]). For tests only.
func InitialResponseTransport(next http.RoundTripper) http.RoundTripper {
	return initialResponse{next}
}

// initialResponseMessage is the encoded event-stream message.
var initialResponseMessage = func() []byte {
	var msg eventstream.Message
	msg.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(eventstream.EventMessageType))
	msg.Headers.Set(eventstream.EventTypeHeader, eventstream.StringValue("initial-response"))
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, msg); err != nil {
		panic("emulator: encoding the initial-response message: " + err.Error()) // a constant message: never fails
	}
	return b.Bytes()
}()

func (t initialResponse) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".SubscribeToShard") {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(initialResponseMessage), resp.Body), resp.Body}
	resp.ContentLength = -1
	return resp, nil
}
