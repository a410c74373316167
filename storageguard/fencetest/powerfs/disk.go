package powerfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable is returned by Available and Mount where a FUSE
// filesystem cannot be mounted: no /dev/fuse, or not root.
var ErrUnavailable = errors.New("powerfs: FUSE mounts are not available")

// ErrBusy is returned by Cut and Unmount when the calling process itself
// has a file open (or mapped, or its working directory) on the mount: a
// cut ends every process on the mount, and it cannot end its caller.
var ErrBusy = errors.New("powerfs: the calling process has a file open on the mount")

// ErrUnmounted is returned by Cut after Unmount.
var ErrUnmounted = errors.New("powerfs: not mounted")

// Available reports whether Mount can work here: nil, or an error wrapping
// ErrUnavailable that says why not.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (mount(2) without fusermount)", ErrUnavailable)
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	f.Close()
	return nil
}

// Options configures a Disk. The zero value is a disk that loses
// everything not synced at a cut, with random choices seeded from the
// clock.
type Options struct {
	// Seed seeds the random choices of torn cuts and failed syncs; zero
	// means the current time. The seed used is in Disk.Seed.
	Seed uint64
}

// Disk is a mounted power-loss filesystem. Its methods are safe for
// concurrent use.
type Disk struct {
	dir  string
	seed uint64

	cutMu  sync.Mutex // serialises Cut and Unmount
	server *fuse.Server

	mu      sync.Mutex // guards the model and everything below
	m       *model
	rng     *rand.Rand
	fail    []string // paths (relative to dir, "" for any) whose next sync fails
	delay   func() time.Duration
	tracked map[int]bool
	stats   Stats
}

// Stats counts what a Disk has done since it was mounted.
type Stats struct {
	Syncs       int // fsync and fdatasync calls, files and directories
	FailedSyncs int // of those, failed with EIO (FailSync)
	Cuts        int
	Last        CutStats // the last cut's
}

// Mount mounts a new, empty power-loss filesystem at dir (created if
// missing, and it must be empty). Everything on it lives in this
// process's memory: what programs on the mount see, and the "disk" that
// only syncs reach and that is all that survives Cut.
func Mount(dir string, opts Options) (*Disk, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("powerfs: create mount point: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	d := &Disk{dir: abs, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), m: newModel(), tracked: map[int]bool{}}
	if err := d.mount(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Disk) mount() error {
	zero := time.Duration(0)
	root := &node{d: d, m: d.m, in: d.m.root}
	// go-fuse opens a file on the new mount without O_CLOEXEC (its poll
	// hack) and closes it again: a process forked meanwhile, by any
	// goroutine, would inherit it and, holding a file on this disk, die at
	// its next cut. Hold forks off while mounting, as code that opens
	// descriptors without O_CLOEXEC must (syscall.ForkLock).
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	srv, err := fs.Mount(d.dir, root, &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			DirectMountStrict: true,
			FsName:            "powerfs",
			Name:              "powerfs",
			DisableXAttrs:     true,
			MaxBackground:     64,
		},
	})
	if err != nil {
		return fmt.Errorf("powerfs: mount %s: %w", d.dir, err)
	}
	d.server = srv
	return nil
}

// Dir is the mount point.
func (d *Disk) Dir() string { return d.dir }

// Seed is the seed of the disk's random choices, for reproducing a run.
func (d *Disk) Seed() uint64 { return d.seed }

// Stats returns the counts so far.
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Track names a process that Cut must end even if it has nothing open on
// the mount yet (a child started to work on it). Processes with a file
// open, mapped, or their working directory on the mount are found by
// themselves.
func (d *Disk) Track(pid int) {
	d.mu.Lock()
	d.tracked[pid] = true
	d.mu.Unlock()
}

// FailSync makes the next fsync or fdatasync of the file or directory at
// rel (relative to the mount point; "" for whatever is synced next) fail
// with EIO. What it would have written reaches the disk or not, block by
// block at random, and is then treated as written: the data stays
// readable, and a later sync that succeeds does not write it again (Linux
// since 4.13; the "fsyncgate" case). Each call arms one failure.
func (d *Disk) FailSync(rel string) {
	d.mu.Lock()
	d.fail = append(d.fail, filepath.Clean("/"+rel))
	d.mu.Unlock()
}

