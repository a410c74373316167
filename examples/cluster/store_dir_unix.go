//go:build unix && !aix

package main

import (
	"fmt"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/dirfence"
)

// openDirFence opens the dirfence directory at dir.
func openDirFence(dir string) (storageguard.Fence, error) {
	f, err := dirfence.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return f, nil
}
