// Command modproxy writes a file-based Go module proxy serving this
// repository's published modules at the version they are released at next,
// made from the files a tag would publish: what the go command will download
// once the tags exist. It lets a consumer be built from outside the
// repository before the release (scripts/proxycheck.sh), and `go mod tidy`
// run on modules that require unreleased versions (scripts/tidy.sh); see
// docs/releasing.md.
//
// Usage:
//
//	go run ./internal/modproxy -out DIR [-work FILE]
//
// The modules and versions are the versioned replace directives of the
// workspace file (-work, default ./go.work) that point into the repository:
// `replace github.com/tidemark/tidemark v0.1.0 => ./` serves the module in
// ./ as v0.1.0. For each one it writes, in the layout of the GOPROXY
// protocol, DIR/<module>/@v/list, <version>.info, <version>.mod and
// <version>.zip, and prints "<module> <version>" on a line. DIR then works
// as GOPROXY=file://DIR.
//
// A module's files are those git lists in its directory, tracked or untracked
// but not ignored (`git ls-files --cached --others --exclude-standard`), as
// they are in the work tree, less what the go command leaves out of a module
// zip: nested modules' directories, vendored packages, VCS directories,
// symbolic links. A file name the go command would refuse is an error naming
// it.
//
// Before writing anything it checks the workspace: every go.mod git lists in
// the repository is a module the workspace uses, and no used module's go.mod
// has a replace directive (those resolve nowhere outside the repository).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	out := fs.String("out", "", "the proxy directory to write (required; created if missing)")
	work := fs.String("work", "go.work", "the workspace file naming the modules and versions to serve")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("usage: modproxy -out DIR [-work FILE]")
	}
	ws, err := readWorkspace(*work)
	if err != nil {
		return err
	}
	if err := ws.check(); err != nil {
		return err
	}
	if len(ws.serve) == 0 {
		return fmt.Errorf("%s: no versioned replace into the repository: no version to serve", *work)
	}
	for _, m := range ws.serve {
		if err := writeModule(*out, m); err != nil {
			return fmt.Errorf("%s %s: %w", m.path, m.version, err)
		}
		fmt.Fprintf(stdout, "%s %s\n", m.path, m.version)
	}
	return nil
}

// rel returns target relative to base, slash-separated, or target itself
// when it is not below base.
func rel(base, target string) string {
	r, err := filepath.Rel(base, target)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return target
	}
	return filepath.ToSlash(r)
}
