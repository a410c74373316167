package epoch

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
)

// Signer turns an epoch into a token.
type Signer interface {
	// Sign returns the token for e. It refuses an invalid epoch with an error
	// wrapping ErrMalformed.
	Sign(e Epoch) (string, error)
}

// Verifier turns a token back into the epoch it carries, if the token is
// authentic.
type Verifier interface {
	// Verify returns the epoch in token. It fails with an error wrapping
	// ErrMalformed, ErrUnsigned or ErrBadSignature.
	Verify(token string) (Epoch, error)
}

// Codec both signs and verifies.
type Codec interface {
	Signer
	Verifier
}

// MinHMACKeyLen is the shortest key NewHMAC accepts, in bytes.
const MinHMACKeyLen = 32

const (
	tokenPrefix = "tf1:"
	algHMAC     = "hs256"
	algEd25519  = "ed25519"
)

// b64 is strict so that a signature has exactly one spelling: changing any
// character of it, even in the unused trailing bits, fails verification.
var b64 = base64.RawURLEncoding.Strict()

// Plain returns the unsigned codec: a token is the epoch's text form. Its
// Verify checks the form only; given a signed token it returns the epoch in
// it without checking the signature. Plain proves nothing about who made a
// token: use it only where every client of the resource is trusted.
func Plain() Codec { return plainCodec{} }

type plainCodec struct{}

func (plainCodec) Sign(e Epoch) (string, error) {
	if err := e.Validate(); err != nil {
		return "", err
	}
	return e.String(), nil
}

func (plainCodec) Verify(token string) (Epoch, error) {
	t, err := splitToken(token)
	if err != nil {
		return Epoch{}, err
	}
	return Parse(t.text)
}

// token is a token split into its parts; alg is empty for a plain token.
type token struct {
	alg, text, sig string
}

// signed reports whether the token carries a signature.
func (t token) signed() bool { return t.alg != "" }

func splitToken(s string) (token, error) {
	if len(s) > MaxTokenLen {
		return token{}, fmt.Errorf("%w: token is %d bytes, more than %d", ErrMalformed, len(s), MaxTokenLen)
	}
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		if strings.IndexByte(s, ':') >= 0 {
			return token{}, fmt.Errorf("%w: unknown token version", ErrMalformed)
		}
		return token{text: s}, nil
	}
	alg, rest, ok := strings.Cut(rest, ":")
	if !ok || alg == "" {
		return token{}, fmt.Errorf("%w: token has no algorithm", ErrMalformed)
	}
	text, sig, ok := strings.Cut(rest, ":")
	if !ok || sig == "" || strings.IndexByte(sig, ':') >= 0 {
		return token{}, fmt.Errorf("%w: token has no signature", ErrMalformed)
	}
	return token{alg: alg, text: text, sig: sig}, nil
}

// signedInput is what a signature covers: the version, the algorithm and the
// text form, so a signature cannot be moved to another algorithm or epoch.
func signedInput(dst []byte, alg, text string) []byte {
	dst = append(dst, tokenPrefix...)
	dst = append(dst, alg...)
	dst = append(dst, ':')
	return append(dst, text...)
}

func formatSigned(alg, text string, sig []byte) string {
	var sb strings.Builder
	sb.Grow(len(tokenPrefix) + len(alg) + len(text) + 2 + b64.EncodedLen(len(sig)))
	sb.WriteString(tokenPrefix)
	sb.WriteString(alg)
	sb.WriteByte(':')
	sb.WriteString(text)
	sb.WriteByte(':')
	sb.WriteString(b64.EncodeToString(sig))
	return sb.String()
}

// verifySigned splits token, checks it names alg (any algorithm when alg is
// empty: the caller checks) and returns its parts and decoded signature
// (len(sigBuf) bytes).
func verifySigned(tokenStr, alg string, sigBuf []byte) (token, []byte, error) {
	t, err := splitToken(tokenStr)
	if err != nil {
		return token{}, nil, err
	}
	if !t.signed() {
		if _, err := Parse(t.text); err != nil {
			return token{}, nil, err
		}
		return token{}, nil, ErrUnsigned
	}
	if alg != "" && t.alg != alg {
		return token{}, nil, fmt.Errorf("%w: token is signed with %q, want %q", ErrBadSignature, t.alg, alg)
	}
	if b64.DecodedLen(len(t.sig)) != len(sigBuf) {
		return token{}, nil, fmt.Errorf("%w: signature has the wrong length", ErrBadSignature)
	}
	n, err := b64.Decode(sigBuf, []byte(t.sig))
	if err != nil || n != len(sigBuf) {
		return token{}, nil, fmt.Errorf("%w: signature is not base64url", ErrBadSignature)
	}
	return t, sigBuf, nil
}

