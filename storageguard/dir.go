//go:build unix

package storageguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/termfence/termfence/epoch"
)

// Dir is a durable Fence for a directory that several processes, on one
// machine or on several sharing a disk, guard together. Each resource has
// one fence file in the directory, named by an encoding of the resource
// name, so any name works and none can reach outside the directory, and one
// intent file beside it (same name, suffix ".intent") that only ever holds
// a lock.
//
// Exclusion between processes is flock(2) on the fence file: writers under
// the current epoch hold it shared while their write runs; a raise holds it
// exclusively, so it waits for the writes still running under the older
// epoch. Within a process the same rules hold through a per-resource
// read-write lock, and one shared flock covers all of the process's
// concurrent same-epoch writers.
//
// Sticky shared lock. When a process's last same-epoch writer of a resource
// finishes, the process keeps the shared flock for a while (DirOptions.Linger
// after the last use). As long as it holds it without a break, no other
// process can have raised (a raise needs the exclusive flock), so the epoch
// it read when it took the lock is still the highest: a write under the
// current epoch then costs no system call at all, only in-process atomics.
// The first write after the lock was let go takes it again and reads the
// two slots to see whether another process raised meanwhile.
//
// Writer preference. flock(2) has none: with shared holders coming and
// going, a waiting exclusive locker can wait for ever, and a sticky holder
// would never let go. So every raise first takes the resource's intent file
// exclusively, then the fence file exclusively, and releases both after its
// fsync; a process that takes the shared lock from scratch first takes the
// intent file shared, then the fence file shared, and drops the intent lock
// at once, so it queues behind any raiser already waiting. A holder checks
// the intent file without blocking (LOCK_SH|LOCK_NB) at most once per
// DirOptions.Probe, from its writers or, when it has none, from a timer;
// when it finds a raiser waiting it admits no new writer on its lock, lets
// the writes in flight finish and releases the flock, and its next writers
// queue behind the raiser. A raise from another process therefore waits for
// the writes in flight under the older epoch plus up to about one probe
// interval (an idle holder lets go after the linger if that comes first),
// however busy the holders are; writers probe for themselves, so a timer
// delayed by saturated cores does not stretch that. A raise inside the
// process drops the process's own hold once its writers have finished (the
// read-write lock already makes it wait for them and holds newcomers back).
// The intent file only orders lockers: safety rests on the fence file's
// flock alone, and an intent file removed from outside costs only the
// writer preference.
//
// A fence file holds two record slots on separate 4 KiB pages (as bbolt
// keeps two meta pages), each with a sequence number and a CRC-32C. A raise
// writes the new epoch in place into the slot that does not hold the current
// one and fdatasyncs the file: one sync, no rename. A write torn by a crash
// fails its checksum and the other slot, the previous durable highest, is
// read instead. Only a resource's first raise creates the file: it writes a
// temporary file, fsyncs it, renames it into place and fsyncs the directory.
// A process that finds a record it did not write itself (another process
// raised, perhaps dying before its sync) syncs the file, and the directory
// the first time, before it acts on that record, so nothing is admitted on
// an epoch a crash could still take back.
//
// Costs: a write under the current epoch while the process holds the lock
// costs no system call; taking the lock from scratch costs five (lock and
// unlock the intent file, lock the fence file, read the slots; unlock later);
// a raise costs one fdatasync plus the locks; a holder with writers in
// flight spends two system calls per probe interval on the probe.
//
// Requirements and limits: the filesystem must implement flock(2) between
// all the processes involved (local filesystems do; on NFS, Linux emulates
// flock with byte-range locks, which needs working NFS locking). Every
// process must run this version of the protocol: a process that raises
// without the intent file gets no writer preference (its raise can wait
// behind sticky holders for as long as they are busy; it is still safe).
// Dir keeps two open files per resource it has used until Close, and a
// timer per resource whose lock it holds.
type Dir struct {
	dir     string
	dirFile *os.File // fsynced after each rename
	closed  atomic.Bool
	entries sync.Map // resource -> *dirEntry

	linger, probe, tick time.Duration
	t0                  time.Time // origin of the monotonic clock in dirEntry.probeAt

	closeMu  sync.RWMutex
	inflight sync.WaitGroup
}

