#!/usr/bin/env bash
# Runs the peer comparison (see docs/BENCHMARKS.md). Installs the Redis and
# etcd servers from Debian packages when they are missing; PostgreSQL server
# binaries must be installed (the benchmark starts a throwaway cluster).
#
#   bench/run.sh            full run (about 7 minutes), writes bench/out/
#   bench/run.sh -quick     smoke run (about 30 seconds)
set -euo pipefail
cd "$(dirname "$0")"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v etcd >/dev/null || missing+=(etcd-server)
if ((${#missing[@]})); then
	sudo=""
	[[ $(id -u) -eq 0 ]] || sudo="sudo"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
exec go run . "$@"
