package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
)

// Power cuts (Config.PowerLoss): each node's data directory, and the
// directory of the store's data, is the mount point of a powerfs disk of
// its own. A power cut there ends the process and drops everything it did
// not sync (half the cuts tear: some unsynced blocks and entries survive);
// the process is restarted on what survived. The checker is the same: a
// node whose term or vote went back could let a stale leader's write in,
// and a store that lost an acknowledged write or raise shows as lost or
// stale.

// storeDataDir is the directory the store's data lives in.
func storeDataDir(cfg Config) string {
	if cfg.PowerLoss {
		return filepath.Join(cfg.Dir, "storedisk")
	}
	return cfg.Dir
}

// mountDisks mounts the disks, in PowerLoss mode.
func (c *cluster) mountDisks() error {
	if !c.cfg.PowerLoss {
		return nil
	}
	c.disks = map[string]*powerfs.Disk{}
	mount := func(key, dir string) error {
		d, err := powerfs.Mount(dir, powerfs.Options{Seed: uint64(c.cfg.Seed) + uint64(len(c.disks))})
		if err != nil {
			c.unmountDisks()
			return fmt.Errorf("chaos: power-loss disk for %s: %w", key, err)
		}
		c.disks[key] = d
		return nil
	}
	for _, n := range c.nodes {
		if err := mount(n.id, filepath.Join(c.cfg.Dir, n.id)); err != nil {
			return err
		}
	}
	if c.cfg.Backend != "postgres" {
		return mount("store", storeDataDir(c.cfg))
	}
	return nil
}

// unmountDisks unmounts them (their processes are gone by then).
func (c *cluster) unmountDisks() {
	for k, d := range c.disks {
		if err := d.Unmount(); err != nil {
			fmt.Fprintf(c.cfg.Log, "chaos: unmount %s: %v\n", k, err)
		}
	}
	c.disks = nil
}

// cut cuts the power of the disk key and reaps p, which the cut ended.
func (n *nemesis) cut(key string, p *proc) (string, error) {
	torn := n.rng.Intn(2) == 0
	st, err := n.c.disks[key].Cut(powerfs.CutOptions{Torn: torn})
	p.kill() // reaps it (the cut has killed it)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("torn %t, %d unsynced files, %d unsynced entries, %d processes ended", torn, st.LostFiles, st.LostEntries, st.Killed), nil
}

// powerCutNode cuts the power under node i (often the leader, or a node
// that has just voted), keeps it down for d and restarts it on what its
// disk kept.
func (n *nemesis) powerCutNode(ctx context.Context, i int, d time.Duration) error {
	if li, _ := n.w.leader(); li >= 0 && n.rng.Intn(2) == 0 {
		i = li
	}
	nd := n.c.nodes[i]
	lead, _ := n.w.leader()
	what, err := n.cut(nd.id, nd.proc)
	if err != nil {
		return err
	}
	n.logf("fault %d: power cut under %s (leader: %t; %s), down %v", n.faults+1, nd.id, lead == i, what, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	if ctx.Err() != nil {
		return nil
	}
	return n.c.startNode(ctx, i)
}

// powerCutStore cuts the power under the store, keeps it down for d and
// restarts it on what its disk kept.
func (n *nemesis) powerCutStore(ctx context.Context, d time.Duration) error {
	from := n.w.rec.Now()
	what, err := n.cut("store", n.c.store)
	if err != nil {
		return err
	}
	dead := n.w.rec.Now()
	n.logf("fault %d: power cut under the store (%s), down %v", n.faults+1, what, d.Round(time.Millisecond))
	sleepCtx(ctx, d)
	n.c.noteStoreDead(dead, n.w.rec.Now())
	err = n.c.startStore(context.WithoutCancel(ctx))
	n.c.noteStoreDown(from, n.w.rec.Now())
	return err
}
