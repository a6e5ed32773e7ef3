package journal

import "fmt"

// runHelper runs a child-process helper mode; see crash_test.go.
func runHelper(mode string) (int, error) {
	return 2, fmt.Errorf("unknown helper mode %q", mode)
}
