package redisfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Install loads the fence library for cfg into the server behind admin
// (FUNCTION LOAD REPLACE), replacing a library of the same name: run it
// again to change the keys (rotation) or the cluster. On a Redis Cluster
// client it loads the library on every master. admin must be allowed
// FUNCTION LOAD; the leaders' user must not be (LeaderUser).
//
// The library holds, in its code, values derived from the HMAC keys that
// are as good as the keys for signing tokens: anyone who may run
// FUNCTION LIST WITHCODE or FUNCTION DUMP, or read the server's RDB and
// AOF files, can sign tokens.
func Install(ctx context.Context, admin redis.UniversalClient, cfg Config) error {
	if admin == nil {
		return errors.New("redisfence: Install: nil client")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	code, err := libraryCode(cfg)
	if err != nil {
		return err
	}
	load := func(ctx context.Context, c redis.Cmdable) error {
		if err := c.FunctionLoadReplace(ctx, code).Err(); err != nil {
			return fmt.Errorf("redisfence: FUNCTION LOAD of library %q: %w", cfg.library(), err)
		}
		return nil
	}
	if cc, ok := admin.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	}
	return load(ctx, admin)
}
