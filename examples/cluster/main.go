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
	if len(args) > 0 && (args[0] == "node" || args[0] == "store" || args[0] == "help") {
		cmd, rest = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "node":
		err = nodeMain(ctx, rest, os.Stderr)
	case "store":
		err = storeMain(ctx, rest, os.Stderr)
	case "help":
		helpMain(os.Stdout)
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
