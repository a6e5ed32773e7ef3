package scan_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/google/go-cmp/cmp"

	"github.com/tidemark/tidemark/scan"
)

func TestParse(t *testing.T) {
	ts := time.Date(2026, 11, 30, 7, 48, 1, 123_000_000, time.UTC)
	long := strings.Repeat("9", scan.MaxSequenceDigits)
	tests := []struct {
		in   string
		want scan.Position
	}{
		{"LATEST", scan.Latest()},
		{"latest", scan.Latest()},
		{"LaTeSt", scan.Latest()},
		{" latest ", scan.Latest()},
		{"-1", scan.Latest()},
		{"-2", scan.TrimHorizon()},
		{"TRIM_HORIZON", scan.TrimHorizon()},
		{"trim_horizon", scan.TrimHorizon()},
		{"SHARD_END", scan.ShardEnd()},
		{"AT_SEQUENCE_NUMBER:49590338271490256608559692538361571095921575989136588898", scan.AtSequence("49590338271490256608559692538361571095921575989136588898")},
		{"AFTER_SEQUENCE_NUMBER:1", scan.AfterSequence("1")},
		{"after_sequence_number:" + long, scan.AfterSequence(long)},
		{"12345", scan.AfterSequence("12345")},
		{"AT_TIMESTAMP:2026-11-30T07:48:01.123Z", scan.AtTimestamp(ts)},
		{"AT_TIMESTAMP:2026-11-30T08:48:01.123456789+01:00", scan.AtTimestamp(ts)},
	}
	for _, tt := range tests {
		got, err := scan.Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !got.Equal(tt.want) {
			t.Errorf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct {
		in      string
		wantSub string // the error must quote the input or name the fault
	}{
		{"", `""`},
		{"LAST", `"LAST"`},
		{"-3", `"-3"`},
		{"LATEST:1", `"LATEST:1"`},
		{"SHARD_END:5", `"SHARD_END:5"`},
		{"AT_SEQUENCE_NUMBER:", "empty sequence number"},
		{"AT_SEQUENCE_NUMBER:12a", `"12a"`},
		{"AFTER_SEQUENCE_NUMBER:-5", `"-5"`},
		{"AFTER_SEQUENCE_NUMBER:" + strings.Repeat("1", scan.MaxSequenceDigits+1), "129 digits"},
		{strings.Repeat("1", scan.MaxSequenceDigits+1), "129 digits"},
		{"AT_TIMESTAMP:yesterday", `"AT_TIMESTAMP:yesterday"`},
		{"AT_TIMESTAMP", `"AT_TIMESTAMP": timestamp is not RFC 3339`},
	}
	for _, tt := range tests {
		_, err := scan.Parse(tt.in)
		if err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", tt.in)
			continue
		}
		if !errors.Is(err, scan.ErrInvalidPosition) {
			t.Errorf("Parse(%q) = %v, want ErrInvalidPosition", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.wantSub) {
			t.Errorf("Parse(%q) = %q, want it to contain %q", tt.in, err, tt.wantSub)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	positions := []scan.Position{
		scan.Latest(), scan.TrimHorizon(), scan.ShardEnd(),
		scan.AtSequence("0"), scan.AfterSequence("49590338271490256608559692538361571095921575989136588898"),
		scan.AtTimestamp(time.Date(2020, 2, 29, 23, 59, 59, 999_999_999, time.FixedZone("x", -7*3600))),
	}
	for _, p := range positions {
		s := p.String()
		got, err := scan.Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q): %v", s, err)
		}
		if !got.Equal(p) {
			t.Errorf("Parse(String(%v)) = %v", p, got)
		}
		b, err := p.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%v): %v", p, err)
		}
		var q scan.Position
		if err := q.UnmarshalText(b); err != nil || !q.Equal(p) {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", b, q, err, p)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []scan.Position{
		{},
		{Kind: 99},
		{Kind: scan.KindLatest, Sequence: "1"},
		{Kind: scan.KindTrimHorizon, Timestamp: time.Unix(1, 0)},
		{Kind: scan.KindAtSequence},
		{Kind: scan.KindAfterSequence, Sequence: "1", Timestamp: time.Unix(1, 0)},
		{Kind: scan.KindAtTimestamp},
		{Kind: scan.KindAtTimestamp, Timestamp: time.Unix(1, 0), Sequence: "1"},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, scan.ErrInvalidPosition) {
			t.Errorf("Validate(%#v) = %v, want ErrInvalidPosition", p, err)
		}
		if _, err := p.MarshalText(); err == nil {
			t.Errorf("MarshalText(%#v) succeeded for an invalid position", p)
		}
	}
}

