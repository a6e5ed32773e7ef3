package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// writeModule writes m at m.version into the proxy directory out, from the
// files git lists in m.dir.
func writeModule(out string, m *module) error {
	if !atLeastGo124(m.goVersion) {
		return fmt.Errorf("go %s: the zip rules here are those of go 1.24 and later", m.goVersion)
	}
	names, err := gitFiles(m.dir)
	if err != nil {
		return err
	}
	files, err := selectFiles(m.dir, names)
	if err != nil {
		return err
	}
	return writeVersion(out, m.path, m.version, commitTime(m.dir), files)
}

// writeVersion writes version of module modPath, made of files (which must
// hold go.mod), into the proxy directory out: <version>.zip, .mod and .info
// under out/<escaped modPath>/@v/, and the version added to its list.
// Each file is written to a temporary name and renamed into place.
func writeVersion(out, modPath, version string, t time.Time, files []file) error {
	escPath, err := escape(modPath)
	if err != nil {
		return err
	}
	escVersion, err := escape(version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	i := slices.IndexFunc(files, func(f file) bool { return f.name == "go.mod" })
	if i < 0 {
		return fmt.Errorf("%s: no go.mod among its files", modPath)
	}
	goMod, err := os.ReadFile(files[i].disk)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{version, t.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}

	zipFile := filepath.Join(dir, escVersion+".zip")
	if err := writeAtomic(zipFile, func(f *os.File) error { return writeZip(f, modPath, version, files) }); err != nil {
		return err
	}
	if fi, err := os.Stat(zipFile); err != nil {
		return err
	} else if fi.Size() > maxZipFile {
		return fmt.Errorf("%s: %d bytes, more than the %d a module zip allows", zipFile, fi.Size(), maxZipFile)
	}
	if err := writeFile(filepath.Join(dir, escVersion+".mod"), goMod); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, escVersion+".info"), append(info, '\n')); err != nil {
		return err
	}
	return addToList(filepath.Join(dir, "list"), version)
}

// addToList adds version to the list file (one version a line), keeping
// the versions already there.
func addToList(list, version string) error {
	data, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return writeFile(list, []byte(strings.Join(versions, "\n")+"\n"))
}

func writeFile(name string, data []byte) error {
	return writeAtomic(name, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// writeAtomic writes name through write into a temporary file of the same
// directory, renamed to name once written and closed.
func writeAtomic(name string, write func(*os.File) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

// escape is the case encoding of module paths and versions in a proxy
// (golang.org/x/mod/module.EscapePath): each upper-case letter becomes '!'
// and its lower case. A '!' in s is refused.
func escape(s string) (string, error) {
	if strings.ContainsRune(s, '!') {
		return "", fmt.Errorf("%q: '!' cannot be escaped", s)
	}
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String(), nil
}

// atLeastGo124 reports whether a go directive's version is 1.24 or later.
func atLeastGo124(v string) bool {
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	return err1 == nil && err2 == nil && (ma > 1 || ma == 1 && mi >= 24)
}
