package journal

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// helperEnv selects a helper mode when the test binary re-executes itself
// as a child process (see crash_test.go).
const helperEnv = "TIDEMARK_JOURNAL_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		code, err := runHelper(mode)
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
		}
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
