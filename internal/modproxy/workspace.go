package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A module is one module of the workspace.
type module struct {
	path      string // module path
	dir       string // its directory
	goVersion string // its go directive
	replaces  []string

	version string // the version served; "" when it is not served
}

// A workspace is what a go.work file says.
type workspace struct {
	file  string
	root  string    // the directory of file
	uses  []*module // the modules of its use directives, in order
	serve []*module // the modules served: those of versioned replaces into a used directory
}

// readWorkspace reads the workspace file at file and the go.mod of every
// module it uses.
func readWorkspace(file string) (*workspace, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	var wf struct {
		Use []struct {
			DiskPath string
		}
		Replace []struct {
			Old, New struct {
				Path, Version string
			}
		}
	}
	if err := goJSON(&wf, "work", "edit", "-json", abs); err != nil {
		return nil, err
	}
	ws := &workspace{file: abs, root: filepath.Dir(abs)}
	byDir := map[string]*module{}
	for _, u := range wf.Use {
		dir := filepath.Join(ws.root, filepath.FromSlash(u.DiskPath))
		m, err := readModule(dir)
		if err != nil {
			return nil, err
		}
		ws.uses = append(ws.uses, m)
		byDir[dir] = m
	}
	for _, r := range wf.Replace {
		if r.Old.Version == "" || r.New.Version != "" {
			continue // all versions, or by another module version: not a release stand-in
		}
		dir := filepath.FromSlash(r.New.Path)
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(ws.root, dir)
		}
		m := byDir[filepath.Clean(dir)]
		switch {
		case m == nil:
			return nil, fmt.Errorf("%s: replace %s %s => %s: not a directory the workspace uses", file, r.Old.Path, r.Old.Version, r.New.Path)
		case m.path != r.Old.Path:
			return nil, fmt.Errorf("%s: replace %s %s => %s: that directory holds module %s", file, r.Old.Path, r.Old.Version, r.New.Path, m.path)
		case m.version != "":
			return nil, fmt.Errorf("%s: %s is replaced at %s and at %s: one release version per module", file, m.path, m.version, r.Old.Version)
		}
		if err := checkVersion(m.path, r.Old.Version); err != nil {
			return nil, fmt.Errorf("%s: replace %s %s: %w", file, r.Old.Path, r.Old.Version, err)
		}
		m.version = r.Old.Version
		ws.serve = append(ws.serve, m)
	}
	return ws, nil
}

// readModule reads the go.mod file in dir.
func readModule(dir string) (*module, error) {
	var mf struct {
		Module  struct{ Path string }
		Go      string
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := goJSON(&mf, "mod", "edit", "-json", filepath.Join(dir, "go.mod")); err != nil {
		return nil, err
	}
	m := &module{path: mf.Module.Path, dir: filepath.Clean(dir), goVersion: mf.Go}
	for _, r := range mf.Replace {
		m.replaces = append(m.replaces, strings.TrimSpace(r.Old.Path+" "+r.Old.Version)+" => "+strings.TrimSpace(r.New.Path+" "+r.New.Version))
	}
	return m, nil
}

// check reports every go.mod of the repository that the workspace does not
// use, and every replace directive in the go.mod of a module it uses.
func (ws *workspace) check() error {
	files, err := gitFiles(ws.root)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, m := range ws.uses {
		used[m.dir] = true
	}
	var errs []error
	for _, f := range files {
		dir, base := path.Split(f)
		if base != "go.mod" || ignoredByPatterns(dir) {
			continue
		}
		if d := filepath.Join(ws.root, filepath.FromSlash(dir)); !used[d] {
			errs = append(errs, fmt.Errorf("%s is not in the workspace: add it with `go work use %s` (docs/releasing.md)", f, "./"+strings.TrimSuffix(dir, "/")))
		}
	}
	for _, m := range ws.uses {
		for _, r := range m.replaces {
			errs = append(errs, fmt.Errorf("%s/go.mod: replace %s: the workspace (go.work) stands in for unreleased versions; remove it (docs/releasing.md)", rel(ws.root, m.dir), r))
		}
	}
	return errors.Join(errs...)
}

// ignoredByPatterns reports whether a slash-separated directory (with a
// trailing slash, or "") is one the go command's ./... leaves out: an
// element named testdata or starting with '.' or '_'.
func ignoredByPatterns(dir string) bool {
	for e := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		if e == "testdata" || strings.HasPrefix(e, ".") || strings.HasPrefix(e, "_") {
			return true
		}
	}
	return false
}

// gitFiles lists the files of dir that git would publish in a commit of the
// work tree: tracked, or untracked and not ignored; slash-separated, relative
// to dir, sorted. A tracked file deleted from the work tree is listed too.
func gitFiles(dir string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w: %s", dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for f := range strings.SplitSeq(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// commitTime is the time of the commit checked out in dir, or now when
// there is none.
func commitTime(dir string) time.Time {
	cmd := exec.Command("git", "log", "-1", "--format=%cI")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err == nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out))); err == nil {
			return t.UTC()
		}
	}
	return time.Now().UTC().Truncate(time.Second)
}

// goJSON runs the go command with args and decodes its output into v.
func goJSON(v any, args ...string) error {
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
