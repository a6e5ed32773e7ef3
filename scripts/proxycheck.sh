#!/usr/bin/env bash
# proxycheck.sh builds a user of the published modules from outside the
# repository, the way it will be built once they are released: `bash
# scripts/proxycheck.sh` (a step of scripts/test.sh).
#
# It serves the core, kinesisload/dynamo and kinesisload/kotel (every module
# go.work replaces) at their next versions from a local module proxy made
# of the repository's files (internal/modproxy, see scripts/modproxy-env.sh),
# then in a temporary directory makes a module requiring the three at those
# versions, with internal/modproxy/testdata/consumer/main.go (a Loader with a
# Sink, a DynamoDB coordinator and kotel's metrics and traces), and builds
# and runs it with GOWORK=off and -mod=mod: no workspace, no
# replace, the modules' own go.mod requirements. Its go.sum starts as the
# modules' go.sum files, so third-party modules are checked against the sums
# the repository recorded. It removes its temporary directory and the served
# modules from its module cache on exit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/modproxy-env.sh
source "$root/scripts/modproxy-env.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-proxycheck.XXXXXX")
cleanup() {
	rm -rf "$tmp"
	modproxy_stop
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
modproxy_start "$tmp"
echo "proxycheck: serving from a local proxy:"
printf '  %s\n' "${SERVED[@]}"

version_of() {
	local line
	for line in "${SERVED[@]}"; do
		[[ "${line% *}" == "$1" ]] && { echo "${line#* }"; return 0; }
	done
	echo "proxycheck: $1 is not served: go.work must replace it at its next version (docs/releasing.md)" >&2
	return 1
}

mods=(github.com/tidemark/tidemark github.com/tidemark/tidemark/kinesisload/dynamo github.com/tidemark/tidemark/kinesisload/kotel)
go_version=$(cd "$root" && GOWORK=off go list -m -f '{{.GoVersion}}')
mkdir "$tmp/consumer"
cp "$root/internal/modproxy/testdata/consumer/main.go" "$tmp/consumer/"
{
	printf 'module example.com/consumer\n\ngo %s\n\nrequire (\n' "$go_version"
	for m in "${mods[@]}"; do
		printf '\t%s %s\n' "$m" "$(version_of "$m")"
	done
	printf ')\n'
} >"$tmp/consumer/go.mod"
cat "$root/go.sum" "$root/kinesisload/dynamo/go.sum" "$root/kinesisload/kotel/go.sum" |
	grep -v '^github.com/tidemark/' | LC_ALL=C sort -u >"$tmp/consumer/go.sum"

cd "$tmp/consumer"
modproxy_go build -mod=mod -o "$tmp/consumer/consumer" .
out=$("$tmp/consumer/consumer")
if [[ "$out" != ok ]]; then
	echo "proxycheck: the consumer printed ${out@Q}, want ok" >&2
	exit 1
fi
echo "proxycheck: the consumer built outside the repository and ran; it used:"
modproxy_go list -m -f '  {{.Path}} {{.Version}}' "${mods[@]}"
echo "proxycheck: ok ($((SECONDS - t0))s)"
