// Command testtimes reads the JSON of `go test -json` on its standard
// input and prints what `go test` prints without -v: a line per package,
// and the whole output of a package that failed. At the end it lists the
// slowest tests (top-level tests, with their subtests' time included) and
// every test over a limit, so that the test command's summary shows where
// the time goes. It exits non-zero only when the input says a package or
// test failed (or is not test2json); a slow test is reported, not failed:
// a busy machine is slow, not wrong.
//
//	go test -json ./... | go run ./internal/testtimes -top 10 -over 30s
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of test2json's output (or of the go command's build
// output, which names the package ImportPath).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type timing struct {
	pkg, test string
	took      time.Duration
}

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests to list")
	over := flag.Duration("over", 30*time.Second, "list every test that took longer")
	flag.Parse()
	failed, err := report(os.Stdin, os.Stdout, *top, *over)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// report prints, as go test does without -v, a line per package and the
// output of what failed: a build (its compiler errors), a test (its
// output and its subtests'), a package (its own output: a panic, a
// timeout, with the output of the tests it interrupted).
func report(in io.Reader, out io.Writer, top int, over time.Duration) (failed bool, err error) {
	var (
		builds  = map[string]*strings.Builder{} // import path: its build output
		outputs = map[string]*strings.Builder{} // package and test: its output so far
		times   []timing
		skipped int
	)
	buf := func(m map[string]*strings.Builder, k string) *strings.Builder {
		b := m[k]
		if b == nil {
			b = &strings.Builder{}
			m[k] = b
		}
		return b
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not JSON: something the go command printed as it is.
			fmt.Fprintln(out, string(line))
			failed = true
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			buf(builds, e.ImportPath).WriteString(e.Output)
		case "build-fail":
			failed = true
			fmt.Fprint(out, buf(builds, e.ImportPath).String())
			delete(builds, e.ImportPath)
		case "output":
			buf(outputs, key).WriteString(e.Output)
		case "pass", "fail", "skip":
			if e.Test != "" {
				switch e.Action {
				case "fail":
					failed = true
					fmt.Fprint(out, buf(outputs, key).String())
				case "skip":
					skipped++
				}
				delete(outputs, key)
				if !strings.Contains(e.Test, "/") && e.Action != "skip" {
					times = append(times, timing{e.Package, e.Test, time.Duration(e.Elapsed * float64(time.Second))})
				}
				continue
			}
			// The package ended: its last output line is go test's.
			own := buf(outputs, key).String()
			delete(outputs, key)
			if e.Action == "fail" {
				failed = true
				// The tests that never ended (a panic, a timeout).
				for k, b := range outputs {
					if strings.HasPrefix(k, e.Package+"\x00") {
						fmt.Fprint(out, b.String())
						delete(outputs, k)
					}
				}
				fmt.Fprint(out, own)
			} else {
				fmt.Fprint(out, lastLine(own))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	// What never ended (the go command was killed): its output.
	for _, m := range []map[string]*strings.Builder{builds, outputs} {
		for _, b := range m {
			if b.Len() > 0 {
				fmt.Fprint(out, b.String())
				failed = true
			}
		}
	}
	slices.SortFunc(times, func(a, b timing) int { return int(b.took - a.took) })
	if len(times) > 0 && top > 0 {
		fmt.Fprintf(out, "\nthe %d slowest tests (of %d; %d skipped):\n", min(top, len(times)), len(times), skipped)
		for _, t := range times[:min(top, len(times))] {
			fmt.Fprintf(out, "  %7.1fs  %s %s\n", t.took.Seconds(), t.pkg, t.test)
		}
	}
	var slow []string
	for _, t := range times {
		if t.took > over {
			slow = append(slow, fmt.Sprintf("%s %s (%.1fs)", t.pkg, t.test, t.took.Seconds()))
		}
	}
	if len(slow) > 0 {
		fmt.Fprintf(out, "tests over %v (a test of the default run should take less; on a busy machine some may): %s\n", over, strings.Join(slow, ", "))
	}
	return failed, nil
}

// lastLine returns the last non-empty line of s, with its newline.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return ""
	}
	return s + "\n"
}
