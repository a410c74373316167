#!/usr/bin/env python3
"""Verify termfence tokens with Python's standard library only.

This is the verification procedure of docs/TOKEN.md, written out for stores
that are not written in Go: a batch job, a service in another language, a
database extension. Copy it; it has no dependencies.

It verifies unsigned (plain) tokens and HMAC-SHA256 tokens (hs256, and
hs256.<key ID> for a key with an ID), and
decodes the text and binary forms. It does not verify Ed25519 signatures:
Python's standard library has no Ed25519 (use a library such as
cryptography's Ed25519PublicKey.verify over the same signed bytes).

Use as a module:

    from tokenverify import verify_hs256, Refused
    try:
        ep = verify_hs256(token_bytes, {"": key, "2026-12": new_key})
    except Refused as r:
        ...  # r.kind is "malformed", "unsigned" or "bad_signature"

or from the command line:

    python3 docs/tokenverify.py verify --hs256-key-hex 7465... 'tf1:hs256:...'
    python3 docs/tokenverify.py verify --hs256-key 2026-12=7465... 'tf1:hs256.2026-12:...'
    python3 docs/tokenverify.py check docs/token-vectors.json

A verified epoch is only authentic, not current: the store must still keep
the highest epoch per resource and refuse older ones (docs/TOKEN.md,
"After verification").
"""

import base64
import hashlib
import hmac
import json
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

MAX_TOKEN_LEN = 1024  # bytes, of any token, text or binary input
MAX_NAME_LEN = 64  # bytes, of a cluster or leader name
MAX_TERM = 2**48  # the highest valid term
BINARY_VERSION = 1
TOKEN_PREFIX = b"tf1:"
MAX_KEY_ID_LEN = 32  # bytes, of an HMAC key ID
KEY_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
NAME_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")

MALFORMED = "malformed"
UNSIGNED = "unsigned"
BAD_SIGNATURE = "bad_signature"


class Refused(Exception):
    """A token or form was refused; kind says why (MALFORMED, UNSIGNED,
    BAD_SIGNATURE)."""

    def __init__(self, kind: str, why: str):
        super().__init__(f"{kind}: {why}")
        self.kind = kind


class Epoch(NamedTuple):
    cluster: str
    term: int
    leader: str

    def text(self) -> str:
        return f"{self.cluster}/{self.term}/{self.leader}"


def _check_name(what: str, b: bytes) -> str:
    if not b or len(b) > MAX_NAME_LEN or any(c not in NAME_BYTES for c in b):
        raise Refused(MALFORMED, f"{what} is not 1..{MAX_NAME_LEN} bytes of [A-Za-z0-9._-]")
    return b.decode("ascii")


def _check_term(term: int) -> int:
    if term == 0:
        raise Refused(MALFORMED, "term is 0")
    if term > MAX_TERM:
        raise Refused(MALFORMED, f"term is above {MAX_TERM}")
    return term


def parse_text(b: bytes) -> Epoch:
    """Decode the text form cluster/term/leader (canonical spelling only)."""
    if len(b) > MAX_TOKEN_LEN:
        raise Refused(MALFORMED, f"{len(b)} bytes, more than {MAX_TOKEN_LEN}")
    i = b.find(b"/")
    j = b.find(b"/", i + 1) if i >= 0 else -1
    if i < 0 or j < 0:
        raise Refused(MALFORMED, "not cluster/term/leader")
    digits = b[i + 1 : j]
    if (
        not digits
        or len(digits) > 20
        or (digits[0:1] == b"0" and len(digits) > 1)
        or any(c not in b"0123456789" for c in digits)
    ):
        raise Refused(MALFORMED, "term is not canonical decimal")
    term = int(digits)
    if term > 2**64 - 1:
        raise Refused(MALFORMED, "term overflows 64 bits")
    return Epoch(_check_name("cluster", b[:i]), _check_term(term), _check_name("leader", b[j + 1 :]))


