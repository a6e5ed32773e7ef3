package configtest

import (
	"fmt"
	"testing"
)

type cfg struct {
	Set    int
	Zero   bool
	Unset  string
	Nested []int
}

type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// A zero field fails unless it is listed as one whose default is zero.
func TestZeroFieldsFailUnlessListed(t *testing.T) {
	r := &recorder{TB: t}
	ZeroMeansDefault(r, cfg{Set: 1}, map[string]string{"Zero": "off by default"})
	if len(r.errs) != 2 {
		t.Fatalf("errors %q, want two: Unset and Nested", r.errs)
	}
	for i, f := range []string{"cfg{}.Unset", "cfg{}.Nested"} {
		if want := f + " is still zero"; len(r.errs[i]) < len(want) || r.errs[i][:len(want)] != want {
			t.Errorf("error %d = %q, want it to start %q", i, r.errs[i], want)
		}
	}
}
