//go:build unix && !aix

package dirfence_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/termfence/termfence/storageguard/dirfence"
)

// TestOpenRefusesSharedDirectory: a directory holding the application's
// own files is refused with ErrNotOwnDirectory and left untouched; the
// fence's own files, an empty directory and a filesystem root's
// lost+found are accepted.
func TestOpenRefusesSharedDirectory(t *testing.T) {
	dir := t.TempDir()
	f, err := dirfence.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(t.Context(), "accounts/1", ep(7, "n1")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err = dirfence.Open(dir) // its own files: reopened
	if err != nil {
		t.Fatalf("reopening the fence's own directory: %v", err)
	}
	f.Close()

	data := filepath.Join(dir, "accounts.db")
	if err := os.WriteFile(data, []byte("the application's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(dir)
	if _, err := dirfence.Open(dir); !errors.Is(err, dirfence.ErrNotOwnDirectory) {
		t.Fatalf("Open of a directory holding accounts.db: %v, want ErrNotOwnDirectory", err)
	}
	after, _ := os.ReadDir(dir)
	if len(after) != len(before) {
		t.Fatalf("a refused Open changed the directory: %d entries before, %d after", len(before), len(after))
	}
}
