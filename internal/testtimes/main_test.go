package main

import (
	"strings"
	"testing"
	"time"
)

const passing = `{"Action":"start","Package":"p/a"}
{"Action":"run","Package":"p/a","Test":"TestFast"}
{"Action":"output","Package":"p/a","Test":"TestFast","Output":"=== RUN   TestFast\n"}
{"Action":"pass","Package":"p/a","Test":"TestFast","Elapsed":0.5}
{"Action":"pass","Package":"p/a","Test":"TestSlow/sub","Elapsed":40}
{"Action":"pass","Package":"p/a","Test":"TestSlow","Elapsed":41}
{"Action":"skip","Package":"p/a","Test":"TestSkipped","Elapsed":0}
{"Action":"output","Package":"p/a","Output":"PASS\n"}
{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t41.6s\n"}
{"Action":"pass","Package":"p/a","Elapsed":41.6}
`

// A passing run prints a line per package, the slowest top-level tests
// (subtests and skips left out), and the tests over the limit; it is not
// a failure.
func TestAPassingRunListsTheSlowestAndTheTestsOverTheLimit(t *testing.T) {
	var out strings.Builder
	failed, err := report(strings.NewReader(passing), &out, 5, 30*time.Second)
	if err != nil || failed {
		t.Fatalf("report = %v, %v; want a pass", failed, err)
	}
	got := out.String()
	for _, want := range []string{"ok  \tp/a\t41.6s\n", "the 2 slowest tests (of 2; 1 skipped):\n", "41.0s  p/a TestSlow\n", "0.5s  p/a TestFast\n", "tests over 30s", "p/a TestSlow (41.0s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"=== RUN", "TestSlow/sub", "TestSkipped\n", "PASS\n"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q:\n%s", not, got)
		}
	}
}

// A failed package prints its whole output and fails; so does a line that
// is not test2json (a build error), and a package that never ended.
func TestFailuresPrintTheirOutputAndFail(t *testing.T) {
	for name, in := range map[string]string{
		"failed test": `{"Action":"output","Package":"p/b","Test":"TestBad","Output":"    b_test.go:9: want 1, got 2\n"}
{"Action":"fail","Package":"p/b","Test":"TestBad","Elapsed":0.1}
{"Action":"output","Package":"p/b","Output":"FAIL\tp/b\t0.2s\n"}
{"Action":"fail","Package":"p/b","Elapsed":0.2}
`,
		// As go test -json writes them since Go 1.24.
		"build error": `{"ImportPath":"p/c [p/c.test]","Action":"build-output","Output":"# p/c [p/c.test]\n"}
{"ImportPath":"p/c [p/c.test]","Action":"build-output","Output":"c_test.go:5:28: syntax error\n"}
{"ImportPath":"p/c [p/c.test]","Action":"build-fail"}
{"Action":"start","Package":"p/c"}
{"Action":"output","Package":"p/c","Output":"FAIL\tp/c [build failed]\n"}
{"Action":"fail","Package":"p/c","Elapsed":0,"FailedBuild":"p/c [p/c.test]"}
`,
		"not test2json": "go: cannot find main module\n",
		"never ended": `{"Action":"output","Package":"p/d","Test":"TestHang","Output":"panic: test timed out after 10m0s\n"}
`,
	} {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			failed, err := report(strings.NewReader(in), &out, 5, 30*time.Second)
			if err != nil || !failed {
				t.Fatalf("report = %v, %v; want a failure", failed, err)
			}
			for _, want := range []string{"want 1, got 2", "syntax error", "timed out", "cannot find main module"} {
				if strings.Contains(in, want) && !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}
