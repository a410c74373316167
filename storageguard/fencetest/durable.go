package fencetest

import "github.com/termfence/termfence/storageguard"

// Durable describes, for MultiProcess and CrashDurability, a fence whose
// state lives at a path that several processes open.
type Durable struct {
	// Open opens a fence over the state at path, creating it (a file or a
	// directory, as the fence keeps it) if it does not exist. Closing the
	// fence must release everything Open acquired.
	Open func(path string) (storageguard.Fence, error)
	// Busy reports whether an error of Open means that another process
	// holds the state for the moment (a bbolt file admits one process at a
	// time): Open is then tried again, for up to a minute, and the writers
	// of MultiProcess close their fence after about one operation in four
	// so that the others get their turn. Nil: no Open error is transient.
	Busy func(error) bool
}
