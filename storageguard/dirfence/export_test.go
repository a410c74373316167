//go:build unix && !aix

package dirfence

import "fmt"

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
