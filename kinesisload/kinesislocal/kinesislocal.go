// Package kinesislocal points the AWS SDK's Kinesis client at kinesis-local,
// an emulator of Kinesis, for local testing only: a
// [github.com/tidemark/tidemark/kinesisload.Loader] given such a client reads
// in both modes, enhanced fan-out
// ([github.com/tidemark/tidemark/kinesisload.ReadFanOut]) included.
//
// kinesis-local (the npm package, version 0.6.2, a JavaScript build of
// kinesis-mock) implements SubscribeToShard, but the event stream of its
// answer does not begin with the initial-response event that Kinesis sends
// first and that the Go SDK reads before anything else. The stock
// *kinesis.Client therefore fails every subscription with
//
//	expected initial-response, got SubscribeToShardEvent
//
// and a Loader in fan-out mode cannot read a shard. [Transport] wraps an
// [http.RoundTripper] so that every successful SubscribeToShard answer
// begins with an (empty) initial-response event: it puts one in front when
// the first event is anything else, and leaves an answer that already
// begins with one, and every other answer, exactly as it came. [NewClient]
// returns a client that uses it, with the rest of what kinesis-local
// needs: the endpoint, a fixed region and dummy credentials.
//
// This package is for tests and local development against kinesis-local.
// Do not use it against AWS: a client for Kinesis comes from
// config.LoadDefaultConfig and needs no transport of its own.
//
// kinesis-local runs on Node. Started with
//
//	npm install kinesis-local@0.6.2
//	KINESIS_MOCK_CERT_PATH=$PWD/node_modules/kinesis-local/server.json node node_modules/kinesis-local/main.js
//
// it answers plain HTTP on port 4568 (KINESIS_MOCK_PLAIN_PORT) and TLS with
// a self-signed certificate on port 4567 (KINESIS_MOCK_TLS_PORT), on every
// interface; give [NewClient] the plain port, http://127.0.0.1:4568. Its
// region is us-east-1 unless AWS_REGION says otherwise, and stream
// operations take 500 ms unless the *_DURATION variables (such as
// CREATE_STREAM_DURATION=10ms) say otherwise.
//
// What it does not change: kinesis-local enforces none of Kinesis's limits
// (2 MiB/s per subscription, one SubscribeToShard call per second, the
// 5-minute end of a subscription); it never ends the subscription to a
// shard that was closed by a split or a merge (the Loader reads the rest
// of such a shard with GetRecords once ListShards lists it closed); and a
// subscription the client closed stays "in use" for a few seconds, so the
// next SubscribeToShard to that shard and consumer is refused with
// ResourceInUseException meanwhile (the Loader retries it).
package kinesislocal

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go/eventstream"
)

// Region is the region of the clients [NewClient] returns: kinesis-local's
// default (its AWS_REGION). kinesis-local keeps the streams of each region
// apart, so the client's region must be the one the streams were created
// in.
const Region = "us-east-1"

// Dummy credentials of the clients [NewClient] returns. kinesis-local
// checks no credentials, but the SDK signs every request and needs some.
const (
	AccessKeyID     = "kinesislocal"
	SecretAccessKey = "kinesislocal"
)

