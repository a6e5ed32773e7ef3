#!/usr/bin/env bash
# tidy.sh runs `go mod tidy` in every module of the workspace: `bash
# scripts/tidy.sh`. Run it instead of `go mod tidy` (see docs/releasing.md).
#
# `go mod tidy` ignores go.work: in a module that requires another module of
# the repository at its next version, which no proxy has yet, it fails.
# This script runs it in each module with GOWORK=off against a local proxy
# that serves those versions from the repository's files
# (scripts/modproxy-env.sh), then removes from each go.sum the lines of the
# versions it served: their checksums are of the work tree, not of the
# release, and the workspace does not need them. After a release the
# checklist adds the released ones.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/modproxy-env.sh
source "$root/scripts/modproxy-env.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-tidy.XXXXXX")
cleanup() {
	rm -rf "$tmp"
	modproxy_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM

modproxy_start "$tmp"
mapfile -t dirs < <(cd "$root" && go list -m -f '{{.Dir}}')
for dir in "${dirs[@]}"; do
	label=${dir#"$root"}
	echo "tidy.sh: go mod tidy in ./${label#/}"
	(cd "$dir" && modproxy_go mod tidy)
	[[ -f "$dir/go.sum" ]] || continue
	# Drop "<module> <version>" and "<module> <version>/go.mod" of each served version.
	awk -v served="$(printf '%s\n' "${SERVED[@]}")" '
		BEGIN { n = split(served, s, "\n"); for (i = 1; i <= n; i++) drop[s[i]] = 1 }
		{ v = $2; sub(/\/go\.mod$/, "", v) }
		!(($1 " " v) in drop)
	' "$dir/go.sum" >"$tmp/go.sum" && cat "$tmp/go.sum" >"$dir/go.sum"
done
