//go:build !unix || aix

package main

import (
	"errors"

	"github.com/termfence/termfence/storageguard"
)

// openDirFence fails: dirfence needs flock(2) (unix).
func openDirFence(string) (storageguard.Fence, error) {
	return nil, errors.New("store: the dir backends need a unix system (flock)")
}
