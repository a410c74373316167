#!/usr/bin/env bash
# Reproduces the failover figures of docs/PERFORMANCE.md on this machine:
# termfence and raw hashicorp/raft at HeartbeatTimeout 100 ms and 50 ms (crash:
# host gone; killed: process dead, host up; handover), etcd's election at its
# default and at its shortest lease TTL, then the table (stdout) and
# docs/failover.png. Result files go to docs/results/ (override with OUT=DIR).
#
#   ./perf/run.sh            # N=20 rounds per scenario
#   N=50 ./perf/run.sh
#   SKIP_TERMFENCE=1 ./perf/run.sh   # etcd only; report from the files already in OUT
#   SKIP_ETCD=1 ./perf/run.sh        # termfence/raw only; etcd rows from the files in OUT
#   HEALTHY=10m ./perf/run.sh        # also count elections on a healthy, CPU-loaded cluster
#   SKIP_NETLAB=1 ./perf/run.sh      # without the netlab rows (they need root)
#
# As root it also measures termfence and raw raft at HT 100 ms with each node
# a process in its own network namespace (failover -net netlab, the kernel's
# faults) into termfence-netlab-ht100ms.json.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/docs/results}"
n="${N:-20}"
mkdir -p "$out"

if [[ -z "${SKIP_TERMFENCE:-}" ]]; then
	# Format of the -json files: docs/PERFORMANCE.md, "Result files".
	(cd "$root" && go run ./internal/cmd/failover -n "$n" -ht 100ms -json "$out/termfence-ht100ms.json")
	(cd "$root" && go run ./internal/cmd/failover -n "$n" -ht 50ms -json "$out/termfence-ht50ms.json")
	if [[ -z "${SKIP_NETLAB:-}" ]]; then
		if [[ "$(id -u)" == 0 ]]; then
			(cd "$root" && go run ./internal/cmd/failover -net netlab -n "$n" -ht 100ms -json "$out/termfence-netlab-ht100ms.json")
		else
			echo "run.sh: not root: skipping the netlab rows (failover -net netlab)" >&2
		fi
	fi
fi

if [[ -n "${HEALTHY:-}" ]]; then
	# No fault, one CPU burner per core: every term change is a false election.
	(cd "$root" && go run ./internal/cmd/failover -healthy "$HEALTHY" -ht 50ms)
fi

cd "$root/perf"
if [[ -z "${SKIP_ETCD:-}" ]]; then
	# etcd defaults (heartbeat 100 ms, election 1 s): WithTTL(1) is granted 2 s.
	go run ./cmd/etcdfailover -n "$n" -json "$out/etcd-ttl2s.json"
	# election-timeout 500 ms: the server's minimum lease TTL drops to 1 s.
	go run ./cmd/etcdfailover -n "$n" -election-timeout 500 -json "$out/etcd-ttl1s.json"
fi

go run ./cmd/perfreport -png "$root/docs/failover.png" "$out"/*.json
