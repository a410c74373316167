// Package transporttest issues the certificates that tests of mutual TLS
// need: a throwaway certificate authority (NewCA) and, from it, node
// certificates that name a Raft server ID as transport.MutualTLS requires
// (CA.Peer), and the certificates an attacker would hold (CA.Issue with a
// Spec: client-only, naming no server or another, expired). Everything is
// written as PEM files, as MutualTLS reads them.
//
// # Guarantees
//
//   - A certificate from CA.Peer(id) passes transport.MutualTLS with the
//     CA's CertFile and names server id.
//   - Nothing here imports package testing; errors are returned.
//
// # Non-guarantees
//
//   - For tests and demos only: keys are Ed25519, generated per call,
//     written without a passphrase (mode 0600), and the CA lives a day.
//   - Serial numbers are unique per CA value, not across CAs.
package transporttest
