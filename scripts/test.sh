#!/usr/bin/env bash
# test.sh is the project's one test command: `bash scripts/test.sh`.
#
# On a machine with Go, Node 20 and npm it installs the pinned Kinesis
# emulators (scripts/install-emulators.sh), then for every Go module in the
# repository (the root and any sub-module with its own go.mod, e.g. under
# examples/) runs go vet, staticcheck and go test -race -short; gofmt -l
# must print nothing. The modules build from their directories through go.work; the
# module proxy check (scripts/proxycheck.sh) builds a user of the published
# modules from outside the repository, as after a release. The Go tests
# start and stop the emulators themselves (internal/emulator); this script
# starts no daemon, and on exit kills any emulator still running from this
# checkout's cache as a safety net.
#
# The default run is the short one (go test -short), as CI runs it: the
# tests that model big streams, long kill loops and long outages run a
# smaller form of themselves (each says so in its comment). `bash
# scripts/test.sh --full` (or TIDEMARK_TEST=full) runs their full forms:
# tens of minutes. Longer still, behind their own flags: the reliability
# kill loops' long form (TIDEMARK_RELIABILITY=long), the simulation's big
# budgets (-sim.seeds, -sim.for; docs/testing.md) and the benchmarks.
# Either way a test never skips for want of an emulator or PostgreSQL:
# TIDEMARK_REQUIRE_SERVICES=1 makes a missing one a failure.
#
# Every step runs even after a failure; the summary at the end lists them
# all with their times, and the exit status is non-zero if any failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

staticcheck_version=v0.8.2
emulator_dir="${TIDEMARK_EMULATOR_DIR:-$root/.cache/emulators}"

# Every process this run starts inherits TIDEMARK_TEST_RUN, and so do the
# emulators (internal/emulator passes the environment on).
TIDEMARK_TEST_RUN="$$-$(date +%s%N)"
export TIDEMARK_TEST_RUN
export TIDEMARK_REQUIRE_SERVICES=1

# kill_leftovers kills what this run's tests started and should have
# stopped: node processes running in this checkout's emulator cache, and
# PostgreSQL servers (kinesisload/pgsink, examples/postgres), each carrying this run's
# TIDEMARK_TEST_RUN. Processes of another run, and anything else on the
# machine, are left alone.
kill_leftovers() {
	local dir p pid comm found=()
	dir=$(cd "$emulator_dir" 2>/dev/null && pwd -P) || dir=""
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		comm=$(cat "$p/comm" 2>/dev/null) || continue
		case "$comm" in
		node) [[ -n "$dir" && "$(readlink "$p/cwd" 2>/dev/null)" == "$dir" ]] || continue ;;
		postgres) ;;
		*) continue ;;
		esac
		tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "TIDEMARK_TEST_RUN=$TIDEMARK_TEST_RUN" || continue
		found+=("$pid")
	done
	if ((${#found[@]})); then
		echo "test.sh: killing leftover test processes: ${found[*]}" >&2
		kill -KILL "${found[@]}" 2>/dev/null || true
	fi
}
trap kill_leftovers EXIT
trap 'exit 130' INT TERM

results=()
failed=0
start_all=$SECONDS

# step NAME CMD...: runs CMD, records its status and duration.
step() {
	local name=$1 t0=$SECONDS status
	shift
	echo
	echo "==> $name"
	"$@"
	status=$?
	local took=$((SECONDS - t0))
	if ((status == 0)); then
		results+=("ok    ${took}s	$name")
	else
		results+=("FAIL  ${took}s	$name (exit $status)")
		failed=1
	fi
	return 0
}

# gofmt_clean fails when gofmt would change any Go file of the repository.
gofmt_clean() {
	local out
	out=$(find . \( -name .git -o -name .cache -o -name node_modules -o -name testdata \) -prune -o -name '*.go' -print0 |
		xargs -0 -r gofmt -l)
	if [[ -n "$out" ]]; then
		echo "gofmt -l: these files need gofmt:"
		echo "$out"
		return 1
	fi
}

# go_test TIMES ARGS...: go test ARGS through the testtimes program TIMES
# (or plain, when it did not build).
go_test() {
	local times=$1
	shift
	if [[ -z "$times" ]]; then
		go test "$@"
		return
	fi
	go test -json "$@" | "$times" -top 12 -over 30s
}

in_dir() {
	local dir=$1
	shift
	(cd "$dir" && "$@")
}

# main is the run; bash reads a function whole before it runs it, so
# editing this file during a run does not change that run.
main() {
	full=0
	case "${1:-${TIDEMARK_TEST:-}}" in
	"" | short) ;;
	--full | full) full=1 ;;
	*)
		echo "test.sh: unknown argument ${1@Q}; usage: bash scripts/test.sh [--full]" >&2
		exit 2
		;;
	esac
	echo "test.sh: $(go version); node $(node --version 2>/dev/null || echo missing); npm $(npm --version 2>/dev/null || echo missing)"

	step "install emulators" bash scripts/install-emulators.sh
	# PostgreSQL programs for kinesisload/pgsink and examples/postgres (their tests start their own servers).
	step "install postgresql" bash scripts/postgres.sh
	step "gofmt -l" gofmt_clean
	# A user of the core, dynamo and kotel built outside the repository from
	# a local module proxy of it: no workspace, no replace (docs/releasing.md).
	step "module proxy check" bash scripts/proxycheck.sh

	# Every module of the workspace in one go command each (go.work): the
	# root's packages and every sub-module's, so that the packages of all
	# modules share the two cores (a test waiting on an emulator leaves
	# the CPU to another package's).
	local patterns=(./...) mod
	while read -r mod; do
		patterns+=("./${mod#./}/...")
	done < <(find . \( -name .git -o -name .cache -o -name node_modules -o -name testdata \) -prune -o -name go.mod -print |
		sed 's|/go.mod$||' | grep -vx '\.' | LC_ALL=C sort)
	step "go vet (every module)" go vet "${patterns[@]}"
	step "staticcheck $staticcheck_version (every module)" go run "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version" "${patterns[@]}"
	# internal/testtimes prints what go test prints, then the slowest
	# tests and any over 30 s (built first: its build is not in the run).
	local times
	times=$(mktemp "${TMPDIR:-/tmp}/tidemark-testtimes.XXXXXX")
	go build -o "$times" ./internal/testtimes || times=""
	# Four test binaries at once on two cores (go test's default is one
	# per core): many packages spend their time waiting on an emulator,
	# PostgreSQL or real time (kill loops, kinesis-local), and their waits
	# overlap. Measured on the 2-core machine at a load near 5: 303 s
	# against 370-430 s with the default.
	if ((full)); then
		step "go test -race (every module, full)" go_test "$times" -race -count=1 -p 4 -timeout=20m "${patterns[@]}"
	else
		step "go test -race -short (every module)" go_test "$times" -race -short -count=1 -p 4 -timeout=10m "${patterns[@]}"
	fi
	[[ -n "$times" ]] && rm -f "$times"
	# The race run above takes 150 seeds of the simulation; the full
	# budget runs without -race, several times faster.
	step "simulation, 1,500 seeds and the ~400 that failed before (internal/sim)" go test -count=1 -timeout=10m ./internal/sim

	echo
	echo "==> summary ($((SECONDS - start_all))s)"
	printf '  %s\n' "${results[@]}"
	if ((failed)); then
		echo "test.sh: FAILED"
		exit 1
	fi
	echo "test.sh: all passed"
}

main "$@"
