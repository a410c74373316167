package netlab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
)

// Sweep removes every stale lab: namespaces named by a lab (tfl-PID-...)
// whose maker is no longer alive — no process PID, or one started at
// another time (a reused PID). Processes still running in them are killed
// first. Labs of live processes, this one included, and namespaces that are
// not a lab's are never touched. It returns the names it removed. New calls
// it; so can a harness at start-up.
func Sweep(ctx context.Context) ([]string, error) {
	ents, err := os.ReadDir(nsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netlab: %w", err)
	}
	var stale []string
	for _, e := range ents {
		pid, start, ok := parseNSName(e.Name())
		if !ok {
			continue
		}
		if s, err := procStart(pid); err == nil && s == start {
			continue // its maker is alive
		}
		stale = append(stale, e.Name())
	}
	if len(stale) == 0 {
		return nil, nil
	}
	sort.Strings(stale)
	ip, err := ipPath()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	var errs []error
	for _, n := range stale {
		errs = append(errs, killNS(n))
	}
	if err := removeNS(ctx, ip, stale); err != nil {
		errs = append(errs, err)
	}
	return stale, errors.Join(errs...)
}
