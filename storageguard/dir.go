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
// name, so any name works and none can reach outside the directory.
//
// Exclusion between processes is flock(2) on the fence file: writers under
// the current epoch hold it shared while their write runs; a raise holds it
// exclusively, so it waits for the writes still running under the older
// epoch. Within a process the same rules hold through a per-resource
// read-write lock, and one shared flock covers all of the process's
// concurrent same-epoch writers.
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
// Requirements and limits: the filesystem must implement flock(2) between
// all the processes involved (local filesystems do; on NFS, Linux emulates
// flock with byte-range locks, which needs working NFS locking). flock has
// no writer preference, so under unbroken same-epoch traffic from other
// processes a raise can wait. Dir keeps one open file per resource it has
// used until Close. A write under the current epoch costs three system
// calls (lock, a read of the two slots to see whether another process
// raised, unlock).
type Dir struct {
	dir     string
	dirFile *os.File // fsynced after each rename
	closed  atomic.Bool
	entries sync.Map // resource -> *dirEntry

	closeMu  sync.RWMutex
	inflight sync.WaitGroup
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

	dirFenceSuffix = ".fence"
	dirTempInfix   = ".tmp-"
	// dirTempMaxAge: a temporary file older than this was left by a crash
	// (a raise renames its temporary file within one fsync) and is removed
	// by OpenDir.
	dirTempMaxAge = 10 * time.Minute
	// dirMaxDirect is the longest resource name stored under its own base32
	// encoding; longer names use a SHA-256 of the name.
	dirMaxDirect = 120
)

// OpenDir opens the fence directory dir, creating it if missing.
func OpenDir(dir string) (*Dir, error) {
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
	d := &Dir{dir: dir, dirFile: df}
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
	path string
	// mu: read side for same-epoch writers of this process, write side for
	// reloading and raising.
	mu sync.RWMutex

	// fmu guards f, nshared, buf and the shared flock on f.
	fmu     sync.Mutex
	f       *os.File // the fence file as this process last opened it
	nshared int      // this process's writers inside the shared flock
	buf     []byte   // scratch for reading f under fmu

	// The fields below change only under mu held for writing.
	//
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

func (d *Dir) entry(resource string) *dirEntry {
	if v, ok := d.entries.Load(resource); ok {
		return v.(*dirEntry)
	}
	e := &dirEntry{path: filepath.Join(d.dir, dirFileName(resource))}
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

// acquireShared joins this process's shared flock on the fence file. It
// reports false (holding nothing) when the cached file is gone or was
// replaced, so the caller must reload under the exclusive path.
func (e *dirEntry) acquireShared() (bool, error) {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	if e.nshared > 0 {
		e.nshared++
		return true, nil
	}
	if e.f == nil {
		return false, nil
	}
	if err := flock(e.f, syscall.LOCK_SH); err != nil {
		return false, fmt.Errorf("storageguard: lock fence file: %w", err)
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
		flock(e.f, syscall.LOCK_UN)
		return false, fmt.Errorf("storageguard: read fence file %s: %w", e.path, err)
	}
	if !bytes.Equal(e.buf[:n], e.raw) {
		flock(e.f, syscall.LOCK_UN)
		return false, nil
	}
	e.nshared = 1
	return true, nil
}

func (e *dirEntry) releaseShared() {
	e.fmu.Lock()
	defer e.fmu.Unlock()
	e.nshared--
	if e.nshared == 0 {
		flock(e.f, syscall.LOCK_UN)
	}
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
		err = d.lockExclusive(e)
		if err == nil {
			var dec Decision
			dec, err = Decide(resource, e.highest, ep)
			if err == nil && dec.Raise {
				err = d.raise(e, ep) // unlocks on success
			}
			if (err != nil || !dec.Raise) && e.f != nil {
				flock(e.f, syscall.LOCK_UN)
			}
		}
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
	ok, err := e.acquireShared()
	if err != nil || !ok {
		return err != nil, err
	}
	defer e.releaseShared()
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
// lock, so it sees raises by other processes.
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
		ok, err := v.acquireShared()
		if err != nil {
			v.mu.RUnlock()
			return epoch.Epoch{}, err
		}
		if ok {
			h := v.highest
			v.releaseShared()
			v.mu.RUnlock()
			return h, nil
		}
		v.mu.RUnlock()
		v.mu.Lock()
		err = d.lockExclusive(v)
		if err == nil {
			flock(v.f, syscall.LOCK_UN)
		}
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
// then closes every file. Later calls fail with ErrClosed.
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
		e.closeFile()
		e.fmu.Unlock()
		return true
	})
	return d.dirFile.Close()
}