// FailNextSync is FailSync(""): the next sync of anything fails.
func (d *Disk) FailNextSync() { d.FailSync("") }

// PowerCut is Cut with Torn set as torn, without the counts; with
// FailNextSync it makes a Disk a fencetest.PowerDisk.
func (d *Disk) PowerCut(torn bool) error {
	_, err := d.Cut(CutOptions{Torn: torn})
	return err
}

// takeFailure reports whether a sync of in must fail now, consuming the
// armed failure. Caller holds d.mu.
func (d *Disk) takeFailure(in *inode) bool {
	if len(d.fail) == 0 {
		return false
	}
	p := d.pathOf(in)
	for i, f := range d.fail {
		if f == "/" || f == p {
			d.fail = append(d.fail[:i], d.fail[i+1:]...)
			return true
		}
	}
	return false
}

// pathOf finds in's path from the root ("/a/b"), or "" if it has none.
// Caller holds d.mu.
func (d *Disk) pathOf(in *inode) string {
	var walk func(dir *inode, prefix string) string
	walk = func(dir *inode, prefix string) string {
		for k, c := range dir.kids {
			p := prefix + "/" + k
			if c == in {
				return p
			}
			if c.isDir() {
				if r := walk(c, p); r != "" {
					return r
				}
			}
		}
		return ""
	}
	if in == d.m.root {
		return "/"
	}
	return walk(d.m.root, "")
}

// SetSyncDelay makes every fsync and fdatasync wait f() before it does
// anything (a slow disk); nil removes the delay. The wait does not hold up
// other operations.
func (d *Disk) SetSyncDelay(f func() time.Duration) {
	d.mu.Lock()
	d.delay = f
	d.mu.Unlock()
}

func (d *Disk) syncDelay() time.Duration {
	d.mu.Lock()
	f := d.delay
	d.mu.Unlock()
	if f == nil {
		return 0
	}
	return f()
}

// CutOptions says how a power cut goes.
type CutOptions struct {
	// Torn: each block of an unsynced write (512 bytes), each unsynced size
	// change and each unsynced directory entry change survives or not at
	// random, as a disk that wrote back part of its cache before the power
	// went. Without it, everything not synced is lost.
	Torn bool
}

// Cut cuts the power: from this instant nothing more reaches the disk and
// every operation on the mount fails with EIO; every process with a file
// open, mapped or its working directory on the mount, and every tracked
// process, is sent SIGKILL and waited for (until it has exited: a child
// of the caller is left for the caller to reap); everything not synced is
// dropped (or, with Torn, partly kept); and the disk is mounted again at
// the same place, holding exactly what survived. It fails with ErrBusy,
// cutting nothing, if the calling process has a file open on the mount.
func (d *Disk) Cut(opts CutOptions) (CutStats, error) {
	d.cutMu.Lock()
	defer d.cutMu.Unlock()
	if d.server == nil {
		return CutStats{}, ErrUnmounted
	}
	if err := d.selfBusy(); err != nil {
		return CutStats{}, err
	}
	var st CutStats
	d.mu.Lock()
	old := d.m
	old.dead = true // the instant of the cut
	next := old.cut(opts.Torn, d.rng, &st)
	tracked := d.tracked
	d.tracked = map[int]bool{}
	d.mu.Unlock()

	st.Killed = d.killUsers(tracked)
	if err := d.unmount(); err != nil {
		return st, err
	}
	d.mu.Lock()
	d.m = next
	d.fail = nil
	d.stats.Cuts++
	d.stats.Last = st
	d.mu.Unlock()
	if err := d.mount(); err != nil {
		return st, err
	}
	return st, nil
}