// DirOptions tunes how long a process keeps a resource's shared lock. The
// zero value gives the defaults.
type DirOptions struct {
	// Linger is how long a process keeps a resource's shared lock after its
	// last write under the current epoch has finished, so that the next
	// write needs no system call. While it lingers, a raise from another
	// process waits up to about Probe. Zero means DefaultDirLinger.
	Linger time.Duration
	// Probe is how often a process that holds a resource's shared lock
	// checks whether a raise in another process is waiting for it; that
	// raise waits for the writes in flight plus about this long. Zero means
	// DefaultDirProbe.
	Probe time.Duration
}

// Defaults for DirOptions.
const (
	DefaultDirLinger = time.Millisecond
	DefaultDirProbe  = time.Millisecond
)

// Validate reports whether o is usable: no negative duration. The error
// wraps ErrBadConfig.
func (o DirOptions) Validate() error {
	if o.Linger < 0 {
		return fmt.Errorf("%w: negative dir linger %v", ErrBadConfig, o.Linger)
	}
	if o.Probe < 0 {
		return fmt.Errorf("%w: negative dir probe interval %v", ErrBadConfig, o.Probe)
	}
	return nil
}

var _ Fence = (*Dir)(nil)

const (
	// Fence file layout: slot 0 at offset 0, slot 1 at dirSlotStride, each
	// dirSlotSize bytes: magic, sequence number (big endian), record length
	// (big endian), the epoch's binary form, zero padding, and a CRC-32C
	// (Castagnoli) of everything before it in the slot.
	dirSlotSize   = 512
	dirSlotStride = 4096 // slots on separate pages: a torn page write hits one
	dirFileSize   = dirSlotStride + dirSlotSize
	dirMagic      = "TFF1"
	dirHeaderLen  = 4 + 8 + 2
	dirMaxRecord  = dirSlotSize - dirHeaderLen - 4

	dirFenceSuffix  = ".fence"
	dirIntentSuffix = ".intent" // the intent file: a lock, never written
	dirTempInfix    = ".tmp-"
	// dirTempMaxAge: a temporary file older than this was left by a crash
	// (a raise renames its temporary file within one fsync) and is removed
	// by OpenDir.
	dirTempMaxAge = 10 * time.Minute
	// dirMaxDirect is the longest resource name stored under its own base32
	// encoding; longer names use a SHA-256 of the name.
	dirMaxDirect = 120
)

// OpenDir opens the fence directory dir, creating it if missing, with the
// default DirOptions.
func OpenDir(dir string) (*Dir, error) {
	return OpenDirWith(dir, DirOptions{})
}

// OpenDirWith opens the fence directory dir, creating it if missing.
func OpenDirWith(dir string, opts DirOptions) (*Dir, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	linger, probe := opts.Linger, opts.Probe
	if linger == 0 {
		linger = DefaultDirLinger
	}
	if probe == 0 {
		probe = DefaultDirProbe
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storageguard: create fence dir: %w", err)
	}
	df, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("storageguard: open fence dir: %w", err)
	}
	st, err := df.Stat()
	if err != nil || !st.IsDir() {
		df.Close()
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("storageguard: open fence dir %s: %w", dir, err)
	}
	d := &Dir{dir: dir, dirFile: df, linger: linger, probe: probe, tick: min(linger, probe), t0: time.Now()}
	d.removeOldTemps()
	return d, nil
}

