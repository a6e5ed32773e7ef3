# modproxy-env.sh is sourced by scripts/proxycheck.sh and scripts/tidy.sh.
# It serves the repository's published modules at the versions they are
# released at next (the replace lines of go.work) from a local module proxy
# written by internal/modproxy, and runs the go command outside the
# workspace against it: as a user will, once the tags exist. See
# docs/releasing.md.
#
#   modproxy_start TMPDIR  writes the proxy into TMPDIR/proxy, fills the
#                          array SERVED ("<module> <version>" each) and takes
#                          the lock of the module cache below
#   modproxy_go ARGS...    runs `go ARGS...` with GOWORK=off, the proxy first
#                          in GOPROXY, and that module cache
#   modproxy_stop          removes the served modules from the module cache
#
# The module cache is $root/.cache/modproxy/modcache (TIDEMARK_MODPROXY_CACHE
# overrides it), not the user's: the proxy's versions are not the released
# ones, and a module cache keeps a version once it has it. It persists between
# runs so that the build cache's packages of third-party modules (at the same
# paths each time) are reused; the served modules are removed from it before
# and after each use. Third-party modules come from the user's module cache
# (read as a proxy: offline) and then from the user's GOPROXY.

modproxy_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
modproxy_cache="${TIDEMARK_MODPROXY_CACHE:-$modproxy_root/.cache/modproxy}"
SERVED=()

modproxy_start() {
	local tmp=$1 out nosumdb
	mkdir -p "$modproxy_cache/modcache"
	if command -v flock >/dev/null; then
		exec {modproxy_lock}>"$modproxy_cache/lock"
		flock "$modproxy_lock"
	fi
	modproxy_clean
	out=$(cd "$modproxy_root" && go run ./internal/modproxy -out "$tmp/proxy") || return 1
	mapfile -t SERVED <<<"$out"
	nosumdb=$(go env GONOSUMDB)
	modproxy_env=(
		GOWORK=off
		GOFLAGS=-modcacherw
		# The go command indexes a module version's packages in the build
		# cache once, as versions never change; the served ones do between
		# runs (a file added), so the index is off.
		GODEBUG=goindex=0
		GOMODCACHE="$modproxy_cache/modcache"
		GOPROXY="file://$tmp/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)"
		GONOSUMDB="github.com/tidemark${nosumdb:+,$nosumdb}"
	)
}

modproxy_go() {
	env "${modproxy_env[@]}" go "$@"
}

# modproxy_clean removes the repository's modules from the module cache,
# whatever their version.
modproxy_clean() {
	local m="$modproxy_cache/modcache"
	chmod -R u+w "$m/github.com/tidemark" "$m/cache/download/github.com/tidemark" 2>/dev/null || true
	rm -rf "$m/github.com/tidemark" "$m/cache/download/github.com/tidemark"
}

modproxy_stop() {
	modproxy_clean
}
