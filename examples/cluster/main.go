// Command cluster is termfence's runnable example: a three-node Raft cluster
// whose leaders carry their term as a fencing token, and a store outside the
// consensus group that refuses any token older than the newest it has seen.
//
// Usage:
//
//	cluster [-unfenced]      the demo: the seed's paused-leader scenario on a
//	                         real three-node cluster in one process
//	cluster node  [flags]    one Raft node per process
//	cluster store [flags]    the fenced store
//
// See README.md for copy-paste commands and the contract in the project notes
// (cluster-cli.md) for every flag and endpoint.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches to a subcommand and returns the process exit code.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, rest := "", args
	if len(args) > 0 && (args[0] == "node" || args[0] == "store" || args[0] == "demo") {
		cmd, rest = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "node":
		err = nodeMain(ctx, rest, os.Stderr)
	case "store":
		err = storeMain(ctx, rest, os.Stderr)
	default:
		err = demoMain(ctx, rest, os.Stdout, os.Stderr)
	}
	if err != nil {
		if err == errUsage {
			return 2
		}
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		return 1
	}
	return 0
}