func (d *Dir) removeOldTemps() {
	names, err := d.dirFile.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		if !strings.Contains(n, dirTempInfix) {
			continue
		}
		p := filepath.Join(d.dir, n)
		if st, err := os.Lstat(p); err == nil && time.Since(st.ModTime()) > dirTempMaxAge {
			os.Remove(p)
		}
	}
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// dirFileName maps a resource name to its fence file's name: "r-" and the
// lower-case base32 of the name, or "h-" and the hex SHA-256 of long names.
// Neither contains '/' or starts with '.', so no name escapes the directory.
func dirFileName(resource string) string {
	if len(resource) <= dirMaxDirect {
		return "r-" + strings.ToLower(b32.EncodeToString([]byte(resource))) + dirFenceSuffix
	}
	sum := sha256.Sum256([]byte(resource))
	return "h-" + hex.EncodeToString(sum[:]) + dirFenceSuffix
}

// dirEntry is one resource's state in this process.
type dirEntry struct {
	path       string // the fence file
	intentPath string // the intent file
	// mu: read side for same-epoch writers of this process (and Highest),
	// write side for reloading and raising.
	mu sync.RWMutex

	// state is the sticky shared flock: stHeld (this process holds the
	// shared flock on f and raw is f's content), stDraining (a raiser
	// waits: admit no one new), stUsed (a writer joined since the last
	// tick) and, from stCountShift up, the writers inside the lock. A
	// writer joins with a compare-and-swap while stHeld is set and
	// stDraining is not: no system call. stHeld is set and cleared only
	// under fmu, and cleared only with no writer inside.
	state atomic.Uint64
	// probeAt: when (Dir.t0-relative nanoseconds) the intent file is next
	// probed for a waiting raiser.
	probeAt atomic.Int64

	// fmu guards taking and dropping the shared flock on f, the timer and
	// the fields below up to buf; released is signalled (with fmu) when a
	// draining hold is dropped.
	fmu      sync.Mutex
	released *sync.Cond
	timer    *time.Timer // runs tick while the lock is held
	lastUse  time.Time   // the last tick that saw stUsed (or the acquisition)
	buf      []byte      // scratch for reading f under fmu

	// The fields below change only under mu held for writing.
	//
	// f is the fence file as this process last opened it, intent the
	// intent file (opened once, kept until Close).
	f      *os.File
	intent *os.File
	// raw is f's content as last read or written by this process, and
	// highest, seq and slot its decoding (slot -1: empty file). A shared
	// locker that reads anything else goes to the slow path.
	raw     []byte
	highest epoch.Epoch
	seq     uint64
	slot    int
	// synced: f's directory entry is known durable (this process created
	// it, or fsynced the directory after opening it).
	synced bool
}

const (
	stHeld       = 1 << 0
	stDraining   = 1 << 1
	stUsed       = 1 << 2
	stCountShift = 3
	stOne        = 1 << stCountShift
)

func (d *Dir) entry(resource string) *dirEntry {
	if v, ok := d.entries.Load(resource); ok {
		return v.(*dirEntry)
	}
	p := filepath.Join(d.dir, dirFileName(resource))
	e := &dirEntry{path: p, intentPath: strings.TrimSuffix(p, dirFenceSuffix) + dirIntentSuffix}
	e.released = sync.NewCond(&e.fmu)
	v, _ := d.entries.LoadOrStore(strings.Clone(resource), e)
	return v.(*dirEntry)
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			return err
		}
	}
}

// now is the monotonic clock of probeAt.
func (d *Dir) now() int64 { return int64(time.Since(d.t0)) }

