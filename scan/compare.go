package scan

import "fmt"

// Compare orders two positions of one shard by progress, the order in
// which a shard's checkpoints are stored, and returns -1, 0 or +1:
// TRIM_HORIZON, then AT_TIMESTAMP (earlier times first), then the positions
// at a record (by sequence number; AT_SEQUENCE_NUMBER x before
// AFTER_SEQUENCE_NUMBER x), then SHARD_END. A start (TRIM_HORIZON,
// AT_TIMESTAMP) comes before every position at a record: it says that
// nothing has been read yet.
//
// A [github.com/tidemark/tidemark/kinesisload.TransactionalSink] uses it to
// tell a batch it stored already (the stored checkpoint compares equal to
// the batch's) from one it has passed (greater) and a new one (less).
//
// LATEST is refused, since its place changes over time (resolve it first),
// and so is an invalid position (see [Position.Validate]).
func Compare(a, b Position) (int, error) {
	for _, p := range []Position{a, b} {
		if err := p.Validate(); err != nil {
			return 0, fmt.Errorf("scan: comparing %v and %v: %w", a, b, err)
		}
		if p.Kind == KindLatest {
			return 0, fmt.Errorf("scan: comparing %v and %v: %w: LATEST has no fixed place; resolve it first", a, b, ErrInvalidPosition)
		}
	}
	ra, rb := progressRank(a), progressRank(b)
	switch {
	case ra != rb:
		return sign(ra - rb), nil
	case a.Kind == KindAtTimestamp:
		return a.Timestamp.Compare(b.Timestamp), nil
	case ra == 2:
		if c := CompareSequence(a.Sequence, b.Sequence); c != 0 {
			return c, nil
		}
		return sign(int(a.Kind) - int(b.Kind)), nil // AT before AFTER
	}
	return 0, nil
}

// progressRank is the first key of Compare's order.
func progressRank(p Position) int {
	switch p.Kind {
	case KindTrimHorizon:
		return 0
	case KindAtTimestamp:
		return 1
	case KindAtSequence, KindAfterSequence:
		return 2
	}
	return 3 // SHARD_END
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}
