//go:build unix && !aix

package dirfence

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/epoch"
)

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// now is the monotonic clock of probeAt.
func (d *Fence) now() int64 { return int64(time.Since(d.t0)) }

// joinNested enters the sticky shared lock for a call nested in a write of
// this process that is inside it, even while a raiser waits: the write
// outside holds the lock anyway, and waiting for it would be waiting for
// itself. It reports false if the lock is not held (the write outside has
// left it), and the caller then acquires as usual.
func (e *entry) joinNested() bool {
	for {
		s := e.state.Load()
		if s&stHeld == 0 || s>>stCountShift == 0 {
			return false
		}
		if e.state.CompareAndSwap(s, (s+stOne)|stUsed) {
			return true
		}
	}
}

// tryJoin enters the sticky shared lock if this process holds it and no
// raiser is waiting: no system call. A joined caller must leave.
func (e *entry) tryJoin() bool {
	for {
		s := e.state.Load()
		if s&stHeld == 0 || s&stDraining != 0 {
			return false
		}
		if e.state.CompareAndSwap(s, (s+stOne)|stUsed) {
			return true
		}
	}
}

// probeDue claims the next probe of e's intent file: it reports true to one
// caller per probe interval.
func (d *Fence) probeDue(e *entry) bool {
	at, now := e.probeAt.Load(), d.now()
	return now >= at && e.probeAt.CompareAndSwap(at, now+int64(d.probe))
}

// leave exits the sticky shared lock; the last writer out of a draining
// lock releases the flock.
func (e *entry) leave() {
	s := e.state.Add(^uint64(stOne - 1))
	if s&stDraining != 0 && s>>stCountShift == 0 {
		e.fmu.Lock()
		e.releaseLocked()
		e.fmu.Unlock()
	}
}

// raiserWaiting probes the intent file: a raiser holds it exclusively while
// it waits for the fence file. A failed probe counts as a raiser waiting:
// yielding is always safe.
func (e *entry) raiserWaiting() bool {
	if err := flock(e.intent, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	flock(e.intent, unix.LOCK_UN)
	return false
}

// releaseLocked drops the shared flock if it is held with no writer inside.
// Caller holds fmu.
func (e *entry) releaseLocked() {
	for {
		s := e.state.Load()
		if s&stHeld == 0 || s>>stCountShift != 0 {
			return
		}
		if e.state.CompareAndSwap(s, 0) {
			break
		}
	}
	flock(e.f, unix.LOCK_UN)
	e.released.Broadcast()
}

// acquire joins the sticky shared lock: with no system call while this
// process holds it, else taking the flock from scratch, through the intent
// file so that it queues behind a waiting raiser, then reading the slots to
// see whether another process raised. It reports false (holding nothing)
// when the cached file is gone, replaced or changed, so the caller must
// reload under the exclusive path. A caller that joined must leave. The
// caller holds e.g's shared side.
func (d *Fence) acquire(e *entry) (bool, error) {
	if e.tryJoin() {
		// Busy holders probe from their writers (a timer may run late on
		// loaded cores); one writer per probe interval pays for it.
		if d.probeDue(e) && e.raiserWaiting() {
			e.state.Or(stDraining) // this writer is inside: its leave or a later one releases
		}
		return true, nil
	}
	e.fmu.Lock()
	defer e.fmu.Unlock()
	// stHeld changes only under fmu; with it set, tryJoin fails only while
	// a raiser is waiting: let the writers inside finish and the lock go,
	// then queue behind the raiser.
	for e.state.Load()&stHeld != 0 {
		if e.tryJoin() {
			return true, nil
		}
		e.released.Wait()
	}
	if e.f == nil {
		return false, nil
	}
	if err := flock(e.intent, unix.LOCK_SH); err != nil {
		return false, fmt.Errorf("dirfence: lock fence intent file: %w", err)
	}
	err := flock(e.f, unix.LOCK_SH)
	flock(e.intent, unix.LOCK_UN)
	if err != nil {
		return false, fmt.Errorf("dirfence: lock fence file: %w", err)
	}
	ok, err := e.unchanged()
	if err != nil || !ok {
		flock(e.f, unix.LOCK_UN)
		return false, err
	}
	e.state.Store(stHeld | stUsed | stOne)
	e.lastUse = time.Now()
	e.probeAt.Store(d.now() + int64(d.probe))
	if e.timer == nil {
		e.timer = time.AfterFunc(d.tick, func() { d.tickEntry(e) })
	} else {
		e.timer.Reset(d.tick)
	}
	return true, nil
}

// unchanged reports whether e.f, under this process's shared flock, still
// holds what this process last read or wrote. Caller holds fmu.
func (e *entry) unchanged() (bool, error) {
	if e.slot < 0 {
		// An empty file is replaced (renamed over) by a resource's first
		// raise, in which case the content read through e.f stays empty.
		if ok, err := e.current(); err != nil || !ok {
			return false, err
		}
	}
	// A raise by another process rewrites a slot in place: compare the
	// slots with what this process last saw. (One pread; an fstat would not
	// do: a change of size or link count does not reveal an in-place write,
	// and timestamps are too coarse.)
	if cap(e.buf) < fileSize {
		e.buf = make([]byte, fileSize)
	}
	n, err := e.f.ReadAt(e.buf[:fileSize], 0)
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("dirfence: read fence file %s: %w", e.path, err)
	}
	return bytes.Equal(e.buf[:n], e.raw), nil
}