// Unmount ends every process on the mount (as Cut does) and unmounts it.
// What was synced is not kept anywhere: the disk is gone. It fails with
// ErrBusy if the calling process has a file open on the mount.
func (d *Disk) Unmount() error {
	d.cutMu.Lock()
	defer d.cutMu.Unlock()
	if d.server == nil {
		return nil
	}
	if err := d.selfBusy(); err != nil {
		return err
	}
	d.mu.Lock()
	d.m.dead = true
	tracked := d.tracked
	d.tracked = map[int]bool{}
	d.mu.Unlock()
	d.killUsers(tracked)
	return d.unmount()
}

// unmount unmounts the disk once killUsers has ended its users. A process
// the kernel has not finished tearing down, or one that began using the
// mount after the last look, makes the kernel answer EBUSY: its users are
// ended again and the unmount retried, a bounded number of times, and a
// final failure names who still uses the mount.
func (d *Disk) unmount() error {
	srv := d.server
	var err error
	for range 10 {
		if err = srv.Unmount(); err == nil {
			srv.Wait()
			d.server = nil
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		d.killUsers(nil)
	}
	return fmt.Errorf("powerfs: unmount %s (used by %v): %w", d.dir, d.users(), err)
}

// users lists the processes other than this one that use the mount.
func (d *Disk) users() []int {
	var pids []int
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != self && uses(e.Name(), d.dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// selfBusy fails if this process uses the mount.
func (d *Disk) selfBusy() error {
	if uses(strconv.Itoa(os.Getpid()), d.dir) {
		return fmt.Errorf("%w %s", ErrBusy, d.dir)
	}
	return nil
}

// killUsers sends SIGKILL to every other process that uses the mount and to
// the tracked ones, and waits until each has exited. It returns how many
// it ended.
func (d *Disk) killUsers(tracked map[int]bool) int {
	self := os.Getpid()
	victims := map[int]bool{}
	for pid := range tracked {
		if pid != self && alive(pid) {
			victims[pid] = true
		}
	}
	// Processes can start using the mount while we look (a child that was
	// just forked): look until a pass finds nobody new.
	for {
		found := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || victims[pid] {
				continue
			}
			if uses(e.Name(), d.dir) {
				victims[pid] = true
				found = true
			}
		}
		for pid := range victims {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if !found {
			break
		}
	}
	for pid := range victims {
		for alive(pid) {
			time.Sleep(time.Millisecond)
		}
	}
	return len(victims)
}

// alive reports whether pid exists and any of its threads is neither a
// zombie nor dead. A process whose main thread has exited is a zombie by
// its own /proc/<pid>/stat while its other threads still run and still
// hold its open files (the file table goes with the last thread), so every
// thread is asked.
func alive(pid int) bool {
	base := "/proc/" + strconv.Itoa(pid)
	tasks, err := os.ReadDir(base + "/task")
	if err != nil {
		return statAlive(base + "/stat")
	}
	for _, t := range tasks {
		if statAlive(base + "/task/" + t.Name() + "/stat") {
			return true
		}
	}
	return false
}

// statAlive reports whether the stat file at path names a state other
// than zombie or dead.
func statAlive(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X' && st != 'x'
}

// uses reports whether the process pid has its working directory, an open
// file or a mapped file under dir. Each thread is asked too: once the main
// thread has exited, its own entries are empty while the others still hold
// the files.
func uses(pid, dir string) bool {
	base := "/proc/" + pid
	if usesAt(base, dir) {
		return true
	}
	tasks, _ := os.ReadDir(base + "/task")
	for _, t := range tasks {
		if t.Name() != pid && usesAt(base+"/task/"+t.Name(), dir) {
			return true
		}
	}
	return false
}

// usesAt looks at one /proc entry, a process's or a thread's.
func usesAt(base, dir string) bool {
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	if p, err := os.Readlink(base + "/cwd"); err == nil && under(p) {
		return true
	}
	fds, _ := os.ReadDir(base + "/fd")
	for _, fd := range fds {
		if p, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && under(strings.TrimSuffix(p, " (deleted)")) {
			return true
		}
	}
	if b, err := os.ReadFile(base + "/maps"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.IndexByte(line, '/'); i >= 0 && under(strings.TrimSuffix(line[i:], " (deleted)")) {
				return true
			}
		}
	}
	return false
}