// NewClient returns a Kinesis client for the kinesis-local at endpoint, its
// plain (HTTP) port, such as "http://127.0.0.1:4568". The client has
// region [Region], the static credentials [AccessKeyID] and
// [SecretAccessKey], the SDK's standard retries, and an HTTP client of its
// own whose transport is [Transport] over a clone of
// [http.DefaultTransport]; it reads in both of the Loader's modes. The
// configuration of the environment (AWS_REGION, AWS_PROFILE, the shared
// files) plays no part.
//
// optFns change the options after that, as in [kinesis.New]: for example
// another Region, for a kinesis-local started with another AWS_REGION. An
// HTTPClient set there replaces the one described above; wrap its
// transport in [Transport] to keep fan-out working.
//
// The error says why endpoint is not an absolute http or https URL with a
// host. NewClient makes no request.
func NewClient(endpoint string, optFns ...func(*kinesis.Options)) (*kinesis.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("kinesislocal: endpoint %q: %w", endpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("kinesislocal: endpoint %q: want an http or https URL with a host, such as http://127.0.0.1:4568", endpoint)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	o := kinesis.Options{
		Region:       Region,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		HTTPClient:   &http.Client{Transport: Transport(tr)},
	}
	return kinesis.New(o, optFns...), nil
}

// Transport returns an [http.RoundTripper] that sends requests through
// base (through [http.DefaultTransport] when base is nil) and makes every
// successful SubscribeToShard answer begin with an initial-response event,
// as the Go SDK requires and kinesis-local omits.
//
// An answer is changed only when it answers a SubscribeToShard request
// (its X-Amz-Target header names the operation) with 200 OK, and only by
// putting an empty initial-response event in front of the first event
// when that event is not an initial-response already. The first event is
// read when the SDK first reads the body, not in RoundTrip, so RoundTrip
// returns as soon as base does. Every other answer, and every request, is
// passed on untouched.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return transport{base}
}

// transport is the RoundTripper of [Transport].
type transport struct{ base http.RoundTripper }

// RoundTrip implements [http.RoundTripper].
func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".SubscribeToShard") {
		return resp, err
	}
	resp.Body = &withInitialResponse{body: resp.Body}
	resp.ContentLength = -1
	return resp, nil
}

// initialResponseType is the :event-type of the first event of a
// SubscribeToShard answer.
const initialResponseType = "initial-response"

// initialResponseMessage is an encoded event-stream message of type
// initial-response with no payload: what [Transport] puts in front.
var initialResponseMessage = func() []byte {
	var msg eventstream.Message
	msg.Headers.Set(eventstream.MessageTypeHeader, eventstream.StringValue(eventstream.EventMessageType))
	msg.Headers.Set(eventstream.EventTypeHeader, eventstream.StringValue(initialResponseType))
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, msg); err != nil {
		panic("kinesislocal: encoding the initial-response message: " + err.Error()) // a constant message: never fails
	}
	return b.Bytes()
}()

// withInitialResponse is the body of a SubscribeToShard answer. Its first
// Read reads the first event-stream message of body and decides what the
// reader sees: that message as it came when it is an initial-response
// (or cannot be decoded: the SDK then reports it), otherwise an
// initial-response and then that message; then the rest of body. Reads
// come from one goroutine (the SDK's), Close may come from another.
type withInitialResponse struct {
	body io.ReadCloser
	r    io.Reader // nil until the first Read
}

// Read implements [io.Reader].
func (w *withInitialResponse) Read(p []byte) (int, error) {
	if w.r == nil {
		w.r = w.first()
	}
	return w.r.Read(p)
}

// first reads the first message of the body and returns the reader the
// SDK reads from. When the body fails or the message cannot be decoded,
// the SDK gets the bytes as they came and then the body's error, for its
// own decoder to report.
func (w *withInitialResponse) first() io.Reader {
	var raw bytes.Buffer // the bytes of the first message, as read
	src := &stickyErr{r: w.body}
	msg, err := eventstream.NewDecoder().Decode(io.TeeReader(src, &raw), nil)
	if err == nil && !isInitialResponse(msg) {
		return io.MultiReader(bytes.NewReader(initialResponseMessage), &raw, src)
	}
	return io.MultiReader(&raw, src)
}

// Close implements [io.Closer]: it closes the answer's body.
func (w *withInitialResponse) Close() error { return w.body.Close() }

// isInitialResponse reports whether msg is an initial-response event.
func isInitialResponse(msg eventstream.Message) bool {
	v := msg.Headers.Get(eventstream.EventTypeHeader)
	return v != nil && v.String() == initialResponseType
}

// stickyErr is a reader that remembers the first error of r and returns
// it from then on.
type stickyErr struct {
	r   io.Reader
	err error
}

func (s *stickyErr) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	s.err = err
	return n, err
}
