package epoch_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/termfence/termfence/epoch"
)

// The token test vectors of docs/TOKEN.md live in docs/token-vectors.json,
// for verifiers in any language. The definitions below are their source:
// each vector states what every verifier must answer, and the generator
// checks that this package agrees before it writes the file. Regenerate
// with one command:
//
//	go test ./epoch -run TestTokenVectors -update
//
// Without -update, TestTokenVectors checks that the file is exactly what
// the definitions produce, and that this package answers every vector in
// the file as the file says.

var update = flag.Bool("update", false, "rewrite docs/token-vectors.json from the vector definitions")

const vectorsPath = "../docs/token-vectors.json"

// The fixed keys of the vectors: not secret, never use them for anything
// else.
var (
	vectorHMACKey = []byte("termfence-test-vector-hmac-key!!")                  // 32 bytes
	vectorOther   = []byte("some-other-key-that-is-32-bytes!")                  // 32 bytes: forgeries
	vectorEdSeed  = sha256.Sum256([]byte("termfence test vector ed25519 seed")) // RFC 8032 seed
	// Keys with IDs (tf1:hs256.<key ID>:...), held by the hs256 verifier
	// beside vectorHMACKey, as during a rotation.
	vectorKeyIDs = []vectorKeyID{
		{ID: "2026-12", Key: hex.EncodeToString([]byte("termfence-test-vector-key-2026-12"))},                                  // 33 bytes
		{ID: "longest_key_id_of_32_bytes-ABCDE", Key: hex.EncodeToString([]byte("termfence-test-vector-key-of-a-32-byte-id"))}, // a 32-byte ID
	}
	// vectorRetired signs under an ID the verifier does not hold.
	vectorRetired = []byte("termfence-test-vector-retired-key")
)

// vectorMaxTerm is the highest term a valid epoch carries, as the vectors
// state it.
const vectorMaxTerm = epoch.MaxTerm

type vectorFile struct {
	Comment     string        `json:"comment"`
	Regenerate  string        `json:"regenerate"`
	MaxTokenLen int           `json:"max_token_len"`
	MaxNameLen  int           `json:"max_name_len"`
	MaxTerm     string        `json:"max_term"`
	Keys        vectorKeys    `json:"keys"`
	Text        []formVector  `json:"text"`
	Binary      []formVector  `json:"binary"`
	Tokens      []tokenVector `json:"tokens"`
}

type vectorKeys struct {
	HS256         string        `json:"hs256"`
	HS256KeyIDs   []vectorKeyID `json:"hs256_key_ids"`
	Ed25519Seed   string        `json:"ed25519_seed"`
	Ed25519Public string        `json:"ed25519_public"`
}

// vectorKeyID is an HMAC key with an ID: the key in hex.
type vectorKeyID struct {
	ID  string `json:"id"`
	Key string `json:"key"`
}

type epochJSON struct {
	Cluster string `json:"cluster"`
	Term    string `json:"term"` // decimal: JSON numbers lose precision past 2^53
	Leader  string `json:"leader"`
}

// result is a verifier's (or decoder's) answer: an epoch, or an error kind:
// "malformed", "unsigned" or "bad_signature".
type result struct {
	Epoch *epochJSON `json:"epoch,omitempty"`
	Error string     `json:"error,omitempty"`
}

// formVector is an input to the text or binary decoder.
type formVector struct {
	Name string `json:"name"`
	Hex  string `json:"hex"`
	Text string `json:"text,omitempty"` // the input again, when it is printable ASCII
	result
}

// tokenVector is a token and the answer of each verifier: Plain, HS256
// under keys.hs256 (the key without an ID) and keys.hs256_key_ids, Ed25519
// under keys.ed25519_public.
type tokenVector struct {
	Name    string `json:"name"`
	Hex     string `json:"hex"`
	Token   string `json:"token,omitempty"` // the token again, when it is printable ASCII
	Plain   result `json:"plain"`
	HS256   result `json:"hs256"`
	Ed25519 result `json:"ed25519"`
}

const (
	kindMalformed    = "malformed"
	kindUnsigned     = "unsigned"
	kindBadSignature = "bad_signature"
)