// tryJoin enters the sticky shared lock if this process holds it and no
// raiser is waiting: no system call. A joined caller must leave.
func (e *dirEntry) tryJoin() bool {
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
func (d *Dir) probeDue(e *dirEntry) bool {
	at, now := e.probeAt.Load(), d.now()
	return now >= at && e.probeAt.CompareAndSwap(at, now+int64(d.probe))
}

// leave exits the sticky shared lock; the last writer out of a draining
// lock releases the flock.
func (e *dirEntry) leave() {
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
func (e *dirEntry) raiserWaiting() bool {
	if err := flock(e.intent, syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	flock(e.intent, syscall.LOCK_UN)
	return false
}

// releaseLocked drops the shared flock if it is held with no writer inside.
// Caller holds fmu.
func (e *dirEntry) releaseLocked() {
	for {
		s := e.state.Load()
		if s&stHeld == 0 || s>>stCountShift != 0 {
			return
		}
		if e.state.CompareAndSwap(s, 0) {
			break
		}
	}
	flock(e.f, syscall.LOCK_UN)
	e.released.Broadcast()
}

// acquire joins the sticky shared lock: with no system call while this
// process holds it, else taking the flock from scratch, through the intent
// file so that it queues behind a waiting raiser, then reading the slots to
// see whether another process raised. It reports false (holding nothing)
// when the cached file is gone, replaced or changed, so the caller must
// reload under the exclusive path. A caller that joined must leave. The
// caller holds e.mu for reading.
func (d *Dir) acquire(e *dirEntry) (bool, error) {
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
	if err := flock(e.intent, syscall.LOCK_SH); err != nil {
		return false, fmt.Errorf("storageguard: lock fence intent file: %w", err)
	}
	err := flock(e.f, syscall.LOCK_SH)
	flock(e.intent, syscall.LOCK_UN)
	if err != nil {
		return false, fmt.Errorf("storageguard: lock fence file: %w", err)
	}
	ok, err := e.unchanged()
	if err != nil || !ok {
		flock(e.f, syscall.LOCK_UN)
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
func (e *dirEntry) unchanged() (bool, error) {
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
	if cap(e.buf) < dirFileSize {
		e.buf = make([]byte, dirFileSize)
	}
	n, err := e.f.ReadAt(e.buf[:dirFileSize], 0)
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("storageguard: read fence file %s: %w", e.path, err)
	}
	return bytes.Equal(e.buf[:n], e.raw), nil
}

// tickEntry runs every Dir.tick while this process holds e's shared flock:
// it drops the lock once no writer has used it for the linger, and probes
// for a waiting raiser when the writers have not (an idle holder).
func (d *Dir) tickEntry(e *dirEntry) {
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
// fence file's lock itself). Caller holds e.mu for writing.
func (d *Dir) exclusive(e *dirEntry, fn func() (raised bool, err error)) error {
	// Give up this process's hold on the shared flock before taking the
	// exclusive one; e.mu held for writing means no writer is inside.
	e.fmu.Lock()
	e.releaseLocked()
	e.fmu.Unlock()
	if e.intent == nil {
		f, err := os.OpenFile(e.intentPath, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("storageguard: open fence intent file: %w", err)
		}
		e.intent = f
	}
	if err := flock(e.intent, syscall.LOCK_EX); err != nil {
		return fmt.Errorf("storageguard: lock fence intent file: %w", err)
	}
	defer flock(e.intent, syscall.LOCK_UN)
	if err := d.lockExclusive(e); err != nil {
		return err
	}
	raised, err := false, error(nil)
	if fn != nil {
		raised, err = fn()
	}
	if (err != nil || !raised) && e.f != nil {
		flock(e.f, syscall.LOCK_UN)
	}
	return err
}

// lockExclusive opens the fence file (creating an empty one if there is
// none), takes its exclusive flock and loads it. Caller holds e.mu for
// writing, so no writer of this process holds the shared flock.
func (d *Dir) lockExclusive(e *dirEntry) error {
	for {
		if e.f == nil {
			f, err := os.OpenFile(e.path, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("storageguard: open fence file: %w", err)
			}
			e.f = f
			e.raw, e.highest, e.seq, e.slot, e.synced = nil, epoch.Epoch{}, 0, -1, false
		}
		if err := flock(e.f, syscall.LOCK_EX); err != nil {
			return fmt.Errorf("storageguard: lock fence file: %w", err)
		}
		ok, err := e.current()
		if err == nil && ok {
			if err = d.load(e); err == nil {
				return nil
			}
		}
		flock(e.f, syscall.LOCK_UN)
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
func (e *dirEntry) current() (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(e.f.Fd()), &st); err != nil {
		return false, fmt.Errorf("storageguard: stat fence file: %w", err)
	}
	return st.Nlink > 0, nil
}

// load reads e.f, under its flock, into e. Content this process did not
// write itself is made durable before it is trusted: another process may
// have raised and died before its sync, and acting on such an epoch would
// let a crash of the machine take back what was already admitted.
func (d *Dir) load(e *dirEntry) error {
	b := make([]byte, dirFileSize)
	n, err := e.f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("storageguard: read fence file %s: %w", e.path, err)
	}
	b = b[:n]
	if e.raw != nil && bytes.Equal(b, e.raw) {
		return nil
	}
	h, seq, slot, err := decodeFence(b)
	if err != nil {
		return fmt.Errorf("storageguard: fence file %s is corrupt: %w", e.path, err)
	}
	if len(b) > 0 {
		if err := syscall.Fdatasync(int(e.f.Fd())); err != nil {
			return fmt.Errorf("storageguard: sync fence file %s: %w", e.path, err)
		}
		if !e.synced {
			if err := d.dirFile.Sync(); err != nil {
				return fmt.Errorf("storageguard: sync fence dir: %w", err)
			}
			e.synced = true
		}
	}
	e.raw, e.highest, e.seq, e.slot = b, h, seq, slot
	return nil
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// encodeSlot returns one slot holding ep with sequence number seq.
func encodeSlot(ep epoch.Epoch, seq uint64) ([]byte, error) {
	rec, err := ep.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(rec) > dirMaxRecord {
		return nil, fmt.Errorf("storageguard: epoch record of %d bytes does not fit a fence slot", len(rec))
	}
	b := make([]byte, dirSlotSize)
	copy(b, dirMagic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint16(b[12:], uint16(len(rec)))
	copy(b[dirHeaderLen:], rec)
	binary.BigEndian.PutUint32(b[dirSlotSize-4:], crc32.Checksum(b[:dirSlotSize-4], crc32c))
	return b, nil
}

// decodeSlot decodes one slot; ok is false for a slot that is missing,
// torn or never written.
func decodeSlot(b []byte) (ep epoch.Epoch, seq uint64, ok bool) {
	if len(b) < dirSlotSize || string(b[:4]) != dirMagic {
		return epoch.Epoch{}, 0, false
	}
	if binary.BigEndian.Uint32(b[dirSlotSize-4:]) != crc32.Checksum(b[:dirSlotSize-4], crc32c) {
		return epoch.Epoch{}, 0, false
	}
	n := int(binary.BigEndian.Uint16(b[12:]))
	if n > dirMaxRecord || ep.UnmarshalBinary(b[dirHeaderLen:dirHeaderLen+n]) != nil {
		return epoch.Epoch{}, 0, false
	}
	return ep, binary.BigEndian.Uint64(b[4:]), true
}

// decodeFence decodes a fence file's content: the valid slot with the
// higher sequence number. An empty file holds no epoch (slot -1); a
// non-empty one with no valid slot is corrupt (a file only exists non-empty
// after its first raise was durable, and a later raise tears at most the
// slot it writes).
func decodeFence(b []byte) (h epoch.Epoch, seq uint64, slot int, err error) {
	if len(b) == 0 {
		return epoch.Epoch{}, 0, -1, nil
	}
	slot = -1
	for i := 0; i < 2; i++ {
		off := i * dirSlotStride
		if off >= len(b) {
			break
		}
		if ep, s, ok := decodeSlot(b[off:min(off+dirSlotSize, len(b))]); ok && (slot < 0 || s > seq) {
			h, seq, slot = ep, s, i
		}
	}
	if slot < 0 {
		return epoch.Epoch{}, 0, -1, errors.New("no valid record")
	}
	return h, seq, slot, nil
}

func (e *dirEntry) closeFile() {
	if e.f != nil {
		e.f.Close() // releases any flock held through it
		e.f = nil
	}
}

// raise durably records ep as the highest. Caller holds e.mu for writing
// and the exclusive flock on e.f, which is loaded. On return this process
// holds no flock.
func (d *Dir) raise(e *dirEntry, ep epoch.Epoch) error {
	slotBytes, err := encodeSlot(ep, e.seq+1)
	if err != nil {
		return err
	}
	if e.slot < 0 {
		return d.create(e, ep, slotBytes)
	}
	target := 1 - e.slot
	if _, err := e.f.WriteAt(slotBytes, int64(target*dirSlotStride)); err != nil {
		e.closeFile() // state unknown: reload before anything else
		return fmt.Errorf("storageguard: raise fence file %s to %s: %w", e.path, ep, err)
	}
	if err := syscall.Fdatasync(int(e.f.Fd())); err != nil {
		e.closeFile()
		return fmt.Errorf("storageguard: sync fence file %s after raising to %s: %w", e.path, ep, err)
	}
	if !e.synced {
		// Not reached by the protocol (load syncs the directory before a
		// non-empty file is trusted), kept so a raise is never acknowledged
		// on a link that is not durable.
		if err := d.dirFile.Sync(); err != nil {
			e.closeFile()
			return fmt.Errorf("storageguard: sync fence dir: %w", err)
		}
		e.synced = true
	}
	raw := make([]byte, max(len(e.raw), target*dirSlotStride+dirSlotSize))
	copy(raw, e.raw)
	copy(raw[target*dirSlotStride:], slotBytes)
	e.raw, e.highest, e.seq, e.slot = raw, ep, e.seq+1, target
	flock(e.f, syscall.LOCK_UN)
	return nil
}

// create makes a resource's first fence file: slot 0 holds ep, slot 1 is
// zero. It writes a temporary file, fsyncs it, renames it over the empty
// file that e.f holds locked, and fsyncs the directory, holding the new
// file exclusively until the rename is durable: nobody may act on an epoch
// that a crash could still take back.
func (d *Dir) create(e *dirEntry, ep epoch.Epoch, slotBytes []byte) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := e.path + dirTempInfix + hex.EncodeToString(rnd[:])
	nf, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("storageguard: create fence temp file: %w", err)
	}
	fail := func(err error) error {
		nf.Close()
		os.Remove(tmp)
		return fmt.Errorf("storageguard: raise fence file %s to %s: %w", e.path, ep, err)
	}
	raw := make([]byte, dirFileSize)
	copy(raw, slotBytes)
	if _, err := nf.Write(raw); err != nil {
		return fail(err)
	}
	if err := nf.Sync(); err != nil {
		return fail(err)
	}
	if err := flock(nf, syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, e.path); err != nil {
		return fail(err)
	}
	if err := d.dirFile.Sync(); err != nil {
		// The rename happened but may not be durable; keep nobody waiting on
		// a file we no longer trust: drop both and make the caller reload.
		nf.Close()
		e.closeFile()
		return fmt.Errorf("storageguard: fsync fence dir after raising %s to %s: %w", e.path, ep, err)
	}
	e.closeFile() // the old, empty inode: releases our exclusive lock on it
	flock(nf, syscall.LOCK_UN)
	e.f = nf
	e.raw, e.highest, e.seq, e.slot, e.synced = raw, ep, e.seq+1, 0, true
	return nil
}

func (d *Dir) enter() error {
	d.closeMu.RLock()
	defer d.closeMu.RUnlock()
	if d.closed.Load() {
		return ErrClosed
	}
	d.inflight.Add(1)
	return nil
}

// Do implements Fence.Do: the resource's flock is held (shared, or
// exclusive for a raise and then shared) while write runs. write must not
// call the fence for the same resource.
func (d *Dir) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if err := ValidateResource(resource); err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer d.inflight.Done()
	e := d.entry(resource)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done, err := d.fast(ctx, e, resource, ep, write)
		if done || err != nil {
			return err
		}
		// Slow path: reload or raise under the exclusive lock.
		e.mu.Lock()
		err = d.exclusive(e, func() (bool, error) {
			dec, err := Decide(resource, e.highest, ep)
			if err != nil || !dec.Raise {
				return false, err
			}
			return true, d.raise(e, ep) // unlocks on success
		})
		e.mu.Unlock()
		if err != nil {
			return err
		}
		if write == nil {
			return nil
		}
	}
}

// fast tries the shared path: done is true when ep was decided (write ran
// or ep was refused).
func (d *Dir) fast(ctx context.Context, e *dirEntry, resource string, ep epoch.Epoch, write func(ctx context.Context) error) (done bool, err error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ok, err := d.acquire(e)
	if err != nil || !ok {
		return err != nil, err
	}
	defer e.leave()
	dec, err := Decide(resource, e.highest, ep)
	if err != nil {
		return true, err
	}
	if dec.Raise {
		return false, nil
	}
	if write == nil {
		return true, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return true, write(ctx)
}

// Admit implements Fence.Admit.
func (d *Dir) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return d.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check.
func (d *Dir) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	h, err := d.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = Decide(resource, h, ep)
	return err
}

// Highest implements Fence.Highest. It reads the fence file under a shared
// lock (or trusts this process's unbroken hold of one), so it sees raises by
// other processes.
func (d *Dir) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if err := ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	if err := d.enter(); err != nil {
		return epoch.Epoch{}, err
	}
	defer d.inflight.Done()
	if err := ctx.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	var v *dirEntry
	if x, ok := d.entries.Load(resource); ok {
		v = x.(*dirEntry)
	} else {
		// Unknown here: read the file directly, creating nothing.
		return readFenceFile(filepath.Join(d.dir, dirFileName(resource)))
	}
	for {
		v.mu.RLock()
		ok, err := d.acquire(v)
		h := v.highest
		if ok {
			v.leave()
		}
		v.mu.RUnlock()
		if err != nil {
			return epoch.Epoch{}, err
		}
		if ok {
			return h, nil
		}
		v.mu.Lock()
		err = d.exclusive(v, nil)
		v.mu.Unlock()
		if err != nil {
			return epoch.Epoch{}, err
		}
	}
}

// readFenceFile reads a fence file under a shared lock (a raise rewrites a
// slot in place), creating nothing.
func readFenceFile(path string) (epoch.Epoch, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("storageguard: open fence file: %w", err)
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_SH); err != nil {
		return epoch.Epoch{}, fmt.Errorf("storageguard: lock fence file: %w", err)
	}
	b := make([]byte, dirFileSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return epoch.Epoch{}, fmt.Errorf("storageguard: read fence file %s: %w", path, err)
	}
	h, _, _, err := decodeFence(b[:n])
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("storageguard: fence file %s is corrupt: %w", path, err)
	}
	return h, nil
}

// Close waits for calls in progress (their writes still hold the locks),
// then stops the linger timers and closes every file, which drops every
// lock this process holds. Later calls fail with ErrClosed.
func (d *Dir) Close() error {
	d.closeMu.Lock()
	already := d.closed.Swap(true)
	d.closeMu.Unlock()
	if already {
		return nil
	}
	d.inflight.Wait()
	d.entries.Range(func(_, v any) bool {
		e := v.(*dirEntry)
		e.fmu.Lock()
		if e.timer != nil {
			e.timer.Stop()
		}
		e.state.Store(0)
		e.closeFile()
		if e.intent != nil {
			e.intent.Close()
			e.intent = nil
		}
		e.fmu.Unlock()
		return true
	})
	return d.dirFile.Close()
}