// NewHMAC returns a codec that signs with HMAC-SHA256 under a shared secret
// key of at least MinHMACKeyLen bytes. Every signer and verifier of a
// resource must hold the same key; the key is copied. Its tokens carry no
// key ID ("tf1:hs256:<text>:<sig>"); it is NewHMACKeys(HMACKey{Secret: key}).
// To rotate a shared secret without a moment where writers and fences
// disagree, use key IDs (NewHMACKeys, NewHMACVerifier).
func NewHMAC(key []byte) (Codec, error) {
	return NewHMACKeys(HMACKey{Secret: key})
}

// MaxKeyIDLen is the longest HMAC key ID, in bytes.
const MaxKeyIDLen = 32

// HMACKey is one shared secret of an HMAC codec and the ID that names it in
// the tokens it signs.
type HMACKey struct {
	// ID is 1..MaxKeyIDLen bytes of [A-Za-z0-9_-]; tokens signed with the
	// key are "tf1:hs256.<ID>:<text>:<sig>", and the signature covers the
	// ID, so a token cannot be moved to another key. Empty: the key has no
	// ID, and its tokens are "tf1:hs256:<text>:<sig>" (NewHMAC's).
	ID string
	// Secret is at least MinHMACKeyLen bytes; it is copied.
	Secret []byte
}

// NewHMACKeys returns a codec that signs with sign and verifies tokens
// signed with sign or with any key of verify, chosen by the token's key ID
// (a token without one needs a key with an empty ID). Rotation of a shared
// secret, with no moment where a writer's token is refused:
//
//  1. verifiers (fences) accept old and new: NewHMACVerifier(old, new);
//  2. signers (leaders) switch: NewHMACKeys(new) (or NewHMACKeys(new, old)
//     where a process also verifies);
//  3. once no token signed with old can still be in flight, verifiers drop
//     it: NewHMACVerifier(new). Its tokens are then refused
//     (ErrBadSignature).
//
// It refuses a secret shorter than MinHMACKeyLen, a malformed ID and two
// keys with one ID.
func NewHMACKeys(sign HMACKey, verify ...HMACKey) (Codec, error) {
	keys, err := hmacKeys(append([]HMACKey{sign}, verify...))
	if err != nil {
		return nil, err
	}
	return &hmacCodec{sign: keys[sign.ID], alg: hmacAlg(sign.ID), keys: keys}, nil
}

// NewHMACVerifier returns a verifier that accepts tokens signed with any of
// keys, chosen by the token's key ID, and signs nothing: what a fence holds
// while a shared secret is rotated (see NewHMACKeys). It refuses no keys, a
// secret shorter than MinHMACKeyLen, a malformed ID and two keys with one ID.
func NewHMACVerifier(keys ...HMACKey) (Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("epoch: HMAC verifier needs a key")
	}
	ks, err := hmacKeys(keys)
	if err != nil {
		return nil, err
	}
	return &hmacCodec{keys: ks}, nil
}

// hmacAlg is the algorithm field of tokens signed with the key named id.
func hmacAlg(id string) string {
	if id == "" {
		return algHMAC
	}
	return algHMAC + "." + id
}

// ValidKeyID reports whether id is a well-formed HMAC key ID: 1 to
// MaxKeyIDLen bytes of [A-Za-z0-9_-] (docs/TOKEN.md). Stores that keep keys
// for termfence tokens, such as the PostgreSQL guard, check IDs with it.
func ValidKeyID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func hmacKeys(keys []HMACKey) (map[string]*hmacKey, error) {
	m := make(map[string]*hmacKey, len(keys))
	for _, k := range keys {
		if len(k.Secret) < MinHMACKeyLen {
			name := "HMAC key"
			if k.ID != "" {
				name = fmt.Sprintf("HMAC key with ID %q", k.ID)
			}
			return nil, fmt.Errorf("epoch: %s is %d bytes, need at least %d", name, len(k.Secret), MinHMACKeyLen)
		}
		if k.ID != "" && !ValidKeyID(k.ID) {
			return nil, fmt.Errorf("epoch: HMAC key ID %q: want 1..%d bytes of [A-Za-z0-9_-]", k.ID, MaxKeyIDLen)
		}
		if _, dup := m[k.ID]; dup {
			return nil, fmt.Errorf("epoch: two HMAC keys with ID %q", k.ID)
		}
		secret := append([]byte(nil), k.Secret...)
		hk := &hmacKey{alg: hmacAlg(k.ID)}
		hk.pool.New = func() any {
			return &hmacState{h: hmac.New(sha256.New, secret), buf: make([]byte, 0, 128)}
		}
		m[k.ID] = hk
	}
	return m, nil
}

// hmacCodec signs with one key (sign; nil for a verifier only) and
// verifies with every key in keys, by ID.
type hmacCodec struct {
	sign *hmacKey
	alg  string
	keys map[string]*hmacKey
}

