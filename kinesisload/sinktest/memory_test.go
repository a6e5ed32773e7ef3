package sinktest_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark/tidemark/kinesisload/sinktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The conformance suite on the reference implementation.
func TestConformanceMemory(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Harness { return sinktest.NewMemory().Harness() })
}
