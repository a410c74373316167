//go:build unix && !aix

package dirfence

import (
	"context"
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
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/internal/gate"
)

// Fence is a durable storageguard.Fence for a directory that several
// processes, on one machine or on several sharing a disk, guard together.
// Each resource has
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
// finishes, the process keeps the shared flock for a while (Options.Linger
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
// Options.Probe, from its writers or, when it has none, from a timer;
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
// A Fence keeps two open files per resource it has used until Close, and a
// timer per resource whose lock it holds.
type Fence struct {
	dir     string
	dirFile *os.File // fsynced after each rename
	closed  atomic.Bool
	entries sync.Map // resource -> *entry

	linger, probe, tick time.Duration
	t0                  time.Time   // origin of the monotonic clock in entry.probeAt
	mode                os.FileMode // of the files the fence creates

	// syncHook, if set, is called before every sync of the fence (tests
	// count syncs through it, or fail one); its error is the sync's.
	syncHook func(f *os.File, kind syncKind) error
	// skip removes syncs, for the controls of the power-loss tests only
	// (export_test.go): each such test must fail with the sync removed.
	skip skipSyncs

	closeMu  sync.RWMutex
	inflight sync.WaitGroup
}

// Options tunes how long a process keeps a resource's shared lock. The
// zero value gives the defaults.
type Options struct {
	// Linger is how long a process keeps a resource's shared lock after its
	// last write under the current epoch has finished, so that the next
	// write needs no system call. While it lingers, a raise from another
	// process waits up to about Probe. Zero means DefaultLinger.
	Linger time.Duration
	// Probe is how often a process that holds a resource's shared lock
	// checks whether a raise in another process is waiting for it; that
	// raise waits for the writes in flight plus about this long. Zero means
	// DefaultProbe.
	Probe time.Duration
	// FileMode is the permission of the files the fence creates in the
	// directory, and, with search permission added wherever it grants
	// read, of the directory if Open creates it. It must grant the owner
	// read and write. Zero means 0600: a fence file is nobody else's
	// business, and another user who could write it could lower it.
	FileMode os.FileMode
}

// Defaults for Options.
const (
	DefaultLinger = time.Millisecond
	DefaultProbe  = time.Millisecond
)

// Validate reports whether o is usable: no negative duration, a FileMode of
// permission bits that let the owner read and write. The error wraps
// storageguard.ErrBadConfig.
func (o Options) Validate() error {
	if o.Linger < 0 {
		return fmt.Errorf("%w: negative dir linger %v", storageguard.ErrBadConfig, o.Linger)
	}
	if o.Probe < 0 {
		return fmt.Errorf("%w: negative dir probe interval %v", storageguard.ErrBadConfig, o.Probe)
	}
	if o.FileMode != 0 && (o.FileMode&^os.ModePerm != 0 || o.FileMode&0o600 != 0o600) {
		return fmt.Errorf("%w: dir file mode %#o: want permission bits only, owner read and write included", storageguard.ErrBadConfig, uint32(o.FileMode))
	}
	return nil
}

var _ storageguard.Fence = (*Fence)(nil)

const (
	// Fence file layout: slot 0 at offset 0, slot 1 at slotStride, each
	// slotSize bytes: magic, sequence number (big endian), record length
	// (big endian), the epoch's binary form, zero padding, and a CRC-32C
	// (Castagnoli) of everything before it in the slot.
	slotSize   = 512
	slotStride = 4096 // slots on separate pages: a torn page write hits one
	fileSize   = slotStride + slotSize
	magic      = "TFF1"
	headerLen  = 4 + 8 + 2
	maxRecord  = slotSize - headerLen - 4

	fenceSuffix  = ".fence"
	intentSuffix = ".intent" // the intent file: a lock, never written
	tempInfix    = ".tmp-"
	// tempMaxAge: a temporary file older than this was left by a crash
	// (a raise renames its temporary file within one fsync) and is removed
	// by Open.
	tempMaxAge = 10 * time.Minute
	// maxDirect is the longest resource name stored under its own base32
	// encoding; longer names use a SHA-256 of the name.
	maxDirect = 120
)

// Open opens the fence directory dir, creating it if missing, with the
// default Options.
func Open(dir string) (*Fence, error) {
	return OpenWith(dir, Options{})
}

// OpenWith opens the fence directory dir, creating it if missing.
func OpenWith(dir string, opts Options) (*Fence, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	linger, probe := opts.Linger, opts.Probe
	if linger == 0 {
		linger = DefaultLinger
	}
	if probe == 0 {
		probe = DefaultProbe
	}
	mode := opts.FileMode
	if mode == 0 {
		mode = 0o600
	}
	if err := os.MkdirAll(dir, mode|(mode&0o444)>>2); err != nil {
		return nil, fmt.Errorf("dirfence: create fence dir: %w", err)
	}
	if err := syncAncestors(dir); err != nil {
		return nil, err
	}
	df, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("dirfence: open fence dir: %w", err)
	}
	st, err := df.Stat()
	if err != nil || !st.IsDir() {
		df.Close()
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("dirfence: open fence dir %s: %w", dir, err)
	}
	d := &Fence{dir: dir, dirFile: df, linger: linger, probe: probe, tick: min(linger, probe), t0: time.Now(), mode: mode}
	if err := d.checkOwnDir(); err != nil {
		df.Close()
		return nil, err
	}
	d.removeOldTemps()
	return d, nil
}

