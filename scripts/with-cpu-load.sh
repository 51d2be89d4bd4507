#!/usr/bin/env bash
# with-cpu-load.sh - run a command with CPU-bound processes running beside it.
#
# Usage: scripts/with-cpu-load.sh <command> [args...]
#   e.g. scripts/with-cpu-load.sh make test
#
# Builds internal/cmd/cpuhog into ./bin, starts CPU_HOGS of them (default 2:
# one per core of the 2-core machine the suite must pass on), then execs
# <command>, which keeps this script's process, exit code and signals
# (Ctrl-C and SIGTERM reach it as if it were run directly). The hogs are its
# children: each stops by itself within 100 ms of its parent's end, however
# the command ends (exit, failure, a signal, SIGKILL), so none is left
# behind. Nothing to install: the hog is a small Go program.
#
# Environment:
#   CPU_HOGS   how many hogs (default 2; 0 runs the command without load).
#   GO         the go command (default go).
set -euo pipefail

prog=with-cpu-load

if [[ $# -eq 0 ]]; then
	echo "usage: $0 <command> [args...]   (CPU_HOGS=2 by default)" >&2
	exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
hogs=${CPU_HOGS:-2}
if ! [[ "$hogs" =~ ^[0-9]+$ ]]; then
	echo "$prog: CPU_HOGS=$hogs: want a number" >&2
	exit 2
fi
hog="$root/bin/cpuhog"
mkdir -p "$root/bin"
(cd "$root" && "${GO:-go}" build -o "$hog" ./internal/cmd/cpuhog)

pids=()
for ((i = 0; i < hogs; i++)); do
	"$hog" -parent $$ &
	pids+=("$!")
done
echo "$prog: $hogs CPU hogs (pids ${pids[*]:-none}) beside '$*', started $(date -u +%H:%M:%SZ); they stop when it ends" >&2
exec "$@"