func ok(e epoch.Epoch) result {
	return result{Epoch: &epochJSON{Cluster: e.Cluster, Term: strconv.FormatUint(e.Term, 10), Leader: e.Leader}}
}

func fails(kind string) result { return result{Error: kind} }

func printable(b []byte) string {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return string(b)
}

// hs256 and ed signs text as a token of that algorithm without validating
// it, as a buggy or older signer could; sig replaces the signature.
func hs256(key []byte, text string) string { return hs256As(key, "hs256", text) }

// hs256As signs text with HMAC-SHA256 under key as a token whose
// algorithm field is alg ("hs256" or "hs256.<key ID>").
func hs256As(key []byte, alg, text string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("tf1:" + alg + ":" + text))
	return "tf1:" + alg + ":" + text + ":" + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// keyOf is the secret of the vectors' key with ID id.
func keyOf(id string) []byte {
	for _, k := range vectorKeyIDs {
		if k.ID == id {
			b, _ := hex.DecodeString(k.Key)
			return b
		}
	}
	panic("no vector key " + id)
}

func edSign(text string) string {
	priv := ed25519.NewKeyFromSeed(vectorEdSeed[:])
	return "tf1:ed25519:" + text + ":" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte("tf1:ed25519:"+text)))
}

// buildVectors returns the vector file the definitions describe.
func buildVectors() vectorFile {
	edPub := ed25519.NewKeyFromSeed(vectorEdSeed[:]).Public().(ed25519.PublicKey)
	f := vectorFile{
		Comment:     "Test vectors of termfence's tokens: see docs/TOKEN.md. Every input is in hex; text and token repeat it when printable ASCII. Keys are fixed test keys, never to be used for anything else.",
		Regenerate:  "go test ./epoch -run TestTokenVectors -update",
		MaxTokenLen: epoch.MaxTokenLen,
		MaxNameLen:  epoch.MaxNameLen,
		MaxTerm:     strconv.FormatUint(vectorMaxTerm, 10),
		Keys: vectorKeys{
			HS256:         hex.EncodeToString(vectorHMACKey),
			HS256KeyIDs:   vectorKeyIDs,
			Ed25519Seed:   hex.EncodeToString(vectorEdSeed[:]),
			Ed25519Public: hex.EncodeToString(edPub),
		},
	}
	long := strings.Repeat("n", epoch.MaxNameLen)
	e34 := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	eMax := epoch.Epoch{Cluster: long, Term: vectorMaxTerm, Leader: strings.Repeat("L", epoch.MaxNameLen)}
	eChars := epoch.Epoch{Cluster: "AZaz09._-", Term: 1, Leader: "x"}
	eBig := epoch.Epoch{Cluster: "c", Term: 1 << 35, Leader: "l"}

	text := func(name, s string, r result) {
		f.Text = append(f.Text, formVector{Name: name, Hex: hex.EncodeToString([]byte(s)), Text: printable([]byte(s)), result: r})
	}
	text("basic", "payments/34/node-b", ok(e34))
	text("longest names, highest term", eMax.String(), ok(eMax))
	text("every name character", "AZaz09._-/1/x", ok(eChars))
	text("shortest", "a/1/b", ok(epoch.Epoch{Cluster: "a", Term: 1, Leader: "b"}))
	for _, c := range []struct{ name, s string }{
		{"empty", ""},
		{"two fields", "payments/34"},
		{"four fields", "payments/34/node-b/x"},
		{"empty cluster", "/34/node-b"},
		{"empty leader", "payments/34/"},
		{"empty term", "payments//node-b"},
		{"term 0", "payments/0/node-b"},
		{"term with leading zero", "payments/034/node-b"},
		{"term with plus sign", "payments/+34/node-b"},
		{"term with minus sign", "payments/-34/node-b"},
		{"term with space", "payments/ 34/node-b"},
		{"term in hex", "payments/0x22/node-b"},
		{"term above max_term", "payments/281474976710657/node-b"},
		{"term 2^63", "payments/9223372036854775808/node-b"},
		{"term 2^64-1", "payments/18446744073709551615/node-b"},
		{"term 2^64 overflows", "payments/18446744073709551616/node-b"},
		{"term of 21 digits", "payments/100000000000000000000/node-b"},
		{"cluster of 65 bytes", long + "n/34/node-b"},
		{"leader of 65 bytes", "payments/34/" + long + "n"},
		{"space in leader", "payments/34/node b"},
		{"colon in leader", "payments/34/node:b"},
		{"non-ASCII letter", "paym\u0435nts/34/node-b"}, // Cyrillic e
		{"trailing newline", "payments/34/node-b\n"},
		{"NUL byte", "payments/34/node\x00b"},
		{"invalid UTF-8", "payments/34/node\xffb"},
		{"longer than max_token_len", "payments/34/" + strings.Repeat("n", epoch.MaxTokenLen)},
	} {
		text(c.name, c.s, fails(kindMalformed))
	}

	bin := func(name string, b []byte, r result) {
		f.Binary = append(f.Binary, formVector{Name: name, Hex: hex.EncodeToString(b), result: r})
	}
	mb := func(e epoch.Epoch) []byte {
		b, err := e.MarshalBinary()
		if err != nil {
			panic(err)
		}
		return b
	}
	bin("basic", mb(e34), ok(e34))
	bin("longest names, highest term", mb(eMax), ok(eMax))
	bin("term of 2^35 (six varint bytes)", mb(eBig), ok(eBig))
	raw := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 0", raw([]byte{0, 34, 1, 'c', 1, 'l'})},
		{"version 2", raw([]byte{2, 34, 1, 'c', 1, 'l'})},
		{"term 0", raw([]byte{1, 0, 1, 'c', 1, 'l'})},
		{"non-minimal varint", raw([]byte{1, 0xa2, 0x00, 1, 'c', 1, 'l'})},
		{"varint of 11 bytes", raw([]byte{1}, bytes.Repeat([]byte{0xff}, 10), []byte{0x01, 1, 'c', 1, 'l'})},
		{"varint truncated", []byte{1, 0x80}},
		{"term above max_term", raw([]byte{1}, binary.AppendUvarint(nil, epoch.MaxTerm+1), []byte{1, 'c', 1, 'l'})},
		{"term 2^64-1", raw([]byte{1}, binary.AppendUvarint(nil, 1<<64-1), []byte{1, 'c', 1, 'l'})},
		{"cluster truncated", []byte{1, 34, 5, 'c'}},
		{"leader missing", []byte{1, 34, 1, 'c'}},
		{"leader truncated", []byte{1, 34, 1, 'c', 3, 'l'}},
		{"trailing byte", raw(mb(e34), []byte{0})},
		{"empty cluster", []byte{1, 34, 0, 1, 'l'}},
		{"bad name byte", []byte{1, 34, 1, '/', 1, 'l'}},
		{"name of 65 bytes", raw([]byte{1, 34, 65}, []byte(long+"n"), []byte{1, 'l'})},
		{"longer than max_token_len", raw([]byte{1, 34, 1, 'c', 1, 'l'}, make([]byte, epoch.MaxTokenLen))},
	} {
		bin(c.name, c.b, fails(kindMalformed))
	}

	tok := func(name, t string, plain, hs, ed result) {
		f.Tokens = append(f.Tokens, tokenVector{Name: name, Hex: hex.EncodeToString([]byte(t)), Token: printable([]byte(t)), Plain: plain, HS256: hs, Ed25519: ed})
	}
	mal := fails(kindMalformed)
	bad := fails(kindBadSignature)
	uns := fails(kindUnsigned)
	hsTok := hs256(vectorHMACKey, e34.String())
	edTok := edSign(e34.String())
	sig := hsTok[strings.LastIndexByte(hsTok, ':')+1:]
	body := strings.TrimSuffix(hsTok, sig)
	// Valid tokens.
	tok("plain", e34.String(), ok(e34), uns, uns)
	tok("plain, longest names, highest term", eMax.String(), ok(eMax), uns, uns)
	tok("hs256", hsTok, ok(e34), ok(e34), bad)
	tok("hs256, longest names, highest term", hs256(vectorHMACKey, eMax.String()), ok(eMax), ok(eMax), bad)
	tok("ed25519", edTok, ok(e34), bad, ok(e34))
	tok("ed25519, longest names, highest term", edSign(eMax.String()), ok(eMax), bad, ok(eMax))
	// Signatures that do not verify. Plain reads the text and does not
	// look at signatures: it answers with the epoch.
	tok("hs256 under another key", hs256(vectorOther, e34.String()), ok(e34), bad, bad)
	tok("hs256 signature of another epoch", body[:len("tf1:hs256:payments/")]+"35/node-b:"+sig, ok(epoch.Epoch{Cluster: "payments", Term: 35, Leader: "node-b"}), bad, bad)
	tok("hs256 signature padded", hsTok+"=", ok(e34), bad, bad)
	tok("hs256 signature in standard base64", body+strings.NewReplacer("-", "+", "_", "/").Replace(sig), ok(e34), bad, bad)
	tok("hs256 signature with the unused low bits set", body+sig[:len(sig)-1]+lowBitsSet(sig[len(sig)-1]), ok(e34), bad, bad)
	tok("hs256 signature truncated", body+sig[:len(sig)-1], ok(e34), bad, bad)
	tok("hs256 signature not base64", body+strings.Repeat("!", len(sig)), ok(e34), bad, bad)
	tok("algorithm in upper case", "tf1:HS256:"+strings.TrimPrefix(hsTok, "tf1:hs256:"), ok(e34), bad, bad)
	tok("unknown algorithm", "tf1:hs512:"+strings.TrimPrefix(hsTok, "tf1:hs256:"), ok(e34), bad, bad)
	tok("ed25519 signature labelled hs256", "tf1:hs256:"+strings.TrimPrefix(edTok, "tf1:ed25519:"), ok(e34), bad, bad)
	// Authentic signatures over text that is not a valid epoch: refused
	// after the signature checks.
	tok("hs256 over term 0", hs256(vectorHMACKey, "payments/0/node-b"), mal, mal, bad)
	tok("hs256 over a term above max_term", hs256(vectorHMACKey, "payments/281474976710657/node-b"), mal, mal, bad)
	tok("hs256 over a term that overflows", hs256(vectorHMACKey, "payments/18446744073709551616/node-b"), mal, mal, bad)
	tok("hs256 over a leading zero", hs256(vectorHMACKey, "payments/034/node-b"), mal, mal, bad)
	tok("hs256 over an empty leader", hs256(vectorHMACKey, "payments/34/"), mal, mal, bad)
	tok("ed25519 over a leading zero", edSign("payments/034/node-b"), mal, bad, mal)
	// Structure.
	tok("empty", "", mal, mal, mal)
	tok("plain text malformed", "payments/034/node-b", mal, mal, mal)
	tok("plain text with a colon", "payments:34:node-b", mal, mal, mal)
	tok("version tf2", "tf2"+strings.TrimPrefix(hsTok, "tf1"), mal, mal, mal)
	tok("version in upper case", "TF1"+strings.TrimPrefix(hsTok, "tf1"), mal, mal, mal)
	tok("no algorithm", "tf1::"+e34.String()+":"+sig, mal, mal, mal)
	tok("no signature field", "tf1:hs256:"+e34.String(), mal, mal, mal)
	tok("empty signature", "tf1:hs256:"+e34.String()+":", mal, mal, mal)
	tok("extra field", hsTok+":x", mal, mal, mal)
	tok("only the prefix", "tf1:", mal, mal, mal)
	tok("leading space", " "+hsTok, mal, mal, mal)
	tok("trailing newline", hsTok+"\n", ok(e34), bad, bad)
	tok("longer than max_token_len", hs256(vectorHMACKey, "payments/34/"+strings.Repeat("n", epoch.MaxTokenLen)), mal, mal, mal)
	tok("plain longer than max_token_len", strings.Repeat("n", epoch.MaxTokenLen+1), mal, mal, mal)
	// Key IDs: hs256.<key ID> names the key; the ID is signed.
	id1, id2 := vectorKeyIDs[0].ID, vectorKeyIDs[1].ID
	idTok := hs256As(keyOf(id1), "hs256."+id1, e34.String())
	idSig := idTok[strings.LastIndexByte(idTok, ':')+1:]
	tok("hs256 with a key ID", idTok, ok(e34), ok(e34), bad)
	tok("hs256 with a key ID of 32 bytes", hs256As(keyOf(id2), "hs256."+id2, eMax.String()), ok(eMax), ok(eMax), bad)
	tok("hs256 with a key ID, its signature moved to another key ID", "tf1:hs256."+id2+":"+e34.String()+":"+idSig, ok(e34), bad, bad)
	tok("hs256 with a key ID, the ID removed", "tf1:hs256:"+e34.String()+":"+idSig, ok(e34), bad, bad)
	tok("hs256 without a key ID, an ID added", "tf1:hs256."+id1+":"+e34.String()+":"+sig, ok(e34), bad, bad)
	tok("hs256 signed without the ID under the ID's key", hs256As(keyOf(id1), "hs256", e34.String()), ok(e34), bad, bad)
	unsignedID := hs256As(keyOf(id1), "hs256", e34.String())
	tok("hs256 with a key ID that its MAC does not cover", "tf1:hs256."+id1+":"+e34.String()+":"+unsignedID[strings.LastIndexByte(unsignedID, ':')+1:], ok(e34), bad, bad)
	tok("hs256 with a key ID under the key without an ID", hs256As(vectorHMACKey, "hs256."+id1, e34.String()), ok(e34), bad, bad)
	tok("hs256 with an unknown key ID", hs256As(vectorRetired, "hs256.retired", e34.String()), ok(e34), bad, bad)
	tok("hs256 with a key ID in another case", hs256As(keyOf(id2), "hs256."+strings.ToLower(id2), e34.String()), ok(e34), bad, bad)
	tok("hs256 with an empty key ID", hs256As(vectorHMACKey, "hs256.", e34.String()), ok(e34), bad, bad)
	tok("hs256 with a key ID of 33 bytes", hs256As(keyOf(id2), "hs256."+id2+"F", e34.String()), ok(e34), bad, bad)
	tok("hs256 with a dot in the key ID", hs256As(keyOf(id1), "hs256."+id1+".x", e34.String()), ok(e34), bad, bad)
	tok("hs256 with a key ID, no dot", hs256As(keyOf(id1), "hs256"+id1, e34.String()), ok(e34), bad, bad)
	tok("hs256 with a key ID over a leading zero", hs256As(keyOf(id1), "hs256."+id1, "payments/034/node-b"), mal, mal, bad)
	return f
}

