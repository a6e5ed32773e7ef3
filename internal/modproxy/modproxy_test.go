package main

import (
	"archive/zip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// writeTree writes files (slash path -> content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func names(files []file) []string {
	var ns []string
	for _, f := range files {
		ns = append(ns, f.name)
	}
	return ns
}

func TestSelectFilesLeavesOutWhatTheGoCommandDoes(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"go.mod":                      "module example.com/m\n\ngo 1.26.0\n",
		"LICENSE":                     "license",
		".gitignore":                  "*.test\n",
		"a.go":                        "package m\n",
		"sub/b.go":                    "package sub\n",
		"testdata/x.txt":              "x",
		"pkg/vendor/vendor.go":        "package vendor\n", // a package named vendor, not a vendored one
		"nested/go.mod":               "module example.com/m/nested\n",
		"nested/c.go":                 "package nested\n",
		"nested/deep/d.go":            "package deep\n",
		"vendor/modules.txt":          "# example.com/v\n",
		"vendor/example.com/v/v.go":   "package v\n",
		"sub/vendor/example.com/w.go": "package w\n",
		".git/config":                 "[core]\n",
		"sub/.hg/store":               "x",
		".hg_archival.txt":            "repo: x\n",
		"spaces and (parens) ~ok.txt": "fine",
	})
	if err := os.Symlink("a.go", filepath.Join(dir, "link.go")); err != nil {
		t.Fatal(err)
	}
	listed := []string{
		".git/config", ".gitignore", ".hg_archival.txt", "LICENSE", "a.go", "gone.go", "go.mod",
		"link.go", "nested/c.go", "nested/deep/d.go", "nested/go.mod", "pkg/vendor/vendor.go",
		"spaces and (parens) ~ok.txt", "sub/.hg/store", "sub/b.go", "sub/vendor/example.com/w.go",
		"testdata/x.txt", "vendor/example.com/v/v.go", "vendor/modules.txt",
	}
	files, err := selectFiles(dir, listed)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		".gitignore", "LICENSE", "a.go", "go.mod", "pkg/vendor/vendor.go",
		"spaces and (parens) ~ok.txt", "sub/b.go", "testdata/x.txt",
	}
	if diff := cmp.Diff(want, names(files)); diff != "" {
		t.Errorf("selected files (-want +got):\n%s", diff)
	}
	for _, f := range files {
		if fi, err := os.Stat(f.disk); err != nil || fi.Size() != f.size {
			t.Errorf("%s: disk %s size %d: stat %v", f.name, f.disk, f.size, err)
		}
	}
}

