//go:build unix

package storageguard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
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
// epoch. A raise writes the new epoch to a temporary file, fsyncs it, holds
// an exclusive lock on it, renames it over the fence file and fsyncs the
// directory; only then does anyone see the new epoch. Within a process the
// same rules hold through a per-resource read-write lock, and one shared
// flock covers all of the process's concurrent same-epoch writers.
//
// Requirements and limits: the filesystem must implement flock(2) between
// all the processes involved (local filesystems do; on NFS, Linux emulates
// flock with byte-range locks, which needs working NFS locking). flock has
// no writer preference, so under unbroken same-epoch traffic from other
// processes a raise can wait. Dir keeps one open file per resource it has
// used until Close. A write under the current epoch reads no file but costs
// three system calls (lock, fstat, unlock).
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

	// fmu guards f, ino, nshared and the shared flock on f.
	fmu     sync.Mutex
	f       *os.File // the fence file as this process last opened it
	nshared int      // this process's writers inside the shared flock
	// highest is f's content; valid while f is still linked at the path
	// (a fence file's content never changes: a raise renames a new file in).
	highest epoch.Epoch
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

// current reports whether e.f is still the fence file: a raise renames a
// new file over it, which unlinks the old inode (link count 0). An inode
// with links is at the fence path: the protocol links a file nowhere else
// once it is open as e.f. fstat needs no path walk.
func (e *dirEntry) current() (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(e.f.Fd()), &st); err != nil {
		return false, fmt.Errorf("storageguard: stat fence file: %w", err)
	}
	return st.Nlink > 0, nil
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
	ok, err := e.current()
	if err != nil || !ok {
		flock(e.f, syscall.LOCK_UN)
		return false, err
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
// none), takes its exclusive flock and reads it. Caller holds e.mu for
// writing, so no writer of this process holds the shared flock.
func (e *dirEntry) lockExclusive() error {
	for {
		if e.f == nil {
			f, err := os.OpenFile(e.path, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("storageguard: open fence file: %w", err)
			}
			e.f = f
			e.highest = epoch.Epoch{}
			if err := e.read(); err != nil {
				e.closeFile()
				return err
			}
		}
		if err := flock(e.f, syscall.LOCK_EX); err != nil {
			return fmt.Errorf("storageguard: lock fence file: %w", err)
		}
		ok, err := e.current()
		if err != nil {
			flock(e.f, syscall.LOCK_UN)
			return err
		}
		if ok {
			return nil
		}
		// Another process renamed a new fence file in: open that one.
		e.closeFile()
	}
}

// read decodes e.f's content into e.highest. An empty file means no epoch.
func (e *dirEntry) read() error {
	b, err := io.ReadAll(io.NewSectionReader(e.f, 0, epoch.MaxTokenLen+1))
	if err != nil {
		return fmt.Errorf("storageguard: read fence file %s: %w", e.path, err)
	}
	if len(b) == 0 {
		e.highest = epoch.Epoch{}
		return nil
	}
	var h epoch.Epoch
	if err := h.UnmarshalText([]byte(strings.TrimSuffix(string(b), "\n"))); err != nil {
		return fmt.Errorf("storageguard: fence file %s is corrupt: %w", e.path, err)
	}
	e.highest = h
	return nil
}

func (e *dirEntry) closeFile() {
	if e.f != nil {
		e.f.Close() // releases any flock held through it
		e.f = nil
	}
}

// raise durably replaces the fence file with one holding ep. Caller holds
// e.mu for writing and the exclusive flock on e.f. On return the new file is
// e.f and this process holds no flock.
func (d *Dir) raise(e *dirEntry, ep epoch.Epoch) error {
	text, err := ep.MarshalText()
	if err != nil {
		return err
	}
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
	if _, err := nf.Write(append(text, '\n')); err != nil {
		return fail(err)
	}
	if err := nf.Sync(); err != nil {
		return fail(err)
	}
	// Hold the new file exclusively until the rename is durable: nobody may
	// act on an epoch that a crash could still take back.
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
	e.closeFile() // the old inode: releases our exclusive lock on it
	flock(nf, syscall.LOCK_UN)
	e.f = nf
	e.highest = ep
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
		err = e.lockExclusive()
		if err == nil {
			var dec Decision
			dec, err = Decide(resource, e.highest, ep)
			if err == nil && dec.Raise {
				err = d.raise(e, ep)
			} else if e.f != nil {
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
		err = v.lockExclusive()
		if err == nil {
			flock(v.f, syscall.LOCK_UN)
		}
		v.mu.Unlock()
		if err != nil {
			return epoch.Epoch{}, err
		}
	}
}

// readFenceFile reads a fence file without locking it: a fence file's
// content never changes in place, so whatever inode the open finds holds a
// complete epoch (or nothing).
func readFenceFile(path string) (epoch.Epoch, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("storageguard: open fence file: %w", err)
	}
	defer f.Close()
	e := dirEntry{path: path, f: f}
	if err := e.read(); err != nil {
		return epoch.Epoch{}, err
	}
	return e.highest, nil
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