// lowBitsSet returns the base64url character c with its lowest bit set:
// the last character of a 32-byte value's 43 carries 4 bits and 2 unused
// ones, which a canonical encoding leaves 0.
func lowBitsSet(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	return string(alphabet[strings.IndexByte(alphabet, c)|1])
}

// encodeVectors is the file's exact bytes.
func encodeVectors(f vectorFile) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// answer is what this package says about a vector, as a result.
func answer(e epoch.Epoch, err error) result {
	switch {
	case err == nil:
		return ok(e)
	case errors.Is(err, epoch.ErrMalformed):
		return fails(kindMalformed)
	case errors.Is(err, epoch.ErrUnsigned):
		return fails(kindUnsigned)
	case errors.Is(err, epoch.ErrBadSignature):
		return fails(kindBadSignature)
	}
	return fails("unexpected: " + err.Error())
}

type vectorVerifiers struct {
	plain, hs, ed epoch.Verifier
	// hsCodecs are the hs256 keyring as signing codecs, one per signing
	// key: each answers every vector as hs does.
	hsCodecs map[string]epoch.Codec
}

func newVectorVerifiers(t testing.TB, f vectorFile) vectorVerifiers {
	t.Helper()
	k, err := hex.DecodeString(f.Keys.HS256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := hex.DecodeString(f.Keys.Ed25519Public)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("ed25519 public key: %v", err)
	}
	ids := map[string][]byte{}
	for _, x := range f.Keys.HS256KeyIDs {
		ids[x.ID] = unhex(t, x.Key)
	}
	return vectorVerifiers{plain: epoch.Plain(), hs: newHS256Verifier(t, k, ids), ed: epoch.NewEd25519Verifier(pub), hsCodecs: newHS256Codecs(t, k, ids)}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkVectors answers every vector of f with this package and reports
// each disagreement.
func checkVectors(t *testing.T, f vectorFile) {
	if f.MaxTokenLen != epoch.MaxTokenLen || f.MaxNameLen != epoch.MaxNameLen || f.MaxTerm != strconv.FormatUint(vectorMaxTerm, 10) {
		t.Errorf("limits in the file (%d, %d, %s) are not this package's", f.MaxTokenLen, f.MaxNameLen, f.MaxTerm)
	}
	v := newVectorVerifiers(t, f)
	same := func(what, name string, got, want result) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("%s %q: got %s, want %s", what, name, g, w)
		}
	}
	for _, x := range f.Text {
		e, err := epoch.Parse(string(unhex(t, x.Hex)))
		same("text", x.Name, answer(e, err), x.result)
		var u epoch.Epoch
		same("text (UnmarshalText)", x.Name, answer(u, u.UnmarshalText(unhex(t, x.Hex))), x.result)
	}
	for _, x := range f.Binary {
		var e epoch.Epoch
		same("binary", x.Name, answer(e, e.UnmarshalBinary(unhex(t, x.Hex))), x.result)
	}
	for _, x := range f.Tokens {
		tok := string(unhex(t, x.Hex))
		same("token (plain)", x.Name, answer(v.plain.Verify(tok)), x.Plain)
		same("token (hs256)", x.Name, answer(v.hs.Verify(tok)), x.HS256)
		for name, c := range v.hsCodecs {
			same("token (hs256 codec "+name+")", x.Name, answer(c.Verify(tok)), x.HS256)
		}
		same("token (ed25519)", x.Name, answer(v.ed.Verify(tok)), x.Ed25519)
	}
}

