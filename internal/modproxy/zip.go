package main

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The limits of the go command on a module zip (the Go Modules Reference,
// "Module zip files"; golang.org/x/mod/zip).
const (
	maxZipFile = 500 << 20 // the zip, and the sum of its files' sizes
	maxGoMod   = 16 << 20
	maxLICENSE = 16 << 20
)

// A file is one file of a module zip.
type file struct {
	name string // slash-separated, relative to the module's root
	disk string // its path on disk
	size int64
}

// selectFiles returns the files among names (slash-separated, relative to
// root) that the go command puts in the zip of the module in root, in the
// order of names, with the rules of module zips for a go directive of 1.24
// or later. It leaves out, as the go command does: the directories of
// nested modules (those holding a go.mod), files in vendored packages,
// vendor/modules.txt, VCS directories, .hg_archival.txt, symbolic links and
// other irregular files, and names that no longer exist on disk. It refuses,
// naming every one: names that are not clean relative paths or that a module
// zip may not hold (module.CheckFilePath), two names equal under case
// folding, a go.mod in another case, a go.mod or LICENSE over 16 MiB, and
// files of more than 500 MiB in all.
func selectFiles(root string, names []string) ([]file, error) {
	nested := map[string]bool{} // "dir/" of nested modules
	for _, n := range names {
		if dir, base := path.Split(n); dir != "" && strings.EqualFold(base, "go.mod") {
			if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(n))); err == nil && fi.Mode().IsRegular() {
				nested[dir] = true
			}
		}
	}
	inNested := func(n string) bool {
		for dir, _ := path.Split(n); dir != ""; dir, _ = path.Split(strings.TrimSuffix(dir, "/")) {
			if nested[dir] {
				return true
			}
		}
		return false
	}

	var (
		files []file
		errs  []error
		total int64
	)
	folded := map[string]string{} // case-folded name of every file and directory -> its name
	isDir := map[string]bool{}
	for _, n := range names {
		if n != path.Clean(n) || path.IsAbs(n) || n == "." || strings.HasPrefix(n, "../") {
			errs = append(errs, fmt.Errorf("%q: not a clean relative path", n))
			continue
		}
		if isVendored(n) || inNested(n) || inVCSDir(n) || n == ".hg_archival.txt" {
			continue
		}
		if err := checkFilePath(n); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", n, err))
			continue
		}
		if strings.EqualFold(n, "go.mod") && n != "go.mod" {
			errs = append(errs, fmt.Errorf("%q: go.mod files must have lowercase names", n))
			continue
		}
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(n)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted from the work tree: not in the next commit
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !fi.Mode().IsRegular() {
			continue // symbolic links and other irregular files
		}
		if err := checkCollision(folded, isDir, n); err != nil {
			errs = append(errs, err)
			continue
		}
		if limit := map[string]int64{"go.mod": maxGoMod, "LICENSE": maxLICENSE}[n]; limit > 0 && fi.Size() > limit {
			errs = append(errs, fmt.Errorf("%q: %d bytes, more than the %d a module zip allows", n, fi.Size(), limit))
			continue
		}
		total += fi.Size()
		files = append(files, file{name: n, disk: filepath.Join(root, filepath.FromSlash(n)), size: fi.Size()})
	}
	if total > maxZipFile {
		errs = append(errs, fmt.Errorf("the files hold %d bytes, more than the %d a module zip allows", total, maxZipFile))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return files, nil
}

// isVendored reports whether a file is in a vendored package, or is
// vendor/modules.txt (x/mod/zip's isVendoredPackage for go 1.24 and later).
func isVendored(name string) bool {
	if name == "vendor/modules.txt" {
		return true
	}
	var rest string
	if after, ok := strings.CutPrefix(name, "vendor/"); ok {
		rest = after
	} else if i := strings.Index(name, "/vendor/"); i >= 0 {
		rest = name[i+len("/vendor/"):]
	} else {
		return false
	}
	return strings.Contains(rest, "/")
}

// inVCSDir reports whether a file is in a directory of a version control
// system, which the go command leaves out of a module.
func inVCSDir(name string) bool {
	dir, _ := path.Split(name)
	for e := range strings.SplitSeq(strings.TrimSuffix(dir, "/"), "/") {
		switch e {
		case ".bzr", ".git", ".hg", ".svn":
			return true
		}
	}
	return false
}

