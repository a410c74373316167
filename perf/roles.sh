#!/bin/sh
# Role failover, handover, idle CPU and memory per role (docs/PERFORMANCE.md,
# "Roles"): termfence's roles, then etcd's concurrency.Election with a
# session TTL equal to the role lease, in one run. From the repository root:
#
#	sh perf/roles.sh [runs] [lease-seconds]
set -eu
n=${1:-20}
lease=${2:-4}
TERMFENCE_ROLE_PERF=1 TERMFENCE_ROLE_PERF_N="$n" TERMFENCE_ROLE_LEASE="${lease}s" \
	go test -run TestRolesPerf -v -timeout 120m ./election/ | grep 'roles_perf_test.go'
(cd perf && go run ./cmd/etcdroles -n "$n" -ttl "$lease")
