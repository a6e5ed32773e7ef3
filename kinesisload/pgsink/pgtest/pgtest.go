// Package pgtest starts throwaway PostgreSQL servers for tests: a cluster
// made by initdb once per test binary, copied for each test into its
// temporary directory, started with pg_ctl on a free port of 127.0.0.1
// (fsync off), and stopped (immediate) when the test ends. The tests of
// [github.com/tidemark/tidemark/kinesisload/pgsink] and of the programs
// built on it use it; so can yours.
//
// It needs the PostgreSQL server programs: $TIDEMARK_PG_BIN, Debian's
// /usr/lib/postgresql/<version>/bin (the newest), or the PATH (bash
// scripts/postgres.sh installs Debian's). Without them a test is skipped
// under -short and fails otherwise, and fails under -short too when
// TIDEMARK_REQUIRE_SERVICES is set (as the project's test command sets
// it): CI must not skip silently. As root,
// the server runs as the postgres user.
//
// Call [Cleanup] at the end of TestMain: it removes the template cluster.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Server is a throwaway PostgreSQL server of one test: a cluster in
// t.TempDir(), listening on 127.0.0.1 and on a unix socket in the same
// directory, stopped (pg_ctl stop -m immediate) when the test ends.
type Server struct {
	bin  string // directory of initdb, pg_ctl
	root string // owned by the server's user: data/, the socket, server.log
	port int
	cred *syscall.Credential // nil unless the test runs as root
	// keepPort makes start use port again (a restart).
	keepPort bool
}

// findPGBin returns the directory that holds initdb and pg_ctl:
// $TIDEMARK_PG_BIN if set, else Debian's /usr/lib/postgresql/<version>/bin
// (the newest), else the PATH.
func findPGBin() (string, error) {
	if d := os.Getenv("TIDEMARK_PG_BIN"); d != "" {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
		return "", fmt.Errorf("no initdb and pg_ctl in TIDEMARK_PG_BIN=%s", d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", errors.New("no initdb and pg_ctl in /usr/lib/postgresql/*/bin or on the PATH")
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Start starts a server for t, with a database named "test", and returns
// the server and a pool on that database; both end when t ends. Without
// the PostgreSQL programs t is skipped under -short (unless
// TIDEMARK_REQUIRE_SERVICES is set, as scripts/test.sh does) and fails
// otherwise.
func Start(t testing.TB) (*Server, *pgxpool.Pool) {
	t.Helper()
	bin, err := findPGBin()
	if err != nil {
		if testing.Short() && os.Getenv("TIDEMARK_REQUIRE_SERVICES") == "" {
			t.Skipf("skipped under -short: %v (bash scripts/postgres.sh installs them)", err)
		}
		t.Fatalf("PostgreSQL is not installed: %v; run `bash scripts/postgres.sh` (it installs Debian's postgresql)", err)
	}
	s := &Server{bin: bin}
	tmp := t.TempDir()
	s.root = filepath.Join(tmp, "pg")
	if err := os.Mkdir(s.root, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// postgres refuses to run as root: run it as the postgres user
		// (Debian's package creates it), which must be able to reach
		// s.root through the test's temporary directories.
		s.cred = lookupCredential(t, "postgres")
		for _, d := range []string{filepath.Dir(tmp), tmp} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(s.root, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := clusterTemplate(s)
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the cluster initdb made once for the test binary: initdb
	// takes seconds, a copy a few milliseconds.
	if out, err := s.command("cp", "-R", tmpl, s.data()).CombinedOutput(); err != nil {
		t.Fatalf("copying the cluster template: %v\n%s", err, out)
	}
	s.start(t)
	t.Cleanup(func() {
		if out, err := s.command(s.pg("pg_ctl"), "stop", "-D", s.data(), "-m", "immediate", "-w").CombinedOutput(); err != nil {
			t.Errorf("pg_ctl stop: %v\n%s", err, out)
		}
		if t.Failed() {
			s.dumpLog(t)
		}
	})

	ctx := context.Background()
	admin, err := pgxpool.New(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+Database); err != nil {
		t.Fatalf("CREATE DATABASE: %v", err)
	}
	pool, err := pgxpool.New(ctx, s.DSN(Database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return s, pool
}

// Database is the name of the database Start creates.
const Database = "tidemark_test"

// PID returns the process ID of the server's postmaster: its backends are
// its children (for measuring the server's CPU).
func (s *Server) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.data(), "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// Stop stops the server at once (pg_ctl stop -m immediate): every
// connection breaks, as in an outage.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if out, err := s.command(s.pg("pg_ctl"), "stop", "-D", s.data(), "-m", "immediate", "-w").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// Restart starts the stopped server again on its port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.keepPort = true
	s.start(t)
}

func lookupCredential(t testing.TB, name string) *syscall.Credential {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("running as root, the server must run as user %q (created by Debian's postgresql package; bash scripts/postgres.sh installs it): %v", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		t.Fatalf("user %s: uid %q, gid %q", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
}

func (s *Server) data() string { return filepath.Join(s.root, "data") }
func (s *Server) log() string  { return filepath.Join(s.root, "server.log") }

// DSN returns the connection string of database db of the server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", s.port, db)
}

// template is the cluster that initdb made once for the test binary;
// every test's server starts on a copy. Cleanup removes it.
var template struct {
	once sync.Once
	root string // the directory holding the cluster "data"
	err  error
}

func clusterTemplate(s *Server) (string, error) {
	template.once.Do(func() {
		template.root, template.err = os.MkdirTemp("", "tidemark-pg-template-")
		if template.err != nil {
			return
		}
		if s.cred != nil {
			if err := os.Chown(template.root, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				template.err = err
				return
			}
		}
		data := filepath.Join(template.root, "data")
		out, err := s.command(s.pg("initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync").CombinedOutput()
		if err != nil {
			template.err = fmt.Errorf("initdb: %v\n%s", err, out)
		}
	})
	return filepath.Join(template.root, "data"), template.err
}

// Cleanup removes the template cluster of the test binary: call it at the
// end of TestMain.
func Cleanup() {
	if template.root != "" {
		os.RemoveAll(template.root)
	}
}

// pg returns the path of one of the server's programs.
func (s *Server) pg(prog string) string { return filepath.Join(s.bin, prog) }

// command runs a program as the server's user.
func (s *Server) command(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(prog, args...)
	cmd.Dir = s.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// start starts the server on a free port and waits until it accepts
// connections. A port taken between the probe and the start is tried again.
func (s *Server) start(t testing.TB) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if !s.keepPort {
			s.port = freePort(t)
		}
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off -c full_page_writes=off -c max_connections=50",
			s.port, s.root)
		cmd := s.command(s.pg("pg_ctl"), "start", "-w", "-t", "30", "-D", s.data(), "-l", s.log(), "-o", opts)
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		logText, _ := os.ReadFile(s.log())
		if attempt < 3 && bytes.Contains(logText, []byte("could not bind")) {
			continue
		}
		t.Fatalf("pg_ctl start: %v\n%s\nserver log:\n%s", err, out, logText)
	}
	// pg_ctl -w waited for "ready"; a ping proves the TCP listener.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		pool, err := pgxpool.New(ctx, s.DSN("postgres"))
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			s.dumpLog(t)
			t.Fatalf("the server on port %d never answered: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) dumpLog(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(s.log())
	if err != nil {
		t.Logf("server log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 200 {
		lines = lines[len(lines)-200:]
	}
	t.Logf("server log (%s, last %d lines):\n%s", s.log(), len(lines), strings.Join(lines, "\n"))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
