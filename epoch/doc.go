// Package epoch is the fencing token that termfence hands to a Raft leader.
//
// An [Epoch] names an election group (Cluster), the Raft term its leader won
// (Term) and that leader's Raft server ID (Leader). Terms only grow, and Raft
// elects at most one leader per term, so a resource that remembers the highest
// epoch it has accepted can refuse every request from a deposed leader: a
// leader paused by GC, SIGSTOP or a VM migration that wakes up still believing
// it leads presents an older term and is refused.
//
// This package is standard-library only, so a storage owner can verify tokens
// without linking Raft.
//
// # Forms
//
// The text form ([Epoch.String], [Parse]) is "cluster/term/leader", for example
// "payments/34/node-b". It is canonical: Parse(e.String()) == e for every valid
// e, and Parse refuses any other spelling (leading zeros, signs, spaces).
// The binary form ([Epoch.MarshalBinary]) is compact and starts with a version
// byte.
//
// A token is what travels on the wire, in the [Header] HTTP header or
// elsewhere. [Plain] tokens are the text form, unsigned. Signed tokens are
// "tf1:<alg>:<text form>:<signature>", where the signature is unpadded
// base64url over "tf1:<alg>:<text form>" (the version, the whole algorithm
// field and the text form) and alg is one of:
//
//	hs256            HMAC-SHA256 under a key without an ID ([NewHMAC])
//	hs256.<key ID>   HMAC-SHA256 under the key with that ID ([NewHMACKeys]);
//	                 key ID = 1*32( ALPHA / DIGIT / "_" / "-" )
//	ed25519          Ed25519 ([NewEd25519Signer])
//
// A verifier with several HMAC keys picks the one the token names (a token
// without a key ID needs a key without one), so a shared secret can be
// rotated: verifiers accept old and new, signers switch, verifiers retire
// the old key ([NewHMACKeys] says how). Tokens of the original form,
// "tf1:hs256:<text form>:<signature>", keep verifying under a key without
// an ID. Every token is at most [MaxTokenLen] bytes.
//
// # Guarantees
//
//   - Every decoder (Parse, UnmarshalText, UnmarshalBinary, Verify) refuses
//     malformed input with an error that wraps [ErrMalformed], caps the input
//     at [MaxTokenLen] bytes before doing any work, and never panics.
//   - A signing verifier refuses an unsigned token with [ErrUnsigned] and a
//     token whose bytes were changed, or that was signed with another key, with
//     [ErrBadSignature].
//   - No valid Epoch has a term above [MaxTerm] (2^48): every decoder, codec
//     and fence refuses one, so a forged huge term cannot lock a fence.
//   - [Epoch.Compare] and [Epoch.IsZero] do not allocate.
//
// # Non-guarantees
//
//   - A token is not a secret and not a capability by itself: it proves who
//     signed it, not that its leader still leads. Only a resource that keeps the
//     highest epoch (package storageguard) turns it into a fence.
//   - Tokens do not expire and are not bound to a request; anyone who sees a
//     valid token can replay it. A replayed old token is refused by the fence
//     once a newer one was seen; a replayed current token is not.
//   - [Plain] verifies nothing: with it, anyone who can reach the resource can
//     present any epoch, including a huge forged term that locks real leaders
//     out. Use a signing codec wherever tokens cross a trust boundary.
package epoch
