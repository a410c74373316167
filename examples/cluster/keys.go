package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"

	"github.com/termfence/termfence/epoch"
)

// loadCodec returns the token codec shared by the nodes (which sign) and the
// store (which verifies): HMAC-SHA256 with the key in keyFile, or, with no
// key file, unsigned tokens and a warning, since then anyone who can reach
// the store can present any epoch — including a forged huge term that locks
// every real leader out (docs/DESIGN.md I6).
//
// The key is the file's content with surrounding whitespace removed, so both
// raw random bytes and `openssl rand -hex 32` output work; it must be at
// least epoch.MinHMACKeyLen bytes.
func loadCodec(keyFile string, log *slog.Logger) (epoch.Codec, error) {
	if keyFile == "" {
		log.Warn("no -token-key: tokens are NOT signed, so any client can forge an epoch; use a shared key file outside tests")
		return epoch.Plain(), nil
	}
	key, err := readKey(keyFile)
	if err != nil {
		return nil, err
	}
	c, err := epoch.NewHMAC(key)
	if err != nil {
		return nil, fmt.Errorf("token key %s: %w", keyFile, err)
	}
	return c, nil
}

// readKey returns the key in keyFile, as loadCodec uses it.
func readKey(keyFile string) ([]byte, error) {
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return bytes.TrimSpace(raw), nil
}

// newKey returns a fresh random HMAC key, hex-encoded as a key file holds it.
func newKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return fmt.Appendf(nil, "%x\n", b)
}
