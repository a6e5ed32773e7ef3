package kinesisload

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/scan"
)

// checkRecords reports an odd answer when a record of a page (or fan-out
// event) has no sequence number, one that is not a sequence number, or one
// not after the record before it (last: the sequence number of the last
// record sent before the page, "" for none). Such a page is never handed
// to the Sink: its Checkpoint would not be a position (a TransactionalSink
// would store it, and every later Run refuse it), or its records would be
// delivered out of order. The reader reads again after last, as after any
// odd answer.
func checkRecords(rs []types.Record, last string) error {
	for i := range rs {
		if rs[i].SequenceNumber == nil {
			return fmt.Errorf("%w: record %d of %d of the page has no sequence number", kerr.ErrOddAnswer, i, len(rs))
		}
		seq := *rs[i].SequenceNumber
		if err := scan.ValidateSequence(seq); err != nil {
			return fmt.Errorf("%w: record %d of %d of the page: %w", kerr.ErrOddAnswer, i, len(rs), err)
		}
		if last != "" && scan.CompareSequence(seq, last) <= 0 {
			return fmt.Errorf("%w: record %d of %d of the page has sequence number %s, not after %s, the record before it", kerr.ErrOddAnswer, i, len(rs), seq, last)
		}
		last = aws.ToString(rs[i].SequenceNumber)
	}
	return nil
}
