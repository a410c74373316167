//go:build unix && !aix

package dirfence

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/termfence/termfence/epoch"
)

// let a crash of the machine take back what was already admitted.
func (d *Fence) load(e *entry) error {
	b := make([]byte, fileSize)
	n, err := e.f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return fmt.Errorf("dirfence: read fence file %s: %w", e.path, err)
	}
	b = b[:n]
	if e.raw != nil && bytes.Equal(b, e.raw) {
		return nil
	}
	h, seq, slot, err := decodeFence(b)
	if err != nil {
		return fmt.Errorf("dirfence: fence file %s is corrupt: %w", e.path, err)
	}
	if len(b) > 0 {
		if err := d.syncUnless(skipLoadData, e.f, syncData); err != nil {
			// Never trust what a failed sync covered: the next caller opens
			// the file again (a descriptor that saw a write-back error may
			// not report it twice) and syncs before it reads anything in.
			flock(e.f, unix.LOCK_UN)
			e.closeFile()
			return fmt.Errorf("dirfence: sync fence file %s: %w", e.path, err)
		}
		if !e.synced {
			if err := d.syncUnless(skipLoadDir, d.dirFile, syncDir); err != nil {
				e.closeFile()
				return fmt.Errorf("dirfence: sync fence dir: %w", err)
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
	if len(rec) > maxRecord {
		return nil, fmt.Errorf("dirfence: epoch record of %d bytes does not fit a fence slot", len(rec))
	}
	b := make([]byte, slotSize)
	copy(b, magic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint16(b[12:], uint16(len(rec)))
	copy(b[headerLen:], rec)
	binary.BigEndian.PutUint32(b[slotSize-4:], crc32.Checksum(b[:slotSize-4], crc32c))
	return b, nil
}

// decodeSlot decodes one slot; ok is false for a slot that is missing,
// torn or never written.
func decodeSlot(b []byte) (ep epoch.Epoch, seq uint64, ok bool) {
	if len(b) < slotSize || string(b[:4]) != magic {
		return epoch.Epoch{}, 0, false
	}
	if binary.BigEndian.Uint32(b[slotSize-4:]) != crc32.Checksum(b[:slotSize-4], crc32c) {
		return epoch.Epoch{}, 0, false
	}
	n := int(binary.BigEndian.Uint16(b[12:]))
	if n > maxRecord || ep.UnmarshalBinary(b[headerLen:headerLen+n]) != nil {
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
		off := i * slotStride
		if off >= len(b) {
			break
		}
		if ep, s, ok := decodeSlot(b[off:min(off+slotSize, len(b))]); ok && (slot < 0 || s > seq) {
			h, seq, slot = ep, s, i
		}
	}
	if slot < 0 {
		return epoch.Epoch{}, 0, -1, errors.New("no valid record")
	}
	return h, seq, slot, nil
}

// raise durably records ep as the highest. Caller holds e.g exclusively
// and the exclusive flock on e.f, which is loaded. On return this process
// holds no flock.
func (d *Fence) raise(e *entry, ep epoch.Epoch) error {
	slotBytes, err := encodeSlot(ep, e.seq+1)
	if err != nil {
		return err
	}
	if e.slot < 0 {
		return d.create(e, ep, slotBytes)
	}
	target := 1 - e.slot
	off := int64(target * slotStride)
	if _, err := e.f.WriteAt(slotBytes, off); err != nil {
		d.unraise(e, target)
		return fmt.Errorf("dirfence: raise fence file %s to %s: %w", e.path, ep, err)
	}
	if err := d.syncUnless(skipRaiseData, e.f, syncData); err != nil {
		d.unraise(e, target)
		return fmt.Errorf("dirfence: sync fence file %s after raising to %s: %w", e.path, ep, err)
	}
	if !e.synced {
		// Not reached by the protocol (load syncs the directory before a
		// non-empty file is trusted), kept so a raise is never acknowledged
		// on a link that is not durable.
		if err := d.sync(d.dirFile, syncDir); err != nil {
			d.unraise(e, target)
			return fmt.Errorf("dirfence: sync fence dir: %w", err)
		}
		e.synced = true
	}
	raw := make([]byte, max(len(e.raw), target*slotStride+slotSize))
	copy(raw, e.raw)
	copy(raw[target*slotStride:], slotBytes)
	e.raw, e.highest, e.seq, e.slot = raw, ep, e.seq+1, target
	flock(e.f, unix.LOCK_UN)
	return nil
}

// unraise undoes a raise whose write or sync failed, before anyone can act
// on it. The new record may sit in the page cache although it is not known
// to be on disk (after a failed fsync Linux marks the pages clean and later
// descriptors see no error), and a process that read it there would trust
// it: so, still holding the exclusive flock, it writes back the slot's
// previous bytes (what e.raw holds: an older record, or nothing), syncs
// them as best it can, and closes the descriptor; the next caller opens the
// file again and reads the previous, durable highest. Caller holds e.g
// exclusively and the exclusive flock on e.f; on return e.f is closed, which
// releases the flock.
func (d *Fence) unraise(e *entry, target int) {
	prev := make([]byte, slotSize)
	if off := target * slotStride; off < len(e.raw) {
		copy(prev, e.raw[off:min(off+slotSize, len(e.raw))])
	}
	if _, err := e.f.WriteAt(prev, int64(target*slotStride)); err == nil {
		_ = d.sync(e.f, syncData)
	}
	e.closeFile()
}

// create makes a resource's first fence file: slot 0 holds ep, slot 1 is
// zero. It writes a temporary file, fsyncs it, renames it over the empty
// file that e.f holds locked, and fsyncs the directory, holding the new
// file exclusively until the rename is durable: nobody may act on an epoch
// that a crash could still take back.
func (d *Fence) create(e *entry, ep epoch.Epoch, slotBytes []byte) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := e.name + tempInfix + hex.EncodeToString(rnd[:])
	nf, err := d.openAt(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, d.mode)
	if err != nil {
		return fmt.Errorf("dirfence: create fence temp file: %w", err)
	}
	fail := func(err error) error {
		nf.Close()
		d.unlinkAt(tmp)
		return fmt.Errorf("dirfence: raise fence file %s to %s: %w", e.path, ep, err)
	}
	raw := make([]byte, fileSize)
	copy(raw, slotBytes)
	if _, err := nf.Write(raw); err != nil {
		return fail(err)
	}
	if err := d.sync(nf, syncFile); err != nil {
		return fail(err)
	}
	if err := flock(nf, unix.LOCK_EX); err != nil {
		return fail(err)
	}
	if err := d.renameAt(tmp, e.name); err != nil {
		return fail(err)
	}
	if err := d.sync(d.dirFile, syncDir); err != nil {
		// The rename happened but may not be durable: take it back while
		// both files are still locked, so that nobody acts on an epoch a
		// crash could take back (the resource had no epoch before), and
		// make the caller start over.
		d.unlinkAt(e.name)
		nf.Close()
		e.closeFile()
		return fmt.Errorf("dirfence: fsync fence dir after raising %s to %s: %w", e.path, ep, err)
	}
	e.closeFile() // the old, empty inode: releases our exclusive lock on it
	flock(nf, unix.LOCK_UN)
	e.f = nf
	e.raw, e.highest, e.seq, e.slot, e.synced = raw, ep, e.seq+1, 0, true
	return nil
}

// readFenceFile reads the fence file name under a shared lock (a raise
// rewrites a slot in place), creating nothing.
func (d *Fence) readFenceFile(name string) (epoch.Epoch, error) {
	path := filepath.Join(d.dir, name)
	f, err := d.openAt(name, unix.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return epoch.Epoch{}, nil
	}
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("dirfence: open fence file: %w", err)
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_SH); err != nil {
		return epoch.Epoch{}, fmt.Errorf("dirfence: lock fence file: %w", err)
	}
	b := make([]byte, fileSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return epoch.Epoch{}, fmt.Errorf("dirfence: read fence file %s: %w", path, err)
	}
	h, _, _, err := decodeFence(b[:n])
	if err != nil {
		return epoch.Epoch{}, fmt.Errorf("dirfence: fence file %s is corrupt: %w", path, err)
	}
	return h, nil
}
