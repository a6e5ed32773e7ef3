package scan

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Kind says what a [Position] refers to. The zero Kind is invalid.
type Kind uint8

// The kinds of position. The names match the Kinesis ShardIteratorType
// values, except [KindShardEnd], which is tidemark's terminal position for
// a shard whose every record has been delivered and committed.
const (
	KindLatest Kind = iota + 1
	KindTrimHorizon
	KindAtTimestamp
	KindAtSequence
	KindAfterSequence
	KindShardEnd
)

var kindNames = [...]string{
	KindLatest:        "LATEST",
	KindTrimHorizon:   "TRIM_HORIZON",
	KindAtTimestamp:   "AT_TIMESTAMP",
	KindAtSequence:    "AT_SEQUENCE_NUMBER",
	KindAfterSequence: "AFTER_SEQUENCE_NUMBER",
	KindShardEnd:      "SHARD_END",
}

// String returns the Kinesis name of the kind, such as "TRIM_HORIZON".
func (k Kind) String() string {
	if k == 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// MaxSequenceDigits is the longest sequence number accepted. Kinesis
// documents sequence numbers as strings of up to 128 decimal digits.
const MaxSequenceDigits = 128

// A Position is where reading a shard starts: a symbolic position (LATEST,
// TRIM_HORIZON), a time (AT_TIMESTAMP), a record (AT_ or
// AFTER_SEQUENCE_NUMBER), or the terminal SHARD_END.
//
// Sequence is set only for the two sequence kinds and Timestamp only for
// AT_TIMESTAMP. Compare positions with [Position.Equal]. The zero Position is
// invalid.
type Position struct {
	Kind      Kind
	Sequence  string
	Timestamp time.Time
}

// Latest returns the symbolic LATEST position: just after the newest record
// at the moment an iterator is requested. tidemark resolves it into a
// concrete position before reading.
func Latest() Position { return Position{Kind: KindLatest} }

// TrimHorizon returns the position of the oldest record Kinesis retains.
func TrimHorizon() Position { return Position{Kind: KindTrimHorizon} }

// ShardEnd returns the terminal position of a closed shard whose every
// record has been delivered and committed.
func ShardEnd() Position { return Position{Kind: KindShardEnd} }

// AtTimestamp returns the position of the first record that arrived at or
// after t. Kinesis keeps arrival times in milliseconds, so t is truncated to
// the millisecond and kept in UTC.
func AtTimestamp(t time.Time) Position {
	return Position{Kind: KindAtTimestamp, Timestamp: t.UTC().Truncate(time.Millisecond).Round(0)}
}

// AtSequence returns the position of the record with sequence number seq.
func AtSequence(seq string) Position { return Position{Kind: KindAtSequence, Sequence: seq} }

// AfterSequence returns the position just after the record with sequence
// number seq: the position to persist once that record is delivered.
func AfterSequence(seq string) Position { return Position{Kind: KindAfterSequence, Sequence: seq} }

// IsSymbolic reports whether p is LATEST, the only position whose meaning
// changes over time and which therefore must be resolved before it is
// persisted.
func (p Position) IsSymbolic() bool { return p.Kind == KindLatest }

// Equal reports whether p and q denote the same position.
func (p Position) Equal(q Position) bool {
	return p.Kind == q.Kind && p.Sequence == q.Sequence && p.Timestamp.Equal(q.Timestamp)
}

// Validate reports whether p is well formed: a known kind, a valid sequence
// number exactly for the sequence kinds, and a non-zero timestamp exactly for
// AT_TIMESTAMP.
func (p Position) Validate() error {
	switch p.Kind {
	case KindLatest, KindTrimHorizon, KindShardEnd:
		if p.Sequence != "" || !p.Timestamp.IsZero() {
			return fmt.Errorf("%w: %s takes no sequence number or timestamp", ErrInvalidPosition, p.Kind)
		}
	case KindAtTimestamp:
		if p.Sequence != "" {
			return fmt.Errorf("%w: %s takes no sequence number", ErrInvalidPosition, p.Kind)
		}
		if p.Timestamp.IsZero() {
			return fmt.Errorf("%w: %s needs a timestamp", ErrInvalidPosition, p.Kind)
		}
		if y := p.Timestamp.UTC().Year(); y < 0 || y > 9999 {
			return fmt.Errorf("%w: %s %v: year %d in UTC, outside 0000 to 9999", ErrInvalidPosition, p.Kind, p.Timestamp, y)
		}
	case KindAtSequence, KindAfterSequence:
		if !p.Timestamp.IsZero() {
			return fmt.Errorf("%w: %s takes no timestamp", ErrInvalidPosition, p.Kind)
		}
		if err := ValidateSequence(p.Sequence); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrInvalidPosition, uint8(p.Kind))
	}
	return nil
}

// String formats p so that [Parse] returns it again: "LATEST",
// "TRIM_HORIZON", "SHARD_END", "AT_SEQUENCE_NUMBER:<seq>",
// "AFTER_SEQUENCE_NUMBER:<seq>" or "AT_TIMESTAMP:<RFC 3339 UTC, ms>".
func (p Position) String() string {
	switch p.Kind {
	case KindAtSequence, KindAfterSequence:
		return p.Kind.String() + ":" + p.Sequence
	case KindAtTimestamp:
		return p.Kind.String() + ":" + p.Timestamp.UTC().Format(timestampLayout)
	}
	return p.Kind.String()
}