// TestTokenVectors: the file is what the definitions produce (or, with
// -update, becomes it), and this package answers every vector in it as it
// says. The definitions' expectations are written by hand, so a change of
// behaviour fails here instead of silently changing the file.
func TestTokenVectors(t *testing.T) {
	want := buildVectors()
	checkVectors(t, want)
	if t.Failed() {
		t.Fatal("this package disagrees with the vector definitions; the file was not written")
	}
	enc := encodeVectors(want)
	if *update {
		if err := os.WriteFile(vectorsPath, enc, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d text, %d binary, %d token vectors", vectorsPath, len(want.Text), len(want.Binary), len(want.Tokens))
	}
	got, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, enc) {
		t.Fatalf("%s is not what the definitions produce: run go test ./epoch -run TestTokenVectors -update", vectorsPath)
	}
	var f vectorFile
	if err := json.Unmarshal(got, &f); err != nil {
		t.Fatal(err)
	}
	checkVectors(t, f)
}

// TestTokenVectorsOneByteChanged: changing any one byte of a valid signed
// vector to any other value makes its verifier refuse it; changing one
// byte of a valid unsigned token, text or binary form either makes it
// malformed or gives another epoch, never the same one (each epoch has
// exactly one spelling). Every position takes every other value, except
// under Ed25519 (a verification costs some 50 µs, 200 times an HMAC's),
// where each position takes its eight one-bit flips and the values 0x00,
// ' ', ':', 'A' and 0xff; and under the race detector (15 times slower,
// and nothing to find in one goroutine), where HMAC and the decoders get
// those and Ed25519 one flip per position.
func TestTokenVectorsOneByteChanged(t *testing.T) {
	f := readVectors(t)
	v := newVectorVerifiers(t, f)
	values, edValues := func(byte) []byte { return everyValue }, bitFlips
	if raceEnabled {
		values, edValues = bitFlips, func(c byte) []byte { return []byte{c ^ 1} }
	}
	checked := 0
	for _, x := range f.Tokens {
		tok := unhex(t, x.Hex)
		type verifier struct {
			name   string
			v      epoch.Verifier
			want   result
			values func(byte) []byte
		}
		vs := []verifier{{"hs256 verifier", v.hs, x.HS256, values}, {"ed25519 verifier", v.ed, x.Ed25519, edValues}}
		// The signing codecs too: a codec that falls back on its own
		// signing key for an ID it does not hold accepts a token
		// relabelled by one byte of its key ID.
		for name, c := range v.hsCodecs {
			vs = append(vs, verifier{"hs256 codec " + name, c, x.HS256, values})
		}
		for _, c := range vs {
			if c.want.Epoch == nil {
				continue
			}
			forEachChangeOf(tok, c.values, func(m []byte) {
				checked++
				if e, err := c.v.Verify(string(m)); err == nil {
					t.Errorf("%q changed to %q verifies with the %s, as %v", x.Name, m, c.name, e)
				}
			})
		}
		if x.Plain.Epoch != nil && x.HS256.Error == kindUnsigned {
			orig, _ := epoch.Parse(string(tok))
			forEachChangeOf(tok, values, func(m []byte) {
				checked++
				if e, err := v.plain.Verify(string(m)); err == nil && e == orig {
					t.Errorf("%q changed to %q gives the same epoch", x.Name, m)
				}
			})
		}
	}
	for _, x := range f.Text {
		if x.Epoch != nil {
			in := unhex(t, x.Hex)
			orig, _ := epoch.Parse(string(in))
			forEachChangeOf(in, values, func(m []byte) {
				checked++
				if e, err := epoch.Parse(string(m)); err == nil && e == orig {
					t.Errorf("text %q changed to %q parses as the same epoch", x.Name, m)
				}
			})
		}
	}
	for _, x := range f.Binary {
		if x.Epoch != nil {
			in := unhex(t, x.Hex)
			var orig epoch.Epoch
			orig.UnmarshalBinary(in)
			forEachChangeOf(in, values, func(m []byte) {
				checked++
				var e epoch.Epoch
				if e.UnmarshalBinary(m) == nil && e == orig {
					t.Errorf("binary %q changed to %x decodes as the same epoch", x.Name, m)
				}
			})
		}
	}
	t.Logf("%d changed inputs checked", checked)
}

