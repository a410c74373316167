package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// The seed's scenario with the check inside the application's own
// transaction: node-a (term 33) is paused, node-b (term 34) writes, and
// node-a's late write is refused and never commits.
func Example() {
	dir, err := os.MkdirTemp("", "fence")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	f, err := sqlfence.Open(ctx, db, sqlfence.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	if _, err := db.Exec("CREATE TABLE files (id TEXT PRIMARY KEY, content TEXT NOT NULL)"); err != nil {
		fmt.Println(err)
		return
	}
	write := func(e epoch.Epoch, content string) error {
		return f.Tx(ctx, "files/report", e, func(tx *sql.Tx) error {
			_, err := tx.Exec("INSERT INTO files VALUES ('report', ?) ON CONFLICT (id) DO UPDATE SET content = excluded.content", content)
			return err
		})
	}
	a := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	b := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	fmt.Println(write(a, "from a"))
	fmt.Println(write(b, "from b"))
	err = write(a, "late write from a")
	fmt.Println(errors.Is(err, storageguard.ErrStale))
	var content string
	_ = db.QueryRow("SELECT content FROM files WHERE id = 'report'").Scan(&content)
	fmt.Println(content)
	// Output:
	// <nil>
	// <nil>
	// true
	// from b
}