// hmacKey is one secret, its pool of keyed hashes and its algorithm field.
type hmacKey struct {
	alg  string
	pool sync.Pool // of *hmacState
}

// hmacState is a keyed hash with its scratch buffer, reused across calls so
// that Verify does not allocate.
type hmacState struct {
	h   hash.Hash
	buf []byte
}

func (k *hmacKey) mac(dst []byte, text string) []byte {
	st := k.pool.Get().(*hmacState)
	st.h.Reset()
	st.buf = signedInput(st.buf[:0], k.alg, text)
	st.h.Write(st.buf)
	dst = st.h.Sum(dst)
	k.pool.Put(st)
	return dst
}

func (c *hmacCodec) Sign(e Epoch) (string, error) {
	if c.sign == nil {
		return "", errors.New("epoch: HMAC verifier cannot sign")
	}
	if err := e.Validate(); err != nil {
		return "", err
	}
	text := e.String()
	var sum [sha256.Size]byte
	return formatSigned(c.alg, text, c.sign.mac(sum[:0], text)), nil
}

func (c *hmacCodec) Verify(tok string) (Epoch, error) {
	var sigBuf [sha256.Size]byte
	t, sig, err := verifySigned(tok, "", sigBuf[:])
	if err != nil {
		return Epoch{}, err
	}
	id, ok := strings.CutPrefix(t.alg, algHMAC)
	switch {
	case !ok:
		return Epoch{}, fmt.Errorf("%w: token is signed with %q, want %q", ErrBadSignature, t.alg, algHMAC)
	case id == "":
	case id[0] == '.' && ValidKeyID(id[1:]):
		id = id[1:]
	default:
		return Epoch{}, fmt.Errorf("%w: token is signed with %q, want %q or %q.<key ID>", ErrBadSignature, t.alg, algHMAC, algHMAC)
	}
	k, ok := c.keys[id]
	if !ok {
		return Epoch{}, fmt.Errorf("%w: no key with ID %q", ErrBadSignature, id)
	}
	var sum [sha256.Size]byte
	if subtle.ConstantTimeCompare(k.mac(sum[:0], t.text), sig) != 1 {
		return Epoch{}, ErrBadSignature
	}
	e, err := Parse(t.text)
	if err != nil {
		return Epoch{}, err
	}
	return e, nil
}

// NewEd25519Signer returns a signer that signs with priv. A key of the wrong
// size makes every Sign fail; it never panics.
func NewEd25519Signer(priv ed25519.PrivateKey) Signer {
	return ed25519Signer{priv: append(ed25519.PrivateKey(nil), priv...)}
}

type ed25519Signer struct{ priv ed25519.PrivateKey }

func (s ed25519Signer) Sign(e Epoch) (string, error) {
	if len(s.priv) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("epoch: ed25519 private key is %d bytes, want %d", len(s.priv), ed25519.PrivateKeySize)
	}
	if err := e.Validate(); err != nil {
		return "", err
	}
	text := e.String()
	var buf [MaxTokenLen + 32]byte
	sig := ed25519.Sign(s.priv, signedInput(buf[:0], algEd25519, text))
	return formatSigned(algEd25519, text, sig), nil
}

// NewEd25519Verifier returns a verifier that accepts a token signed by the
// private key of any of pubs: list the old and the new key while rotating.
// Keys of the wrong size are ignored; with no usable key every Verify fails
// with ErrBadSignature.
func NewEd25519Verifier(pubs ...ed25519.PublicKey) Verifier {
	v := ed25519Verifier{}
	for _, p := range pubs {
		if len(p) == ed25519.PublicKeySize {
			v.pubs = append(v.pubs, append(ed25519.PublicKey(nil), p...))
		}
	}
	return v
}

type ed25519Verifier struct{ pubs []ed25519.PublicKey }

func (v ed25519Verifier) Verify(tok string) (Epoch, error) {
	var sigBuf [ed25519.SignatureSize]byte
	t, sig, err := verifySigned(tok, algEd25519, sigBuf[:])
	if err != nil {
		return Epoch{}, err
	}
	if len(v.pubs) == 0 {
		return Epoch{}, fmt.Errorf("%w: no usable ed25519 public key configured", ErrBadSignature)
	}
	var buf [MaxTokenLen + 32]byte
	msg := signedInput(buf[:0], algEd25519, t.text)
	for _, p := range v.pubs {
		if ed25519.Verify(p, msg, sig) {
			return Parse(t.text)
		}
	}
	return Epoch{}, ErrBadSignature
}

// errNoToken is returned through RoundTripper when the token func returns an
// empty token without an error.
var errNoToken = errors.New("epoch: token func returned an empty token")

// errNoTokenFunc is returned through RoundTripper when it was built with a
// nil token func.
var errNoTokenFunc = errors.New("epoch: RoundTripper has no token func")