def parse_binary(b: bytes) -> Epoch:
    """Decode the binary form: version 1, the term as a minimal unsigned
    LEB128 varint, then each name as one length byte and its bytes."""
    if len(b) > MAX_TOKEN_LEN:
        raise Refused(MALFORMED, f"{len(b)} bytes, more than {MAX_TOKEN_LEN}")
    if not b:
        raise Refused(MALFORMED, "empty")
    if b[0] != BINARY_VERSION:
        raise Refused(MALFORMED, f"unknown binary version {b[0]}")
    term, shift, n = 0, 0, 0
    for k, c in enumerate(b[1:11]):
        if c < 0x80:
            if k == 9 and c > 1:
                raise Refused(MALFORMED, "term varint overflows 64 bits")
            term |= c << shift
            n = k + 1
            break
        term |= (c & 0x7F) << shift
        shift += 7
    if n == 0:
        raise Refused(MALFORMED, "term varint truncated or too long")
    if n != max(1, (term.bit_length() + 6) // 7):
        raise Refused(MALFORMED, "term varint is not minimal")
    rest = b[1 + n :]
    names = []
    for what in ("cluster", "leader"):
        if not rest or len(rest) - 1 < rest[0]:
            raise Refused(MALFORMED, f"{what} truncated")
        names.append(rest[1 : 1 + rest[0]])
        rest = rest[1 + rest[0] :]
    if rest:
        raise Refused(MALFORMED, f"{len(rest)} trailing bytes")
    return Epoch(_check_name("cluster", names[0]), _check_term(term), _check_name("leader", names[1]))


class Parts(NamedTuple):
    alg: Optional[bytes]  # None: an unsigned (plain) token
    text: bytes
    sig: Optional[bytes]


def split_token(token: bytes) -> Parts:
    """Split a token into algorithm, text form and signature (steps 1-3 of
    docs/TOKEN.md's verification)."""
    if len(token) > MAX_TOKEN_LEN:
        raise Refused(MALFORMED, f"token is {len(token)} bytes, more than {MAX_TOKEN_LEN}")
    if not token.startswith(TOKEN_PREFIX):
        if b":" in token:
            raise Refused(MALFORMED, "unknown token version")
        return Parts(None, token, None)
    alg, sep, rest = token[len(TOKEN_PREFIX) :].partition(b":")
    if not sep or not alg:
        raise Refused(MALFORMED, "token has no algorithm")
    text, sep, sig = rest.partition(b":")
    if not sep or not sig or b":" in sig:
        raise Refused(MALFORMED, "token has no signature")
    return Parts(alg, text, sig)


def signed_bytes(alg: bytes, text: bytes) -> bytes:
    """What a signature covers: "tf1:" alg ":" text."""
    return TOKEN_PREFIX + alg + b":" + text


def verify_plain(token: bytes) -> Epoch:
    """The plain verifier: the epoch of the token's text form. It checks no
    signature (a signed token's signature is ignored): it proves nothing
    about who made the token."""
    return parse_text(split_token(token).text)


def hs256_signature(key: bytes, text: bytes, alg: bytes = b"hs256") -> bytes:
    """The signature part of the token for text with algorithm field alg
    (b"hs256", or b"hs256." + key ID): unpadded base64url of
    HMAC-SHA256(key, "tf1:" alg ":" text)."""
    mac = hmac.new(key, signed_bytes(alg, text), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=")


def hs256_key_id(alg: bytes) -> str:
    """The key ID an hs256 algorithm field names: "" for b"hs256", the ID
    for b"hs256." + ID (1..32 bytes of [A-Za-z0-9_-]); any other field is
    another algorithm: BAD_SIGNATURE."""
    if alg == b"hs256":
        return ""
    kid = alg[len(b"hs256.") :]
    if alg.startswith(b"hs256.") and 0 < len(kid) <= MAX_KEY_ID_LEN and all(c in KEY_ID_BYTES for c in kid):
        return kid.decode("ascii")
    raise Refused(BAD_SIGNATURE, f"token is signed with {alg[:40]!r}, want hs256 or hs256.<key ID>")


HS256Keys = Union[Dict[str, Union[bytes, List[bytes]]], List[bytes]]


def verify_hs256(token: bytes, keys: HS256Keys) -> Epoch:
    """The hs256 verifier: accepts a token signed with HMAC-SHA256 under the
    key its algorithm field names. keys maps a key ID ("" for the key
    without an ID) to its key (or keys); a plain list is keys without an
    ID. Holding old and new keys lets a shared secret be rotated."""
    p = split_token(token)
    if p.alg is None:
        parse_text(p.text)  # a malformed text form is malformed first
        raise Refused(UNSIGNED, "unsigned token")
    kid = hs256_key_id(p.alg)
    named = keys.get(kid, []) if isinstance(keys, dict) else (keys if kid == "" else [])
    if isinstance(named, (bytes, bytearray)):
        named = [named]
    if not named:
        raise Refused(BAD_SIGNATURE, f"no key with ID {kid!r}")
    # Comparing the exact unpadded base64url spelling, in constant time,
    # also refuses padding, the standard alphabet and non-zero unused bits.
    if not any(hmac.compare_digest(p.sig, hs256_signature(k, p.text, p.alg)) for k in named):
        raise Refused(BAD_SIGNATURE, "signature does not verify")
    return parse_text(p.text)


# ---- checking the test vectors -------------------------------------------


def _epoch_json(e: Epoch) -> dict:
    return {"cluster": e.cluster, "term": str(e.term), "leader": e.leader}


def _answer(fn, *args) -> dict:
    try:
        return {"epoch": _epoch_json(fn(*args))}
    except Refused as r:
        return {"error": r.kind}


def _changes(b: bytes):
    """b with one byte changed to each other value, at each position."""
    m = bytearray(b)
    for i, orig in enumerate(b):
        for v in range(256):
            if v != orig:
                m[i] = v
                yield bytes(m)
        m[i] = orig


def check(path: str) -> Tuple[List[str], str]:
    """Check every vector of the file at path, and every one-byte change of
    each valid one; return the failures and a summary."""
    with open(path, encoding="utf-8") as f:
        v = json.load(f)
    fails: List[str] = []
    if (v["max_token_len"], v["max_name_len"], v["max_term"]) != (MAX_TOKEN_LEN, MAX_NAME_LEN, str(MAX_TERM)):
        fails.append("the file's limits are not this verifier's")
    keys: Dict[str, Union[bytes, List[bytes]]] = {"": bytes.fromhex(v["keys"]["hs256"])}
    for k in v["keys"]["hs256_key_ids"]:
        keys[k["id"]] = bytes.fromhex(k["key"])

    def expect(what, name, got, want):
        want = {k: want[k] for k in ("epoch", "error") if k in want}
        if got != want:
            fails.append(f"{what} {name!r}: got {got}, want {want}")

    changed = 0
    for x in v["text"]:
        b = bytes.fromhex(x["hex"])
        expect("text", x["name"], _answer(parse_text, b), x)
        if "epoch" in x:
            orig = parse_text(b)
            for m in _changes(b):
                changed += 1
                try:
                    if parse_text(m) == orig:
                        fails.append(f"text {x['name']!r} changed to {m!r} parses as the same epoch")
                except Refused:
                    pass
    for x in v["binary"]:
        b = bytes.fromhex(x["hex"])
        expect("binary", x["name"], _answer(parse_binary, b), x)
        if "epoch" in x:
            orig = parse_binary(b)
            for m in _changes(b):
                changed += 1
                try:
                    if parse_binary(m) == orig:
                        fails.append(f"binary {x['name']!r} changed to {m.hex()} decodes as the same epoch")
                except Refused:
                    pass
    unchecked = 0
    for x in v["tokens"]:
        b = bytes.fromhex(x["hex"])
        expect("token (plain)", x["name"], _answer(verify_plain, b), x["plain"])
        expect("token (hs256)", x["name"], _answer(verify_hs256, b, keys), x["hs256"])
        # Ed25519: everything but the signature itself.
        try:
            p = split_token(b)
            if p.alg is None:
                parse_text(p.text)
                got = {"error": UNSIGNED}
            elif p.alg != b"ed25519":
                got = {"error": BAD_SIGNATURE}
            else:
                got = None  # the signature would decide
                unchecked += 1
        except Refused as r:
            got = {"error": r.kind}
        if got is not None:
            expect("token (ed25519, without the signature)", x["name"], got, x["ed25519"])
        if "epoch" in x["hs256"]:
            for m in _changes(b):
                changed += 1
                try:
                    e = verify_hs256(m, keys)
                    fails.append(f"token {x['name']!r} changed to {m!r} verifies as {e}")
                except Refused:
                    pass
        if "epoch" in x["plain"] and x["hs256"].get("error") == UNSIGNED:
            orig = verify_plain(b)
            for m in _changes(b):
                changed += 1
                try:
                    if verify_plain(m) == orig:
                        fails.append(f"token {x['name']!r} changed to {m!r} gives the same epoch")
                except Refused:
                    pass
    summary = (
        f"{len(v['text'])} text, {len(v['binary'])} binary, {len(v['tokens'])} token vectors; "
        f"{changed} one-byte changes refused or another epoch; "
        f"{unchecked} Ed25519 signatures not checked (no Ed25519 in Python's standard library)"
    )
    return fails, summary


def main(argv: List[str]) -> int:
    if len(argv) == 3 and argv[1] == "check":
        fails, summary = check(argv[2])
        for f in fails:
            print("FAIL", f)
        if fails:
            print(f"tokenverify: {len(fails)} failures; {summary}")
            return 1
        print(f"tokenverify: all vectors pass: {summary}")
        return 0
    if len(argv) >= 3 and argv[1] == "verify":
        keys: Dict[str, Union[bytes, List[bytes]]] = {}
        allow_plain, rest = False, argv[2:]
        while len(rest) > 1:
            if rest[0] == "--hs256-key-hex":
                keys.setdefault("", []).append(bytes.fromhex(rest[1]))
                rest = rest[2:]
            elif rest[0] == "--hs256-key" and "=" in rest[1]:
                kid, _, hexkey = rest[1].partition("=")
                keys.setdefault(kid, []).append(bytes.fromhex(hexkey))
                rest = rest[2:]
            elif rest[0] == "--allow-plain":
                allow_plain, rest = True, rest[1:]
            else:
                break
        if len(rest) != 1 or not (keys or allow_plain):
            return usage()
        token = rest[0].encode("utf-8", "surrogateescape")
        try:
            if allow_plain and split_token(token).alg is None:
                e = verify_plain(token)
            else:
                e = verify_hs256(token, keys)
        except Refused as r:
            print(json.dumps({"error": r.kind, "why": str(r)}))
            return 1
        print(json.dumps({"epoch": _epoch_json(e)}))
        return 0
    return usage()


def usage() -> int:
    print(
        "usage: tokenverify.py check VECTORS.json\n"
        "       tokenverify.py verify [--hs256-key-hex HEX]... [--hs256-key ID=HEX]... [--allow-plain] TOKEN",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
