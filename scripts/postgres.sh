#!/usr/bin/env bash
# postgres.sh makes sure the PostgreSQL server programs that the tests of
# kinesisload/pgsink and examples/postgres need (initdb and pg_ctl of Debian's postgresql package,
# in /usr/lib/postgresql/<version>/bin) are installed: `bash scripts/postgres.sh`.
#
# If they are missing it installs Debian's postgresql package with apt-get
# (as root), telling postgresql-common not to create and start the default
# "main" cluster. It starts no server: each test starts its own throwaway
# one on a free 127.0.0.1 port and stops it (kinesisload/pgsink/pgtest).
set -euo pipefail

have_postgres() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && return 0
	done
	return 1
}

if have_postgres; then
	echo "postgres.sh: PostgreSQL server programs present: $(ls -d /usr/lib/postgresql/*/bin | tr '\n' ' ')"
	exit 0
fi

if ((EUID != 0)); then
	echo "postgres.sh: PostgreSQL is not installed (no initdb and pg_ctl in /usr/lib/postgresql/*/bin);" >&2
	echo "postgres.sh: run this script as root, or install Debian's postgresql package: apt-get install postgresql" >&2
	exit 1
fi

# No default cluster: nothing listens on port 5432 after the install. The
# package keeps an existing createcluster.conf (--force-confold).
conf=/etc/postgresql-common/createcluster.conf
if [[ ! -e "$conf" ]]; then
	mkdir -p "$(dirname "$conf")"
	echo "create_main_cluster = false" >"$conf"
fi

echo "postgres.sh: installing Debian's postgresql package"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql

if ! have_postgres; then
	echo "postgres.sh: the postgresql package is installed but /usr/lib/postgresql/*/bin has no initdb and pg_ctl" >&2
	exit 1
fi
echo "postgres.sh: installed: $(ls -d /usr/lib/postgresql/*/bin | tr '\n' ' ')"
