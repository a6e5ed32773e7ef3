package scan_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// badSeq answers GetRecords with records whose sequence number is not a
// sequence number (an odd answer of a broken proxy or emulator).
type badSeq struct {
	scan.Client
	seq string
}

func (c badSeq) GetRecords(ctx context.Context, in *kinesis.GetRecordsInput, opts ...func(*kinesis.Options)) (*kinesis.GetRecordsOutput, error) {
	out, err := c.Client.GetRecords(ctx, in, opts...)
	if err == nil {
		for i := range out.Records {
			out.Records[i].SequenceNumber = aws.String(c.seq)
		}
	}
	return out, err
}

// An odd answer never becomes a resolved position: Resolve returns an
// error naming the shard, or valid positions only. A record whose
// sequence number is empty or not decimal digits came back as the
// position AFTER_SEQUENCE_NUMBER:<it>, which the Loader then journals and
// cannot read from (or, for the empty one, is refused by the journal
// store, blamed on the journal).
func TestAnOddSequenceNumberIsNotAPosition(t *testing.T) {
	for _, seq := range []string{"", "12ab", "-5"} {
		for _, strategy := range []scan.Strategy{scan.StrategyProbe, scan.StrategyFullScan} {
			w := newWorld(t)
			kinesistest.NewStream(t, w.fake, "s", 1)
			putN(t, w.fake, "s", shard0, 3, 10, nil)
			w.clock.Advance(10e9)
			r := newResolver(t, w.testConfig(strategy, 0))
			res, err := r.Resolve(context.Background(), scan.Request{Client: badSeq{Client: w.fake, seq: seq}, Stream: "s", Shards: []string{shard0}, At: w.clock.Now()})
			if err != nil {
				continue
			}
			for _, x := range res {
				if verr := x.Position.Validate(); verr != nil {
					t.Errorf("seq %q, strategy %v: Resolve returned the invalid position %q and no error: %v", seq, strategy, x.Position, verr)
				}
			}
		}
	}
}
