#!/usr/bin/env bash
# with-postgres.sh - run a command with a reachable PostgreSQL server.
#
# Usage: scripts/with-postgres.sh <command> [args...]
#   e.g. scripts/with-postgres.sh go test -race ./...
#
# Exports TEST_DATABASE_URL for <command> and exits with its exit code.
# The server is chosen in this order:
#   1. TEST_DATABASE_URL, if already set (checked with pg_isready when available);
#   2. a server already answering at 127.0.0.1:5432;
#   3. a throwaway server started from the local PostgreSQL binaries in a
#      temp dir, stopped and deleted when this script exits (also on failure,
#      Ctrl-C and SIGTERM).
# DATABASE_URL is never read: a developer's own database is not used for
# tests or the Postgres demo unless named in TEST_DATABASE_URL. internal/pgtest
# and `leasehold demo -db postgres` follow the same order (TEST_DATABASE_URL
# first); the default demo runs on SQLite and needs no server.
#
# Environment:
#   TEST_DATABASE_URL               use this server; fail if it is unreachable.
#   WITH_POSTGRES_FORCE_THROWAWAY=1 skip steps 1 and 2 and always start a
#                                   throwaway server (used to test step 3).
#   TMPDIR                          where the throwaway server's temp dir goes.
set -euo pipefail

prog=with-postgres

die() {
	echo "$prog: $*" >&2
	exit 1
}

