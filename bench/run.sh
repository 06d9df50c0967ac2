#!/usr/bin/env bash
# Runs the peer comparison (see docs/BENCHMARKS.md). Installs the Redis and
# etcd servers from Debian packages when they are missing (as root; otherwise
# it says what to install and stops); PostgreSQL server binaries must be
# installed (the benchmark starts a throwaway cluster).
#
#   bench/run.sh            full run (about 7 minutes), writes bench/out/
#   bench/run.sh -quick     smoke run (about 30 seconds)
set -euo pipefail
cd "$(dirname "$0")"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v etcd >/dev/null || missing+=(etcd-server)
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "run.sh: not installed: ${missing[*]}. Install the packages as root (apt-get install ${missing[*]}) or run run.sh as root, which installs them." >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
exec go run . "$@"