func TestSelectFilesRefusesNamesAModuleZipCannotHold(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // created on disk, then listed
		want  string   // in the error
	}{
		{"shell character", []string{"a*b.go"}, `"a*b.go": invalid char '*'`},
		{"colon", []string{"a:b.go"}, `invalid char ':'`},
		{"windows name", []string{"aux.go"}, `"aux" disallowed as path element component on Windows`},
		{"windows name in a directory", []string{"com1/x.go"}, `"com1" disallowed`},
		{"trailing dot", []string{"x./y.go"}, "trailing dot in path element"},
		{"files equal under case folding", []string{"A.go", "a.go"}, `"a.go": collides with "A.go" under case folding`},
		{"directories equal under case folding", []string{"Dir/a.go", "dir/b.go"}, `"dir/b.go": collides with "Dir" under case folding`},
		{"a file and a directory", []string{"x/a.go", "X"}, `"X": collides with "x"`},
		{"go.mod in another case", []string{"GO.MOD"}, "go.mod files must have lowercase names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tree := map[string]string{}
			for _, f := range tc.files {
				tree[f] = "x"
			}
			writeTree(t, dir, tree)
			_, err := selectFiles(dir, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("selectFiles(%q) = %v, want an error containing %s", tc.files, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"../x.go", "/abs.go", "a//b.go", "a/./b.go", "."} {
		if _, err := selectFiles(t.TempDir(), []string{bad}); err == nil || !strings.Contains(err.Error(), "not a clean relative path") {
			t.Errorf("selectFiles(%q) = %v, want a refusal of the path", bad, err)
		}
	}
}

func TestSelectFilesRefusesAnOversizedGoMod(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxGoMod + 1); err != nil { // sparse: no 16 MiB written
		t.Fatal(err)
	}
	f.Close()
	_, err = selectFiles(dir, []string{"go.mod"})
	if err == nil || !strings.Contains(err.Error(), `"go.mod": 16777217 bytes, more than the 16777216`) {
		t.Fatalf("selectFiles = %v, want the size refused", err)
	}
}

func TestWriteVersionWritesTheProxyLayout(t *testing.T) {
	src, out := t.TempDir(), t.TempDir()
	tree := map[string]string{
		"go.mod":   "module example.com/Upper/m\n\ngo 1.26.0\n",
		"m.go":     "package m\n",
		"sub/s.go": "package sub\n",
	}
	writeTree(t, src, tree)
	files, err := selectFiles(src, []string{"go.mod", "m.go", "sub/s.go"})
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := writeVersion(out, "example.com/Upper/m", "v0.1.0", when, files); err != nil {
		t.Fatal(err)
	}
	if err := writeVersion(out, "example.com/Upper/m", "v0.2.0-rc.1", when, files); err != nil {
		t.Fatal(err)
	}
	v := filepath.Join(out, "example.com", "!upper", "m", "@v")

	list, err := os.ReadFile(filepath.Join(v, "list"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("v0.1.0\nv0.2.0-rc.1\n", string(list)); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	mod, err := os.ReadFile(filepath.Join(v, "v0.1.0.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tree["go.mod"], string(mod)); diff != "" {
		t.Errorf(".mod (-want +got):\n%s", diff)
	}
	var info struct{ Version, Time string }
	data, err := os.ReadFile(filepath.Join(v, "v0.1.0.info"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Version != "v0.1.0" || info.Time != "2026-03-04T05:06:07Z" {
		t.Errorf(".info = %s, want version v0.1.0 at 2026-03-04T05:06:07Z", data)
	}

	zr, err := zip.OpenReader(filepath.Join(v, "v0.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	got := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[f.Name] = string(b)
	}
	want := map[string]string{}
	for name, content := range tree {
		want["example.com/Upper/m@v0.1.0/"+name] = content
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zip entries (-want +got):\n%s", diff)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(v, ".*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %q", leftovers)
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/tidemark/tidemark": "github.com/tidemark/tidemark",
		"github.com/Azure/SDK":         "github.com/!azure/!s!d!k",
		"v1.0.0-RC":                    "v1.0.0-!r!c",
	} {
		if got, err := escape(in); err != nil || got != want {
			t.Errorf("escape(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := escape("a!b"); err == nil {
		t.Error("escape(a!b) = nil error, want a refusal")
	}
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		path, version string
		ok            bool
	}{
		{"github.com/tidemark/tidemark", "v0.1.0", true},
		{"github.com/tidemark/tidemark", "v1.2.3", true},
		{"github.com/tidemark/tidemark", "v0.1.0-rc.1", true},
		{"github.com/tidemark/tidemark/v2", "v2.0.0", true},
		{"github.com/tidemark/tidemark", "v2.0.0", false},    // needs /v2
		{"github.com/tidemark/tidemark/v2", "v1.0.0", false}, // /v2 takes v2 only
		{"github.com/tidemark/tidemark/v2", "v3.0.0", false},
		{"github.com/tidemark/tidemark", "0.1.0", false},
		{"github.com/tidemark/tidemark", "v0.1", false},
		{"github.com/tidemark/tidemark", "v0.01.0", false},
		{"github.com/tidemark/tidemark", "v0.1.0-", false},
		{"github.com/tidemark/tidemark", "v0.1.0+meta", false},
		{"github.com/tidemark/tidemark", "v0.1.0-a_b", false},
	} {
		err := checkVersion(tc.path, tc.version)
		if (err == nil) != tc.ok {
			t.Errorf("checkVersion(%s, %s) = %v, want ok=%v", tc.path, tc.version, err, tc.ok)
		}
	}
}

func TestAtLeastGo124(t *testing.T) {
	for v, want := range map[string]bool{"1.24": true, "1.26.0": true, "2.0": true, "1.23.4": false, "1.9": false, "": false} {
		if got := atLeastGo124(v); got != want {
			t.Errorf("atLeastGo124(%q) = %v, want %v", v, got, want)
		}
	}
}

// gitRepo makes dir a git repository holding files, all added to the index.
func gitRepo(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git:", err)
	}
	writeTree(t, dir, files)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

func TestGitFilesListsWhatACommitWouldHold(t *testing.T) {
	dir := t.TempDir()
	gitRepo(t, dir, map[string]string{
		".gitignore":  "*.bin\n/build/\n",
		"tracked.go":  "package m\n",
		"sub/s.go":    "package sub\n",
		"deleted.go":  "package m\n",
		"sub/go.mod":  "module example.com/m/sub\n",
		"sub/sub2.go": "package sub\n",
	})
	writeTree(t, dir, map[string]string{"new.go": "package m\n", "x.bin": "binary", "build/out": "out"})
	if err := os.Remove(filepath.Join(dir, "deleted.go")); err != nil {
		t.Fatal(err)
	}
	got, err := gitFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".gitignore", "deleted.go", "new.go", "sub/go.mod", "sub/s.go", "sub/sub2.go", "tracked.go"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("gitFiles (-want +got):\n%s", diff)
	}
	got, err = gitFiles(filepath.Join(dir, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"go.mod", "s.go", "sub2.go"}, got); diff != "" {
		t.Errorf("gitFiles of sub, relative to it (-want +got):\n%s", diff)
	}
}

func TestReadWorkspaceServesTheVersionedReplaces(t *testing.T) {
	dir := t.TempDir()
	gitRepo(t, dir, map[string]string{
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./ex\n)\n\n" +
			"replace (\n\texample.com/m v0.3.0 => ./\n\texample.com/m/a v0.3.0 => ./a\n\texample.com/other => ../other\n)\n",
		"go.mod":               "module example.com/m\n\ngo 1.26.0\n",
		"a/go.mod":             "module example.com/m/a\n\ngo 1.26.0\n\nrequire example.com/m v0.3.0\n",
		"ex/go.mod":            "module example.com/m/ex\n\ngo 1.26.0\n\nrequire example.com/m/a v0.3.0\n",
		"a/testdata/m/go.mod":  "module example.com/fixture\n",
		"_old/go.mod":          "module example.com/old\n",
		"a/internal/x/x.go":    "package x\n",
		"ex/.hidden/go.mod":    "module example.com/hidden\n",
		"ex/main.go":           "package main\n",
		"a/testdata/m/main.go": "package main\n",
	})
	ws, err := readWorkspace(filepath.Join(dir, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	var served []string
	for _, m := range ws.serve {
		served = append(served, m.path+" "+m.version+" "+rel(dir, m.dir))
	}
	if diff := cmp.Diff([]string{"example.com/m v0.3.0 .", "example.com/m/a v0.3.0 a"}, served); diff != "" {
		t.Errorf("served (-want +got):\n%s", diff)
	}
	if err := ws.check(); err != nil {
		t.Errorf("check of a consistent workspace: %v", err)
	}

	// A module the workspace does not use, and a replace in a go.mod.
	writeTree(t, dir, map[string]string{
		"cmd/tool/go.mod": "module example.com/m/cmd/tool\n\ngo 1.26.0\n",
		"ex/go.mod":       "module example.com/m/ex\n\ngo 1.26.0\n\nrequire example.com/m/a v0.3.0\n\nreplace example.com/m/a => ../a\n",
	})
	ws, err = readWorkspace(filepath.Join(dir, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	err = ws.check()
	for _, want := range []string{
		"cmd/tool/go.mod is not in the workspace: add it with `go work use ./cmd/tool`",
		"ex/go.mod: replace example.com/m/a => ../a",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check = %v, want an error containing %q", err, want)
		}
	}
}

func TestReadWorkspaceRefusesAReplaceItCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name, replace, want string
	}{
		{"a directory not used", "example.com/m v0.1.0 => ./elsewhere", "not a directory the workspace uses"},
		{"another module's directory", "example.com/x v0.1.0 => ./", "that directory holds module example.com/m"},
		{"two versions", "example.com/m v0.1.0 => ./\nreplace example.com/m v0.2.0 => ./", "replaced at v0.1.0 and at v0.2.0"},
		{"not a release version", "example.com/m v0.0.0-20260101000000-abcdefabcdef => ./", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{
				"go.work":           "go 1.26.0\n\nuse .\n\nreplace " + tc.replace + "\n",
				"go.mod":            "module example.com/m\n\ngo 1.26.0\n",
				"elsewhere/go.mod":  "module example.com/m\n\ngo 1.26.0\n",
				"elsewhere/doc.txt": "x",
			})
			_, err := readWorkspace(filepath.Join(dir, "go.work"))
			if tc.want == "" {
				// A pseudo-version is a valid semantic version: served as it is.
				if err != nil {
					t.Fatalf("readWorkspace = %v, want it served", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readWorkspace = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestTheGoCommandBuildsFromTheProxy is the format's real test: the go
// command downloads a module from the proxy written by run, checks its zip
// (it refuses a zip holding a nested module's go.mod, for one) and builds
// a program with it, outside any workspace.
func TestTheGoCommandBuildsFromTheProxy(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	repo, out, consumer := t.TempDir(), t.TempDir(), t.TempDir()
	gitRepo(t, repo, map[string]string{
		"go.work":         "go 1.26.0\n\nuse (\n\t.\n\t./nested\n)\n\nreplace example.com/lib v0.1.0 => ./\n",
		"go.mod":          "module example.com/lib\n\ngo 1.26.0\n",
		"lib.go":          "package lib\n\n// Hello greets.\nfunc Hello() string { return \"hello from the proxy\" }\n",
		"nested/go.mod":   "module example.com/lib/nested\n\ngo 1.26.0\n",
		"nested/nest.go":  "package nested\n\nthis does not compile\n",
		"internal/i/i.go": "package i\n",
	})
	var stdout strings.Builder
	if err := run([]string{"-out", out, "-work", filepath.Join(repo, "go.work")}, &stdout); err != nil {
		t.Fatal(err)
	}
	if got := stdout.String(); got != "example.com/lib v0.1.0\n" {
		t.Errorf("run printed %q, want the module served", got)
	}
	writeTree(t, consumer, map[string]string{
		"go.mod":  "module example.com/consumer\n\ngo 1.26.0\n\nrequire example.com/lib v0.1.0\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/lib\"\n)\n\nfunc main() { fmt.Println(lib.Hello()) }\n",
	})
	cmd := exec.Command(goBin, "run", ".")
	cmd.Dir = consumer
	cmd.Env = append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS=-mod=mod -modcacherw", // -modcacherw: t.TempDir can remove the module cache
		"GOMODCACHE="+t.TempDir(),
		"GOPROXY=file://"+filepath.ToSlash(out),
		"GOSUMDB=off",
		"GOTOOLCHAIN=local",
	)
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), "hello from the proxy\n") {
		t.Errorf("go run printed %q, want the module's greeting", got)
	}
}