if [[ $# -eq 0 ]]; then
	cat >&2 <<EOF
usage: $0 <command> [args...]

Runs <command> with TEST_DATABASE_URL pointing at a reachable PostgreSQL:
TEST_DATABASE_URL if set, else 127.0.0.1:5432, else a throwaway local server.
Set WITH_POSTGRES_FORCE_THROWAWAY=1 to always use a throwaway server.
EOF
	exit 2
fi

# find_pg_bin NAME: print the path of a PostgreSQL client/server binary,
# preferring PATH, else the newest /usr/lib/postgresql/<ver>/bin (Debian and
# Ubuntu keep initdb/pg_ctl there, off PATH).
find_pg_bin() {
	local name=$1 dir
	if command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
		return 0
	fi
	while IFS= read -r dir; do
		if [[ -x "$dir/$name" ]]; then
			echo "$dir/$name"
			return 0
		fi
	done < <(versioned_bin_dirs)
	return 1
}

# versioned_bin_dirs: /usr/lib/postgresql/<ver>/bin, newest version first.
versioned_bin_dirs() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		if [[ -d "$d" ]]; then echo "$d"; fi
	done | sort -V -r
}

# tcp_listening HOST PORT: true if anything accepts TCP connections there.
# Used when pg_isready is missing, and for picking a free port (pg_isready
# would not notice a non-PostgreSQL listener).
tcp_listening() {
	(: <>"/dev/tcp/$1/$2") 2>/dev/null
}

pg_isready_bin=$(find_pg_bin pg_isready || true)
force_throwaway=${WITH_POSTGRES_FORCE_THROWAWAY:-}
if [[ "$force_throwaway" == 0 ]]; then
	force_throwaway=
fi

# 1. An explicit URL wins; an unreachable one is an error, never a fallback,
#    so tests cannot silently run against some other server.
if [[ -z "$force_throwaway" && -n "${TEST_DATABASE_URL:-}" ]]; then
	if [[ -n "$pg_isready_bin" ]] &&
		! "$pg_isready_bin" -q -t 5 -d "$TEST_DATABASE_URL"; then
		die "TEST_DATABASE_URL is set but no PostgreSQL is accepting connections at: $TEST_DATABASE_URL"
	fi
	export TEST_DATABASE_URL
	exec "$@"
fi

# 2. A server already running on the default port (CI service, dev machine).
if [[ -z "$force_throwaway" ]]; then
	if [[ -n "$pg_isready_bin" ]]; then
		default_up() { "$pg_isready_bin" -q -t 3 -h 127.0.0.1 -p 5432; }
	else
		default_up() { tcp_listening 127.0.0.1 5432; }
	fi
	if default_up; then
		export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		exec "$@"
	fi
fi

# 3. Throwaway server. initdb and pg_ctl must come from the same install.
candidates=()
if initdb_path=$(command -v initdb 2>/dev/null); then
	candidates+=("$(dirname -- "$initdb_path")")
fi
while IFS= read -r d; do candidates+=("$d"); done < <(versioned_bin_dirs)
bindir=
for d in "${candidates[@]}"; do
	if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
		bindir=$d
		break
	fi
done
if [[ -z "$bindir" ]]; then
	if [[ -n "$force_throwaway" ]]; then
		die "WITH_POSTGRES_FORCE_THROWAWAY is set but no initdb found; install PostgreSQL (apt-get install postgresql)"
	fi
	die "no PostgreSQL reachable at 127.0.0.1:5432 and no initdb found; install PostgreSQL (apt-get install postgresql) or set TEST_DATABASE_URL"
fi

# PostgreSQL refuses to run as root, so as root we run initdb/pg_ctl as the
# "postgres" OS user (created if missing); otherwise as ourselves.
pg_user=
if [[ "$(id -u)" -eq 0 ]]; then
	pg_user=postgres
	if ! id -u "$pg_user" >/dev/null 2>&1; then
		useradd --system --no-create-home "$pg_user" ||
			die "running as root and could not create the '$pg_user' user to run PostgreSQL as"
	fi
fi

# as_pg CMD...: run CMD as the PostgreSQL user, from the temp dir (the
# postgres user may not be able to enter our working directory).
as_pg() {
	if [[ -z "$pg_user" ]]; then
		(cd "$tmp" && "$@")
	elif command -v runuser >/dev/null 2>&1; then
		(cd "$tmp" && runuser -u "$pg_user" -- "$@")
	else
		(cd "$tmp" && su "$pg_user" -s /bin/bash -c "$(printf '%q ' "$@")")
	fi
}

tmp=
datadir=
# Always stop the server and delete its files, whatever the exit path.
# shellcheck disable=SC2317 # only invoked via trap, which shellcheck misses
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	if [[ -n "$datadir" && -f "$datadir/postmaster.pid" ]]; then
		as_pg "$bindir/pg_ctl" stop -D "$datadir" -m fast -w -t 30 >/dev/null 2>&1 ||
			as_pg "$bindir/pg_ctl" stop -D "$datadir" -m immediate -w >/dev/null 2>&1 ||
			echo "$prog: warning: could not stop throwaway server in $datadir" >&2
	fi
	if [[ -n "$tmp" ]]; then
		rm -rf -- "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
# Exit with the conventional 128+signal code; the EXIT trap then cleans up.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

tmp=$(mktemp -d "${TMPDIR:-/tmp}/with-postgres.XXXXXX")
datadir="$tmp/data"
if [[ -n "$pg_user" ]]; then
	chown "$pg_user:" "$tmp"
	as_pg test -w "$tmp" ||
		die "user '$pg_user' cannot write to $tmp (a parent dir is not searchable?); set TMPDIR=/tmp"
fi

# C locale: works with UTF8 everywhere and keeps collation/messages stable.
# --no-sync: the cluster is thrown away, durability does not matter.
if ! initdb_out=$(as_pg "$bindir/initdb" -D "$datadir" -U postgres --auth=trust \
	-E UTF8 --locale=C --no-sync 2>&1); then
	echo "$initdb_out" >&2
	die "initdb failed (binaries from $bindir)"
fi

# Settings go into postgresql.conf rather than pg_ctl -o so that paths with
# spaces need no quoting; only the port (pg_ctl -o -p) varies per attempt.
cat >>"$datadir/postgresql.conf" <<EOF

# added by scripts/with-postgres.sh (throwaway test server)
listen_addresses = '127.0.0.1'
unix_socket_directories = '$tmp'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
EOF

# next_free_port N: print the first port >= N on which nothing listens.
next_free_port() {
	local p=$1
	while tcp_listening 127.0.0.1 "$p"; do
		p=$((p + 1))
		((p < 65536)) || die "no free TCP port found"
	done
	echo "$p"
}

# Another process may grab the port between the probe and the bind, so retry
# a few times on "Address already in use".
port=55432
started=
for attempt in 1 2 3 4 5; do
	port=$(next_free_port "$port")
	log="$tmp/postgres-$attempt.log"
	if as_pg "$bindir/pg_ctl" start -D "$datadir" -l "$log" -w -t 60 -o "-p $port" >/dev/null 2>&1; then
		started=1
		break
	fi
	if grep -q 'Address already in use' "$log" 2>/dev/null; then
		port=$((port + 1))
		continue
	fi
	break
done
if [[ -z "$started" ]]; then
	echo "$prog: throwaway PostgreSQL failed to start; last 30 lines of $log:" >&2
	tail -n 30 "$log" >&2 2>/dev/null || true
	exit 1
fi

export TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
echo "$prog: started throwaway PostgreSQL ($bindir) at $TEST_DATABASE_URL, data in $tmp" >&2

# Not exec: the EXIT trap must run afterwards to stop the server.
rc=0
"$@" || rc=$?
exit "$rc"