// MarshalText implements [encoding.TextMarshaler] with the format of
// [Position.String]; an invalid position is refused.
func (p Position) MarshalText() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler] with [Parse].
func (p *Position) UnmarshalText(b []byte) error {
	q, err := Parse(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

const timestampLayout = "2006-01-02T15:04:05.000Z07:00"

// Parse reads a position in the format of [Position.String]. Keywords are
// accepted in any case. It also accepts the aliases "-1" (LATEST) and "-2"
// (TRIM_HORIZON), and a bare sequence number, which means
// AFTER_SEQUENCE_NUMBER: the position after the last record consumed, as
// progress maps of other loaders store it. AT_TIMESTAMP accepts any RFC 3339
// time. Anything else is an error that quotes the input.
func Parse(s string) (Position, error) {
	in := strings.TrimSpace(s)
	switch in {
	case "-1":
		return Latest(), nil
	case "-2":
		return TrimHorizon(), nil
	}
	if isDigits(in) {
		p := AfterSequence(in)
		if err := p.Validate(); err != nil {
			return Position{}, fmt.Errorf("position %q: %w", s, err)
		}
		return p, nil
	}
	name, arg, hasArg := strings.Cut(in, ":")
	var k Kind
	for i := KindLatest; i <= KindShardEnd; i++ {
		if strings.EqualFold(name, kindNames[i]) {
			k = i
			break
		}
	}
	if k == 0 {
		return Position{}, fmt.Errorf("%w: %q is not LATEST, TRIM_HORIZON, AT_TIMESTAMP:<time>, AT_SEQUENCE_NUMBER:<seq>, AFTER_SEQUENCE_NUMBER:<seq>, SHARD_END, -1 or -2", ErrInvalidPosition, s)
	}
	var p Position
	switch k {
	case KindLatest, KindTrimHorizon, KindShardEnd:
		if hasArg {
			return Position{}, fmt.Errorf("%w: %q: %s takes no argument", ErrInvalidPosition, s, k)
		}
		p = Position{Kind: k}
	case KindAtTimestamp:
		t, err := time.Parse(time.RFC3339Nano, arg)
		if err != nil {
			return Position{}, fmt.Errorf("%w: %q: timestamp is not RFC 3339: %v", ErrInvalidPosition, s, err)
		}
		p = AtTimestamp(t)
	case KindAtSequence, KindAfterSequence:
		p = Position{Kind: k, Sequence: arg}
	}
	if err := p.Validate(); err != nil {
		return Position{}, fmt.Errorf("position %q: %w", s, err)
	}
	return p, nil
}

// ValidateSequence reports whether seq is a Kinesis sequence number: 1 to
// [MaxSequenceDigits] decimal digits.
func ValidateSequence(seq string) error {
	switch {
	case seq == "":
		return fmt.Errorf("%w: empty sequence number", ErrInvalidPosition)
	case len(seq) > MaxSequenceDigits:
		return fmt.Errorf("%w: sequence number has %d digits, more than %d", ErrInvalidPosition, len(seq), MaxSequenceDigits)
	case !isDigits(seq):
		return fmt.Errorf("%w: sequence number %q is not decimal digits", ErrInvalidPosition, seq)
	}
	return nil
}

// CompareSequence compares two valid sequence numbers numerically and
// returns -1, 0 or +1. Leading zeros are ignored.
func CompareSequence(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	switch {
	case len(a) != len(b):
		if len(a) < len(b) {
			return -1
		}
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// IteratorInput returns the GetShardIterator request that starts reading
// shard of stream at p. SHARD_END has no iterator: reading a completed shard
// is an error, as is an invalid position.
func (p Position) IteratorInput(stream, shard string) (*kinesis.GetShardIteratorInput, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("shard %s: %w", shard, err)
	}
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(stream), ShardId: aws.String(shard)}
	switch p.Kind {
	case KindLatest:
		in.ShardIteratorType = types.ShardIteratorTypeLatest
	case KindTrimHorizon:
		in.ShardIteratorType = types.ShardIteratorTypeTrimHorizon
	case KindAtTimestamp:
		in.ShardIteratorType = types.ShardIteratorTypeAtTimestamp
		in.Timestamp = aws.Time(p.Timestamp)
	case KindAtSequence:
		in.ShardIteratorType = types.ShardIteratorTypeAtSequenceNumber
		in.StartingSequenceNumber = aws.String(p.Sequence)
	case KindAfterSequence:
		in.ShardIteratorType = types.ShardIteratorTypeAfterSequenceNumber
		in.StartingSequenceNumber = aws.String(p.Sequence)
	case KindShardEnd:
		return nil, fmt.Errorf("shard %s: %w: SHARD_END has no iterator; the shard is complete", shard, ErrInvalidPosition)
	}
	return in, nil
}
