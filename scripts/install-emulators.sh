#!/usr/bin/env bash
# install-emulators.sh installs the emulators the tests run against (the
# Kinesis emulators kinesis-local 0.6.2 and kinesalite 3.3.3, and the DynamoDB
# emulator dynalite 4.0.0 for kinesisload/dynamo, pinned in
# scripts/emulators/package-lock.json) into .cache/emulators, which git
# ignores, beside aws-kinesis-agg 4.2.8 (the awslabs KPL aggregation module
# for Node, which produces the aggregated records of the KPL interoperability
# test). It needs Node 20 and npm, and the npm registry as its only network.
#
# It is idempotent: when the installed tree matches the committed lock file it
# returns at once. The Go helper internal/emulator finds the tree there (or in
# $TIDEMARK_EMULATOR_DIR, which this script honours too) and starts the
# emulators itself; to run one by hand:
#
#   cd .cache/emulators
#   # kinesis-local, plain HTTP on 4568 (4567 is its TLS port)
#   KINESIS_MOCK_PLAIN_PORT=4568 KINESIS_MOCK_TLS_PORT=4567 AWS_REGION=us-east-1 \
#     KINESIS_MOCK_CERT_PATH=node_modules/kinesis-local/server.json \
#     node -r ../../internal/emulator/bind-localhost.js node_modules/kinesis-local/main.js
#   # or kinesalite on 4569, and dynalite on 8000
#   node -r ../../internal/emulator/bind-localhost.js node_modules/kinesalite/cli.js --port 4569 --shardLimit 1000
#   node node_modules/dynalite/cli.js --host 127.0.0.1 --port 8000
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$root/scripts/emulators"
dest="${TIDEMARK_EMULATOR_DIR:-$root/.cache/emulators}"
stamp="$dest/.installed"

for tool in node npm; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "install-emulators: $tool not found on PATH (Node 20 with npm is required)" >&2
		exit 1
	fi
done

# The stamp names the lock file's content and the Node version, so a changed
# pin or a different Node reinstalls.
want="$(sha256sum "$src/package-lock.json" | cut -d' ' -f1) node-$(node --version)"

installed() {
	[[ -f "$stamp" && "$(cat "$stamp")" == "$want" &&
		-f "$dest/node_modules/kinesis-local/main.js" &&
		-f "$dest/node_modules/kinesalite/cli.js" &&
		-f "$dest/node_modules/dynalite/cli.js" &&
		-f "$dest/node_modules/aws-kinesis-agg/index.js" ]]
}

if installed; then
	echo "install-emulators: up to date in $dest"
	exit 0
fi

echo "install-emulators: installing into $dest"
mkdir -p "$dest"
rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dest/"
# --ignore-scripts: the install scripts of leveldown (kinesalite) and
# classic-level (dynalite) only pick a prebuilt binary, and the bundled
# linux-x64 prebuilds load without them; protobufjs's only prints a notice. npm ci installs exactly what the lock file pins.
(cd "$dest" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)

# Check that what landed is what we pinned.
check_version() {
	local pkg=$1 want_version=$2 got
	got=$(node -p "require('$dest/node_modules/$pkg/package.json').version")
	if [[ "$got" != "$want_version" ]]; then
		echo "install-emulators: $pkg is $got, want $want_version" >&2
		exit 1
	fi
}
check_version kinesis-local 0.6.2
check_version kinesalite 3.3.3
check_version dynalite 4.0.0
check_version aws-kinesis-agg 4.2.8

echo "$want" >"$stamp"
echo "install-emulators: installed kinesis-local 0.6.2, kinesalite 3.3.3, dynalite 4.0.0 and aws-kinesis-agg 4.2.8 in $dest"