// ErrNotOwnDirectory is returned by Open and OpenWith for a directory that
// holds files other than the fence's own. The fence directory must be its
// own: Open removes the stale temporary files it finds there, and the
// fence's file names could meet the application's.
var ErrNotOwnDirectory = errors.New("dirfence: the fence directory holds files that are not the fence's")

// checkOwnDir refuses a directory holding anything but fence files: the
// ".fence" and ".intent" files of resources ("r-…" or "h-…") and their
// temporary files, and "lost+found" (a filesystem's root).
func (d *Fence) checkOwnDir() error {
	names, err := d.dirFile.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("dirfence: read fence dir %s: %w", d.dir, err)
	}
	if _, err := d.dirFile.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("dirfence: read fence dir %s: %w", d.dir, err)
	}
	for _, n := range names {
		if !isFenceFile(n) && n != "lost+found" {
			return fmt.Errorf("%w: %s holds %q; give the fence a directory of its own, such as a subdirectory", ErrNotOwnDirectory, d.dir, n)
		}
	}
	return nil
}

// isFenceFile reports whether n is a name the fence creates.
func isFenceFile(n string) bool {
	if !strings.HasPrefix(n, "r-") && !strings.HasPrefix(n, "h-") {
		return false
	}
	if i := strings.Index(n, tempInfix); i >= 0 {
		n = n[:i]
	}
	return strings.HasSuffix(n, fenceSuffix) || strings.HasSuffix(n, intentSuffix)
}

func (d *Fence) removeOldTemps() {
	names, err := d.dirFile.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		if !strings.Contains(n, tempInfix) {
			continue
		}
		if st, err := d.lstatAt(n); err == nil && time.Since(time.Unix(st.Mtim.Unix())) > tempMaxAge {
			d.unlinkAt(n)
		}
	}
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// fileName maps a resource name to its fence file's name: "r-" and the
// lower-case base32 of the name, or "h-" and the hex SHA-256 of long names.
// Neither contains '/' or starts with '.', so no name escapes the directory.
func fileName(resource string) string {
	if len(resource) <= maxDirect {
		return "r-" + strings.ToLower(b32.EncodeToString([]byte(resource))) + fenceSuffix
	}
	sum := sha256.Sum256([]byte(resource))
	return "h-" + hex.EncodeToString(sum[:]) + fenceSuffix
}

