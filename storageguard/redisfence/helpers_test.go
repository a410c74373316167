package redisfence_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/redisserver"
	"github.com/termfence/termfence/storageguard/redisfence"
)

// testKey is the cluster "payments"'s HMAC key in these tests.
var testKey = []byte("redisfence-test-key-of-32-bytes!")

func ep(term uint64, leader string) epoch.Epoch {
	return epoch.Epoch{Cluster: "payments", Term: term, Leader: leader}
}

// sign signs e with testKey.
func sign(t testing.TB, e epoch.Epoch) string {
	t.Helper()
	c, err := epoch.NewHMAC(testKey)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Sign(e)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// server is a redis-server for one test and a client of its default
// (administrative) user.
type server struct {
	*redisserver.Server
	admin *redis.Client
	// durable is the client Open checks durability with (nil: admin).
	durable redis.UniversalClient
	// onStart, if set, runs after each restart.
	onStart func()
}

// fakeDurable is a second redis-server, durable, whose only use is to
// make Open's check pass for a control test of a server that is not.
func fakeDurable(t testing.TB) *redis.Client {
	t.Helper()
	s := redisserver.ForTest(t)
	return client(t, s.Addr, "", "")
}

func newServer(t testing.TB, args ...string) *server {
	t.Helper()
	s := redisserver.ForTest(t, args...)
	return &server{Server: s, admin: client(t, s.Addr, "", "")}
}

// client connects to addr as user (the default user if ""), closed when
// t ends. It never retries: a test sees every failure.
func client(t testing.TB, addr, user, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: user, Password: password,
		MaxRetries: -1, DialTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		DisableIdentity: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// install installs cfg (cluster payments with testKey when empty).
func (s *server) install(t testing.TB, cfg redisfence.Config) {
	t.Helper()
	if cfg.Cluster == "" {
		cfg.Cluster = "payments"
	}
	if cfg.HMACKey == nil && cfg.HMACKeys == nil {
		cfg.HMACKey = testKey
	}
	if err := redisfence.Install(context.Background(), s.admin, cfg); err != nil {
		t.Fatal(err)
	}
}

// open installs the default library and opens a fence on the admin
// client.
func (s *server) open(t testing.TB) *redisfence.Fence {
	t.Helper()
	s.install(t, redisfence.Config{})
	f, err := redisfence.Open(context.Background(), s.admin, redisfence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type vectorResult struct {
	Epoch *struct{ Cluster, Term, Leader string } `json:"epoch"`
	Error string                                  `json:"error"`
}

type tokenVector struct {
	Name  string       `json:"name"`
	Hex   string       `json:"hex"`
	HS256 vectorResult `json:"hs256"`
}

type vectorFile struct {
	Keys struct {
		HS256       string `json:"hs256"`
		HS256KeyIDs []struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		} `json:"hs256_key_ids"`
	} `json:"keys"`
	Tokens []tokenVector `json:"tokens"`
}

// vectors reads docs/token-vectors.json and returns it with its keys as a
// Config (no cluster) and as package epoch's verifier.
func vectors(t testing.TB) (vectorFile, redisfence.Config, epoch.Verifier) {
	t.Helper()
	b, err := os.ReadFile("../../docs/token-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	unhex := func(s string) []byte {
		k, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	cfg := redisfence.Config{HMACKey: unhex(f.Keys.HS256), HMACKeys: map[string][]byte{}}
	keys := []epoch.HMACKey{{Secret: cfg.HMACKey}}
	for _, k := range f.Keys.HS256KeyIDs {
		cfg.HMACKeys[k.ID] = unhex(k.Key)
		keys = append(keys, epoch.HMACKey{ID: k.ID, Secret: unhex(k.Key)})
	}
	if len(f.Tokens) == 0 || len(cfg.HMACKeys) == 0 {
		t.Fatal("the vectors have no tokens or no keys with IDs")
	}
	v, err := epoch.NewHMACVerifier(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return f, cfg, v
}

func redisLibQuery() redis.FunctionListQuery {
	return redis.FunctionListQuery{LibraryNamePattern: redisfence.DefaultLibrary, WithCode: true}
}
