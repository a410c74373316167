//go:build unix && !aix

package dirfence

import (
	"fmt"
	"os"
)

// OpenMutant opens dir as Open does, with one sync removed, for the
// controls of the power-loss tests: "nosync" drops the fdatasync of a
// raise, "noloadsync" the fdatasync of a record read from another
// process (D4), "noloaddirsync" the directory fsync before such a record
// is trusted (D5).
func OpenMutant(dir, mutant string) (*Fence, error) {
	skip := map[string]skipSyncs{"nosync": skipRaiseData, "noloadsync": skipLoadData, "noloaddirsync": skipLoadDir}
	s, ok := skip[mutant]
	if !ok {
		return nil, fmt.Errorf("dirfence: unknown mutant %q", mutant)
	}
	d, err := Open(dir)
	if err != nil {
		return nil, err
	}
	d.skip = s
	return d, nil
}

// OpenDying opens dir as Open does, and makes the process exit at once (as
// if the machine had lost power there, before the sync) at its first sync
// of kind at: "data", the fdatasync of a raise (after the one with which
// the first load syncs the record already there); "dir", the directory
// fsync of a resource's first raise.
func OpenDying(dir, at string) (*Fence, error) {
	kinds := map[string]syncKind{"data": syncData, "dir": syncDir}
	k, ok := kinds[at]
	if !ok {
		return nil, fmt.Errorf("dirfence: unknown dying point %q", at)
	}
	d, err := Open(dir)
	if err != nil {
		return nil, err
	}
	skip := 0
	if k == syncData {
		skip = 1 // the first is load's, of the record already there
	}
	d.syncHook = func(_ *os.File, kind syncKind) error {
		if kind == k {
			if skip == 0 {
				os.Exit(0)
			}
			skip--
		}
		return nil
	}
	return d, nil
}

// Waiting returns how many calls of this process wait for resource's
// in-process lock now.
func (d *Fence) Waiting(resource string) int {
	v, ok := d.entries.Load(resource)
	if !ok {
		return 0
	}
	return v.(*entry).g.Waiting()
}
