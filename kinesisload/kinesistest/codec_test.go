package kinesistest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"
)

func TestIteratorRoundTrip(t *testing.T) {
	f := New()
	for _, it := range []iterator{
		{streamID: 1, stream: "s", shard: 0, from: 0, issued: t0},
		{streamID: 1 << 40, stream: strings.Repeat("n", 128), shard: 1 << 20, from: 1<<64 - 1, issued: time.Time{}.Add(time.Second)},
		{streamID: 7, stream: "a.b-c_d", shard: 3, from: 42, issued: t0.Add(123456789)},
	} {
		got, err := f.decodeIterator(f.encodeIterator(it))
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", it, err)
		}
		if d := cmp.Diff(it, got, cmp.AllowUnexported(iterator{})); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
}

// FuzzDecode feeds arbitrary strings to the iterator and NextToken
// decoders: they must refuse them without panicking, and whatever they
// accept must encode back to the same string.
func FuzzDecode(f *testing.F) {
	fk := New()
	f.Add(fk.encodeIterator(iterator{streamID: 1, stream: "s", shard: 2, from: 3, issued: t0}))
	f.Add(fk.encodeNextToken(nextToken{streamID: 1, stream: "s", after: 2, filterType: "AT_LATEST", issued: t0}))
	f.Add("")
	f.Add("AQ==")
	f.Fuzz(func(t *testing.T, s string) {
		if it, err := fk.decodeIterator(s); err == nil {
			if again := fk.encodeIterator(it); again != s {
				t.Errorf("iterator %q decoded and encoded to %q", s, again)
			}
		}
		if tok, err := fk.decodeNextToken(s); err == nil {
			if again := fk.encodeNextToken(tok); again != s {
				t.Errorf("token %q decoded and encoded to %q", s, again)
			}
		}
	})
}

func TestWaitActiveGivesUpWithTheLastError(t *testing.T) {
	f := New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := WaitActive(ctx, f, "missing")
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "stream missing did not become ACTIVE") {
		t.Errorf("WaitActive on a missing stream: %v, want a ResourceNotFoundException naming the stream", err)
	}
}