func readVectors(t testing.TB) vectorFile {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// everyValue is every byte value.
var everyValue = func() []byte {
	v := make([]byte, 256)
	for i := range v {
		v[i] = byte(i)
	}
	return v
}()

// forEachChangeOf calls fn with in changed at each position to each value
// of values(the byte there) other than that byte.
func forEachChangeOf(in []byte, values func(byte) []byte, fn func([]byte)) {
	m := make([]byte, len(in))
	for i := range in {
		for _, b := range values(in[i]) {
			if b == in[i] {
				continue
			}
			copy(m, in)
			m[i] = b
			fn(m)
		}
	}
}

// bitFlips is c with each of its bits flipped, and a few fixed values.
func bitFlips(c byte) []byte {
	v := []byte{0x00, ' ', ':', 'A', 0xff}
	for bit := 0; bit < 8; bit++ {
		v = append(v, c^1<<bit)
	}
	return v
}

// TestTokenDocExamples: docs/TOKEN.md's examples and limits are the
// vectors' and this package's.
func TestTokenDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/TOKEN.md")
	if err != nil {
		t.Fatal(err)
	}
	f := readVectors(t)
	want := []string{
		"**" + strconv.Itoa(epoch.MaxTokenLen) + " bytes**",
		"**max-term** is " + f.MaxTerm,
		"1 to " + strconv.Itoa(epoch.MaxNameLen) + " bytes",
		hs256(vectorHMACKey, "payments/34/node-b"),
		hs256As(keyOf("2026-12"), "hs256.2026-12", "payments/34/node-b"),
		"`" + string(keyOf("2026-12")) + "`",
	}
	var b epoch.Epoch
	b.UnmarshalText([]byte("payments/34/node-b"))
	bin, _ := b.MarshalBinary()
	want = append(want, "`"+hex.EncodeToString(bin)+"`")
	if key := string(vectorHMACKey); !strings.Contains(f.Keys.HS256, hex.EncodeToString(vectorHMACKey)) {
		t.Fatalf("the vectors' hs256 key is not %q", key)
	}
	for _, w := range want {
		if !bytes.Contains(doc, []byte(w)) {
			t.Errorf("docs/TOKEN.md does not contain %s", w)
		}
	}
}

// TestPythonVerifier runs docs/tokenverify.py, the verifier in Python's
// standard library that other stores can copy, over the same vectors and
// the same one-byte changes. It skips where python3 is missing.
func TestPythonVerifier(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: docs/tokenverify.py not checked")
	}
	out, err := exec.Command(py, "../docs/tokenverify.py", "check", vectorsPath).CombinedOutput()
	if err != nil {
		t.Fatalf("python3 docs/tokenverify.py check: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
	if !utf8.Valid(out) || !bytes.Contains(out, []byte("all vectors pass")) {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
