// Command perfreport turns failover result files (package
// github.com/termfence/termfence/perf/results; format in docs/PERFORMANCE.md)
// into the table and the plot of docs/PERFORMANCE.md.
//
//	go run ./cmd/perfreport [-png docs/failover.png] FILE...
//
// It prints a markdown table to stdout: one row per result, with n, p50, p90,
// p99 and max in milliseconds (nearest rank; with 20 samples p99 is the
// maximum), and the row's p50 divided by the p50 of raw hashicorp/raft
// (system "hashicorp-raft") in the same scenario at the same heartbeat timeout,
// where the files hold one. With -png it also draws the empirical distribution
// (ECDF) of every result, one panel per scenario, on a logarithmic time axis,
// so that distributions of milliseconds and of seconds fit on one page.
//
// Rows appear in a fixed order: scenario (crash, handover, then others by
// name), system (termfence, hashicorp-raft, etcd, then others by name),
// heartbeat timeout, lease TTL. Two results with the same system, scenario,
// heartbeat timeout, lease TTL and label are an error rather than silently
// merged or dropped.
//
// It reports what the files say; it does not check that they were measured on
// the same machine, and it draws no conclusions.
package main
