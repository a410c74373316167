package boltfence

// OpenNoSync opens path as Open does, with bbolt's NoSync set (no fdatasync
// at commit), for the control of the power-loss test.
func OpenNoSync(path string) (*Fence, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	f.db.NoSync = true
	return f, nil
}

// Waiting returns how many calls wait for resource's in-process lock now.
func (f *Fence) Waiting(resource string) int { return f.cache.Waiting(resource) }
