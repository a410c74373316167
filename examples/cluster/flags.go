package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/termfence/termfence/election"
)

// errUsage is returned when the command line is wrong; the flag package has
// already printed why and the usage.
var errUsage = errors.New("usage")

// newFlagSet returns a flag set that reports errors (and -h) on stderr and
// returns them instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args, mapping flag errors (and leftover arguments) to
// errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected arguments: %q\n", fs.Name(), fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}

// parseBootstrap parses "-bootstrap id=addr,id=addr,...".
func parseBootstrap(s string) ([]election.Server, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []election.Server
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("-bootstrap: %q is not id=raftaddr", part)
		}
		out = append(out, election.Server{ID: id, Addr: addr})
	}
	return out, nil
}

// newLogger returns a text logger on w at the named level.
func newLogger(w io.Writer, level string, attrs ...any) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})).With(attrs...), nil
}

// writeAddrFile writes content to path atomically (write a temporary file,
// then rename), so a reader polling for it never sees half of it.
func writeAddrFile(path, content string) error {
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content+"\n"), 0o644); err != nil {
		return fmt.Errorf("-addr-file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("-addr-file: %w", err)
	}
	return nil
}