func TestCompareSequence(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"1", "1", 0},
		{"1", "2", -1},
		{"10", "9", 1},
		{"009", "9", 0},
		{"49590338271490256608559692538361571095921575989136588898", "49590338271490256608559692538361571095921575989136588899", -1},
		{"100000000000000000000000000000000000000000000000000000000", "99999999999999999999999999999999999999999999999999999999", 1},
	}
	for _, tt := range tests {
		if got := scan.CompareSequence(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareSequence(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := scan.CompareSequence(tt.b, tt.a); got != -tt.want {
			t.Errorf("CompareSequence(%s, %s) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
}

func TestIteratorInput(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	base := kinesis.GetShardIteratorInput{StreamName: aws.String("s"), ShardId: aws.String("shardId-000000000001")}
	with := func(f func(*kinesis.GetShardIteratorInput)) *kinesis.GetShardIteratorInput {
		in := base
		f(&in)
		return &in
	}
	tests := []struct {
		p    scan.Position
		want *kinesis.GetShardIteratorInput
	}{
		{scan.Latest(), with(func(in *kinesis.GetShardIteratorInput) { in.ShardIteratorType = types.ShardIteratorTypeLatest })},
		{scan.TrimHorizon(), with(func(in *kinesis.GetShardIteratorInput) { in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon })},
		{scan.AtTimestamp(ts), with(func(in *kinesis.GetShardIteratorInput) {
			in.ShardIteratorType = types.ShardIteratorTypeAtTimestamp
			in.Timestamp = aws.Time(ts)
		})},
		{scan.AtSequence("7"), with(func(in *kinesis.GetShardIteratorInput) {
			in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
			in.StartingSequenceNumber = aws.String("7")
		})},
		{scan.AfterSequence("8"), with(func(in *kinesis.GetShardIteratorInput) {
			in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
			in.StartingSequenceNumber = aws.String("8")
		})},
	}
	for _, tt := range tests {
		got, err := tt.p.IteratorInput("s", "shardId-000000000001")
		if err != nil {
			t.Fatalf("%v: %v", tt.p, err)
		}
		if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(kinesis.GetShardIteratorInput{})); diff != "" {
			t.Errorf("%v: IteratorInput (-want +got):\n%s", tt.p, diff)
		}
	}
	for _, p := range []scan.Position{scan.ShardEnd(), {}, scan.AfterSequence("x")} {
		_, err := p.IteratorInput("s", "shardId-000000000009")
		if err == nil || !strings.Contains(err.Error(), "shardId-000000000009") {
			t.Errorf("IteratorInput(%#v) = %v, want an error naming the shard", p, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"LATEST", "latest", "-1", "-2", "TRIM_HORIZON", "SHARD_END", "123",
		"AT_SEQUENCE_NUMBER:1", "AFTER_SEQUENCE_NUMBER:00042", "AT_TIMESTAMP:2026-11-30T07:48:01.123Z",
		"AT_TIMESTAMP:2026-11-30T07:48:01+05:30", "", ":", "AT_TIMESTAMP:", "LATEST:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := scan.Parse(s)
		if err != nil {
			if !errors.Is(err, scan.ErrInvalidPosition) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalidPosition", s, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse(%q) returned invalid %#v: %v", s, p, err)
		}
		q, err := scan.Parse(p.String())
		if err != nil {
			t.Fatalf("Parse(String(Parse(%q))) = %v", s, err)
		}
		if !q.Equal(p) {
			t.Fatalf("round trip of %q: %v became %v", s, p, q)
		}
		if q.String() != p.String() {
			t.Fatalf("String not canonical: %q vs %q", p.String(), q.String())
		}
	})
}