// entry is one resource's state in this process.
type entry struct {
	name       string // the fence file's name in the directory
	intentName string // the intent file's name
	path       string // the fence file's path, for messages
	// g: shared side for same-epoch writers of this process (and Highest),
	// exclusive side for reloading and raising. Its waits end with the
	// caller's context; a call nested in a write joins the write's hold.
	g gate.Gate

	// state is the sticky shared flock: stHeld (this process holds the
	// shared flock on f and raw is f's content), stDraining (a raiser
	// waits: admit no one new), stUsed (a writer joined since the last
	// tick) and, from stCountShift up, the writers inside the lock. A
	// writer joins with a compare-and-swap while stHeld is set and
	// stDraining is not: no system call. stHeld is set and cleared only
	// under fmu, and cleared only with no writer inside.
	state atomic.Uint64
	// probeAt: when (Fence.t0-relative nanoseconds) the intent file is next
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

	// The fields below change only under g held exclusively.
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

func (d *Fence) entry(resource string) *entry {
	if v, ok := d.entries.Load(resource); ok {
		return v.(*entry)
	}
	n := fileName(resource)
	e := &entry{name: n, intentName: strings.TrimSuffix(n, fenceSuffix) + intentSuffix, path: filepath.Join(d.dir, n)}
	e.released = sync.NewCond(&e.fmu)
	v, _ := d.entries.LoadOrStore(strings.Clone(resource), e)
	return v.(*entry)
}

func (d *Fence) enter() error {
	d.closeMu.RLock()
	defer d.closeMu.RUnlock()
	if d.closed.Load() {
		return storageguard.ErrClosed
	}
	d.inflight.Add(1)
	return nil
}

// Do implements Fence.Do: the resource's flock is held (shared, or
// exclusive for a raise and then shared) while write runs. The waits in
// this process end with ctx (the wait for another process's flock does
// not). write may call the fence for the same resource with the context it
// was given (or one derived from it): such a call joins write's hold and
// never waits for it, and one that would have to raise returns an error
// matching storageguard.ErrNestedRaise.
func (d *Fence) Do(ctx context.Context, resource string, ep epoch.Epoch, write func(ctx context.Context) error) error {
	if err := storageguard.ValidateResource(resource); err != nil {
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
		done, gen, err := d.fast(ctx, e, resource, ep, write)
		if done || err != nil {
			return err
		}
		// Slow path: reload or raise under the exclusive lock.
		if e.g.Held(ctx) {
			return fmt.Errorf("dirfence: %w: %q to %s", storageguard.ErrNestedRaise, resource, ep)
		}
		locked, err := e.g.Lock(ctx, gen)
		if err != nil {
			return err
		}
		if !locked {
			continue // a raise or reload ended meanwhile: decide again
		}
		err = d.exclusive(e, func() (bool, error) {
			dec, err := storageguard.Decide(resource, e.highest, ep)
			if err != nil || !dec.Raise {
				return false, err
			}
			return true, d.raise(e, ep) // unlocks on success
		})
		e.g.Unlock()
		if err != nil {
			return err
		}
		if write == nil {
			return nil
		}
	}
}

// share takes e's shared side and joins the shared flock: with no wait at
// all when ctx is that of a write of this process on e (its hold lasts, so
// this process holds the flock). It reports false (holding nothing) when
// the caller must reload under the exclusive path. A caller that got true
// must leave and Unshare. gen is e.g's generation as of the shared hold,
// for Lock.
func (d *Fence) share(ctx context.Context, e *entry) (ok bool, gen uint32, err error) {
	gen, err = e.g.Share(ctx)
	if err != nil {
		return false, 0, err
	}
	if e.g.Held(ctx) && e.joinNested() {
		return true, gen, nil
	}
	ok, err = d.acquire(e)
	if err != nil || !ok {
		e.g.Unshare()
	}
	return ok, gen, err
}

// fast tries the shared path: done is true when ep was decided (write ran
// or ep was refused). When it is false, gen is e.g's generation as seen
// under the shared hold, for Lock.
func (d *Fence) fast(ctx context.Context, e *entry, resource string, ep epoch.Epoch, write func(ctx context.Context) error) (done bool, gen uint32, err error) {
	ok, gen, err := d.share(ctx, e)
	if err != nil {
		return true, 0, err
	}
	if !ok {
		return false, gen, nil
	}
	defer e.g.Unshare()
	defer e.leave()
	dec, err := storageguard.Decide(resource, e.highest, ep)
	if err != nil {
		return true, 0, err
	}
	if dec.Raise {
		return false, gen, nil
	}
	if write == nil {
		return true, 0, nil
	}
	if err := ctx.Err(); err != nil {
		return true, 0, err
	}
	return true, 0, e.g.With(ctx, write)
}

// Admit implements Fence.Admit.
func (d *Fence) Admit(ctx context.Context, resource string, ep epoch.Epoch) error {
	return d.Do(ctx, resource, ep, nil)
}

// Check implements Fence.Check.
func (d *Fence) Check(ctx context.Context, resource string, ep epoch.Epoch) error {
	h, err := d.Highest(ctx, resource)
	if err != nil {
		return err
	}
	_, err = storageguard.Decide(resource, h, ep)
	return err
}

// Highest implements Fence.Highest. It reads the fence file under a shared
// lock (or trusts this process's unbroken hold of one), so it sees raises by
// other processes.
func (d *Fence) Highest(ctx context.Context, resource string) (epoch.Epoch, error) {
	if err := storageguard.ValidateResource(resource); err != nil {
		return epoch.Epoch{}, err
	}
	if err := d.enter(); err != nil {
		return epoch.Epoch{}, err
	}
	defer d.inflight.Done()
	if err := ctx.Err(); err != nil {
		return epoch.Epoch{}, err
	}
	var v *entry
	if x, ok := d.entries.Load(resource); ok {
		v = x.(*entry)
	} else {
		// Unknown here: read the file directly, creating nothing.
		return d.readFenceFile(fileName(resource))
	}
	for {
		ok, gen, err := d.share(ctx, v)
		if err != nil {
			return epoch.Epoch{}, err
		}
		if ok {
			h := v.highest
			v.leave()
			v.g.Unshare()
			return h, nil
		}
		if v.g.Held(ctx) {
			return epoch.Epoch{}, fmt.Errorf("dirfence: %w: reload of %q", storageguard.ErrNestedRaise, resource)
		}
		locked, err := v.g.Lock(ctx, gen)
		if err != nil {
			return epoch.Epoch{}, err
		}
		if !locked {
			continue
		}
		err = d.exclusive(v, nil)
		v.g.Unlock()
		if err != nil {
			return epoch.Epoch{}, err
		}
	}
}

// Close waits for calls in progress (their writes still hold the locks),
// then stops the linger timers and closes every file, which drops every
// lock this process holds. Later calls fail with storageguard.ErrClosed.
func (d *Fence) Close() error {
	d.closeMu.Lock()
	already := d.closed.Swap(true)
	d.closeMu.Unlock()
	if already {
		return nil
	}
	d.inflight.Wait()
	d.entries.Range(func(_, v any) bool {
		e := v.(*entry)
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
