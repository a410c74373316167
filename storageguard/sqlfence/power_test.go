//go:build linux

package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/fencetest"
	"github.com/termfence/termfence/storageguard/fencetest/powerfs"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// sqlitePowerModes are the journal modes and synchronous levels under which
// sqlfence accepts a raise on SQLite.
var sqlitePowerModes = []string{
	"wal-full", "wal-extra", "truncate-full", "truncate-extra",
	"persist-full", "persist-extra", "delete-extra",
}

// TestSQLitePowerLoss: in every journal mode and synchronous level that
// sqlfence accepts for a raise, a process raising through a SQLite file
// loses no acknowledged raise to a power cut (fencetest.PowerLoss on
// powerfs).
func TestSQLitePowerLoss(t *testing.T) {
	for _, mode := range sqlitePowerModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			disk := powerfs.MountTest(t, powerfs.Options{})
			fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, Variant: mode})
		})
	}
}

// TestSQLitePowerLossControl: journal_mode DELETE at synchronous FULL,
// which sqlfence accepted before and now refuses, with that refusal
// switched off (the test-only knob SkipDurableCheck): the commit's journal
// unlink is never synced, a cut brings the journal back, and PowerLoss
// must catch the acknowledged raise rolled back.
func TestSQLitePowerLossControl(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLossControl(t, durable, disk, fencetest.PowerOptions{Variant: "delete-full-nocheck"})
}

// TestSQLiteUndurableJournalRefused: in the journal modes whose commit a
// power cut can take back, Open itself refuses the database
// (ErrNotDurable) and creates nothing; a fence opened anyway (the test-only
// OpenUnchecked, with its check then switched back on) refuses the raise.
func TestSQLiteUndurableJournalRefused(t *testing.T) {
	for _, mode := range []string{"delete-full", "memory-full", "memory-extra", "off-full", "off-extra"} {
		t.Run(mode, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "fence.db")
			m, l, _ := cutDash(mode)
			db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(20000)&_pragma=journal_mode("+m+")&_pragma=synchronous("+l+")")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ctx := context.Background()
			if f, err := sqlfence.Open(ctx, db, sqlfence.SQLite); !errors.Is(err, sqlfence.ErrNotDurable) {
				if f != nil {
					f.Close()
				}
				t.Fatalf("Open in %s = %v, want ErrNotDurable", mode, err)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'termfence_fence'").Scan(&n); err != nil || n != 0 {
				t.Fatalf("a refused Open left %d fence tables (%v)", n, err)
			}
			f, err := sqlfence.OpenUnchecked(ctx, db, sqlfence.SQLite)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			sqlfence.RecheckDurable(f)
			if err := f.Admit(ctx, "r", ep(3, "a")); !errors.Is(err, sqlfence.ErrNotDurable) {
				t.Fatalf("raise in %s = %v, want ErrNotDurable", mode, err)
			}
			if h, err := f.Highest(ctx, "r"); err != nil || !h.IsZero() {
				t.Fatalf("Highest = %v, %v after a refused raise", h, err)
			}
		})
	}
}

func cutDash(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// TestSQLitePowerLossNewDirectory: a SQLite database in directories the
// application has just created (os.MkdirAll, which syncs nothing) loses
// no acknowledged raise to a power cut. SQLite syncs the directory of a
// journal or WAL it creates, never the database file's own name nor any
// parent: before Open synced the database's path, the cut took the
// directories back, and the database with every raise in it.
func TestSQLitePowerLossNewDirectory(t *testing.T) {
	for _, mode := range []string{"wal-full", "delete-extra"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			disk := powerfs.MountTest(t, powerfs.Options{})
			fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 3, Variant: mode, Path: "app/state/fence.db"})
		})
	}
}

// TestSQLitePowerLossSearch: power cuts over the directory states a
// SQLite database can start in (fencetest.PowerOptions.SearchPaths).
func TestSQLitePowerLossSearch(t *testing.T) {
	t.Parallel()
	disk := powerfs.MountTest(t, powerfs.Options{})
	fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, Variant: "wal-full", SearchPaths: true})
}

// TestSQLitePowerLossPeers: a second handle on the database writes beside
// the raisers, through a fence of its own, with other settings. At
// synchronous=NORMAL in WAL (checkpoints synced) no acknowledged raise is
// lost. At OFF its transactions are refused (ErrNotDurable): before they
// were, its checkpoints wrote the raises' pages into the database
// unsynced and its next commit reused the WAL over the frames that held
// them, and a torn cut could lose an acknowledged raise.
func TestSQLitePowerLossPeers(t *testing.T) {
	for _, peer := range []string{"normal", "off"} {
		t.Run(peer, func(t *testing.T) {
			t.Parallel()
			disk := powerfs.MountTest(t, powerfs.Options{})
			fencetest.PowerLoss(t, durable, disk, fencetest.PowerOptions{Rounds: 4, Variant: "wal-full+peer-" + peer})
		})
	}
}