// checkCollision records name and its directories, and refuses a name
// equal under case folding to another file or directory of the zip (which
// could not be extracted on a case-insensitive file system).
func checkCollision(folded map[string]string, isDir map[string]bool, name string) error {
	for p, dir := name, false; p != "." && p != ""; p, dir = path.Dir(p), true {
		k := foldKey(p)
		if other, ok := folded[k]; ok {
			if other != p || isDir[k] != dir || !dir {
				return fmt.Errorf("%q: collides with %q under case folding", name, other)
			}
			continue
		}
		folded[k], isDir[k] = p, dir
	}
	return nil
}

// foldKey maps s to a string that is equal for two strings exactly when
// strings.EqualFold holds: each rune is replaced by the smallest rune of its
// case-folding orbit.
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// checkFilePath is golang.org/x/mod/module.CheckFilePath: the names a module
// zip may hold.
func checkFilePath(name string) error {
	if !utf8.ValidString(name) {
		return errors.New("invalid UTF-8")
	}
	for elem := range strings.SplitSeq(name, "/") {
		if elem == "" {
			return errors.New("empty path element")
		}
		if strings.Count(elem, ".") == len(elem) {
			return fmt.Errorf("invalid path element %q", elem)
		}
		if elem[len(elem)-1] == '.' {
			return errors.New("trailing dot in path element")
		}
		for _, r := range elem {
			if !fileNameOK(r) {
				return fmt.Errorf("invalid char %q", r)
			}
		}
		short, _, _ := strings.Cut(elem, ".")
		for _, bad := range badWindowsNames {
			if strings.EqualFold(bad, short) {
				return fmt.Errorf("%q disallowed as path element component on Windows", short)
			}
		}
	}
	return nil
}

var badWindowsNames = []string{
	"CON", "PRN", "AUX", "NUL",
	"COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
	"LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
}

// fileNameOK reports whether r may appear in a file name of a module:
// letters, ASCII digits, the space and some ASCII punctuation.
func fileNameOK(r rune) bool {
	if r < utf8.RuneSelf {
		const allowed = "!#$%&()+,-.=@[]^_{}~ "
		return '0' <= r && r <= '9' || 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || strings.ContainsRune(allowed, r)
	}
	return unicode.IsLetter(r)
}

// writeZip writes the module zip of files for modPath at version to w: each
// file's name prefixed with "<modPath>@<version>/", no directory entries.
func writeZip(w io.Writer, modPath, version string, files []file) error {
	zw := zip.NewWriter(w)
	prefix := modPath + "@" + version + "/"
	for _, f := range files {
		if err := addFile(zw, prefix+f.name, f); err != nil {
			return err
		}
	}
	return zw.Close()
}

func addFile(zw *zip.Writer, name string, f file) error {
	src, err := os.Open(f.disk)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
	if err != nil {
		return err
	}
	n, err := io.Copy(dst, src)
	if err != nil {
		return fmt.Errorf("%s: %w", f.disk, err)
	}
	if n != f.size {
		return fmt.Errorf("%s: changed while it was read (%d bytes, then %d)", f.disk, f.size, n)
	}
	return nil
}

// checkVersion refuses a version that is not a canonical semantic version
// (vMAJOR.MINOR.PATCH, with an optional pre-release) or whose major version
// does not match modPath's major version suffix.
func checkVersion(modPath, version string) error {
	core, pre, hasPre := strings.Cut(strings.TrimPrefix(version, "v"), "-")
	parts := strings.Split(core, ".")
	ok := strings.HasPrefix(version, "v") && len(parts) == 3 && (!hasPre || pre != "")
	for _, p := range parts {
		ok = ok && p != "" && strings.Trim(p, "0123456789") == "" && (p == "0" || p[0] != '0')
	}
	if !ok || strings.ContainsAny(version, "+") || strings.Trim(pre, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-.") != "" {
		return fmt.Errorf("version %q is not of the form vMAJOR.MINOR.PATCH[-PRERELEASE]", version)
	}
	major, _ := strconv.Atoi(parts[0])
	suffix := ""
	if i := strings.LastIndex(modPath, "/v"); i >= 0 {
		if n, err := strconv.Atoi(modPath[i+2:]); err == nil && n >= 2 && modPath[i+2] != '0' {
			suffix = modPath[i+2:]
		}
	}
	switch {
	case major >= 2 && suffix != parts[0]:
		return fmt.Errorf("version %s needs the module path to end in /v%d, not %s", version, major, modPath)
	case major < 2 && suffix != "":
		return fmt.Errorf("module %s is major version %s: version %s does not fit", modPath, suffix, version)
	}
	return nil
}