// tickEntry runs every Fence.tick while this process holds e's shared flock:
// it drops the lock once no writer has used it for the linger, and probes
// for a waiting raiser when the writers have not (an idle holder).
func (d *Fence) tickEntry(e *entry) {
	if d.enter() != nil {
		return // Close closes the file, which drops the flock
	}
	defer d.inflight.Done()
	e.fmu.Lock()
	defer e.fmu.Unlock()
	if e.state.Load()&stHeld == 0 {
		return
	}
	now := time.Now()
	s := e.state.And(^uint64(stUsed))
	if s&stUsed != 0 {
		e.lastUse = now
	}
	idle := s>>stCountShift == 0 && now.Sub(e.lastUse) >= d.linger
	if !idle && s&stDraining == 0 && d.probeDue(e) && e.raiserWaiting() {
		s = e.state.Or(stDraining) | stDraining
	}
	if s>>stCountShift == 0 && (idle || s&stDraining != 0) {
		e.releaseLocked() // refuses if a writer joined meanwhile
	}
	if e.state.Load()&stHeld != 0 {
		e.timer.Reset(d.tick)
	}
}

// exclusive runs fn under the resource's exclusive locks: the intent file
// (so that holders of the shared lock yield and newcomers queue), then the
// fence file, loaded. fn reports whether it raised (raise releases the
// fence file's lock itself). Caller holds e.g exclusively.
func (d *Fence) exclusive(e *entry, fn func() (raised bool, err error)) error {
	// Give up this process's hold on the shared flock before taking the
	// exclusive one; e.g held exclusively means no writer is inside.
	e.fmu.Lock()
	e.releaseLocked()
	e.fmu.Unlock()
	if e.intent == nil {
		f, err := d.openAt(e.intentName, unix.O_RDWR|unix.O_CREAT, d.mode)
		if err != nil {
			return fmt.Errorf("dirfence: open fence intent file: %w", err)
		}
		e.intent = f
	}
	if err := flock(e.intent, unix.LOCK_EX); err != nil {
		return fmt.Errorf("dirfence: lock fence intent file: %w", err)
	}
	defer flock(e.intent, unix.LOCK_UN)
	if err := d.lockExclusive(e); err != nil {
		return err
	}
	raised, err := false, error(nil)
	if fn != nil {
		raised, err = fn()
	}
	if (err != nil || !raised) && e.f != nil {
		flock(e.f, unix.LOCK_UN)
	}
	return err
}

// lockExclusive opens the fence file (creating an empty one if there is
// none), takes its exclusive flock and loads it. Caller holds e.g
// exclusively, so no writer of this process holds the shared flock.
func (d *Fence) lockExclusive(e *entry) error {
	for {
		if e.f == nil {
			f, err := d.openAt(e.name, unix.O_RDWR|unix.O_CREAT, d.mode)
			if err != nil {
				return fmt.Errorf("dirfence: open fence file: %w", err)
			}
			e.f = f
			e.raw, e.highest, e.seq, e.slot, e.synced = nil, epoch.Epoch{}, 0, -1, false
		}
		if err := flock(e.f, unix.LOCK_EX); err != nil {
			return fmt.Errorf("dirfence: lock fence file: %w", err)
		}
		ok, err := e.current()
		if err == nil && ok {
			if err = d.load(e); err == nil {
				return nil
			}
		}
		flock(e.f, unix.LOCK_UN)
		if err != nil {
			return err
		}
		// The file was replaced or removed behind the fence's back (the
		// protocol renames only a resource's first file into place, over
		// nothing): open whatever is at the path now.
		e.closeFile()
	}
}

// current reports whether e.f is still linked: only a file replaced or
// removed from outside the fence has no links.
func (e *entry) current() (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(e.f.Fd()), &st); err != nil {
		return false, fmt.Errorf("dirfence: stat fence file: %w", err)
	}
	return st.Nlink > 0, nil
}

// load reads e.f, under its flock, into e. Content this process did not
// write itself is made durable before it is trusted: another process may
// have raised and died before its sync, and acting on such an epoch would

func (e *entry) closeFile() {
	if e.f != nil {
		e.f.Close() // releases any flock held through it
		e.f = nil
	}
}
