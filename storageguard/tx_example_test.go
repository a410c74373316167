package storageguard_test

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

// A storage owner's side of the seed's scenario with tokens from the
// wire: the guard verifies each token, and Tx runs the application's own
// SQL in the fence's transaction under the token's epoch, so the check,
// the raise and the write commit together. node-a's late write with token
// 33 is refused after node-b's with 34, and a forged token never reaches
// the database.
func ExampleTx() {
	dir, _ := os.MkdirTemp("", "tx")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
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
	if _, err := db.Exec("CREATE TABLE balance (account TEXT PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		fmt.Println(err)
		return
	}
	codec, _ := epoch.NewHMAC([]byte("0123456789abcdef0123456789abcdef"))
	g := storageguard.NewGuard(f, storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	write := func(token string, amount int) error {
		return storageguard.Tx(ctx, g, "accounts/7", token, func(tx *sql.Tx, ep epoch.Epoch) error {
			_, err := tx.Exec("INSERT INTO balance VALUES ('7', ?) ON CONFLICT (account) DO UPDATE SET amount = excluded.amount", amount)
			return err
		})
	}
	t33, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"})
	t34, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})
	fmt.Println(write(t33, 100))
	fmt.Println(write(t34, 250))
	fmt.Println(errors.Is(write(t33, 0), storageguard.ErrStale))
	fmt.Println(errors.Is(write("payments/99/mallory", 0), storageguard.ErrUnauthenticated))
	var amount int
	_ = db.QueryRow("SELECT amount FROM balance WHERE account = '7'").Scan(&amount)
	fmt.Println(amount)
	// Output:
	// <nil>
	// <nil>
	// true
	// true
	// 250
}
