package scan_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/tidemark/tidemark/internal/kerr"
	"github.com/tidemark/tidemark/kinesisload/kinesistest"
	"github.com/tidemark/tidemark/scan"
)

// nilListShards answers ListShards with no output and no error.
type nilListShards struct{ scan.Client }

func (nilListShards) ListShards(context.Context, *kinesis.ListShardsInput, ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	return nil, nil
}

// TestResolverNowNilOutput: a ListShards answer without output and without
// error is an odd answer, an error of Now, not a panic.
func TestResolverNowNilOutput(t *testing.T) {
	w := newWorld(t)
	kinesistest.NewStream(t, w.fake, "s", 1)
	cfg := w.testConfig(scan.StrategyProbe, 0)
	_, err := newResolver(t, cfg).Now(context.Background(), nilListShards{w.fake}, "s")
	if !errors.Is(err, kerr.ErrOddAnswer) {
		t.Errorf("Now = %v, want an odd-answer error", err)
	}
}
