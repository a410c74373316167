package redisfence

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/template"

	_ "embed" // the Lua library's source
)

//go:embed fence.lua
var fenceLua string

// Format names the library's protocol (its functions' arguments and
// replies); Open refuses a library of another format.
const Format = "termfence-redis-1"

// digestMark starts the line of the generated code that holds the SHA-256
// of the code after that line, so that Audit can tell a library that was
// edited after Install from one Install loaded.
const digestMark = "-- termfence-digest: "

var libTemplate = template.Must(template.New("fence.lua").Delims("{{", "}}").Parse(fenceLua))

type libKey struct {
	ID           string
	Inner, Outer string // the eight state words, as Lua numbers
}

// libraryCode returns the Lua library that Install loads for c, which must
// be valid.
func libraryCode(c Config) (string, error) {
	var keys []libKey
	add := func(id string, secret []byte) error {
		in, out, err := padStates(secret)
		if err != nil {
			return err
		}
		keys = append(keys, libKey{ID: id, Inner: in, Outer: out})
		return nil
	}
	if c.HMACKey != nil {
		if err := add("", c.HMACKey); err != nil {
			return "", err
		}
	}
	for id, k := range c.HMACKeys {
		if err := add(id, k); err != nil {
			return "", err
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ID < keys[j].ID })
	var body bytes.Buffer
	err := libTemplate.Execute(&body, struct {
		Cluster, Name, Format string
		CacheSize             int
		Keys                  []libKey
	}{c.Cluster, c.library(), Format, c.cacheSize(), keys})
	if err != nil {
		return "", fmt.Errorf("redisfence: library template: %w", err)
	}
	return "#!lua name=" + c.library() + "\n" + digestMark + digestOf(body.String()) + "\n" + body.String(), nil
}

// digestOf is the hex SHA-256 of a library's body.
func digestOf(body string) string {
	d := sha256.Sum256([]byte(body))
	return hex.EncodeToString(d[:])
}

// checkDigest reports whether code is a library as libraryCode writes it,
// unchanged since: its digest line matches the rest.
func checkDigest(code string) bool {
	_, rest, ok := strings.Cut(code, "\n")
	if !ok || !strings.HasPrefix(rest, digestMark) {
		return false
	}
	line, body, ok := strings.Cut(rest, "\n")
	return ok && strings.TrimPrefix(line, digestMark) == digestOf(body)
}

// padStates returns SHA-256's state after the HMAC inner and outer pad
// blocks of key (RFC 2104: a key longer than the block is hashed first),
// each as eight comma-separated signed 32-bit numbers, as Lua's bit library
// keeps them.
func padStates(key []byte) (inner, outer string, err error) {
	if len(key) > sha256.BlockSize {
		d := sha256.Sum256(key)
		key = d[:]
	}
	state := func(pad byte) (string, error) {
		block := make([]byte, sha256.BlockSize)
		copy(block, key)
		for i := range block {
			block[i] ^= pad
		}
		h := sha256.New()
		h.Write(block)
		m, ok := h.(encoding.BinaryMarshaler)
		if !ok {
			return "", fmt.Errorf("redisfence: sha256 state cannot be read")
		}
		b, err := m.MarshalBinary()
		// "sha\x03", then the eight state words, big-endian.
		if err != nil || len(b) < 4+32 || string(b[:4]) != "sha\x03" {
			return "", fmt.Errorf("redisfence: unexpected sha256 state encoding")
		}
		words := make([]string, 8)
		for i := range words {
			words[i] = strconv.Itoa(int(int32(binary.BigEndian.Uint32(b[4+4*i:]))))
		}
		return strings.Join(words, ", "), nil
	}
	if inner, err = state(0x36); err != nil {
		return "", "", err
	}
	outer, err = state(0x5c)
	return inner, outer, err
}
