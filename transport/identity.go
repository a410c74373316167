package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/termfence/termfence/epoch"
)

// ServerIDURIPrefix begins the URI subject alternative name that names the
// Raft server ID a certificate speaks for: a peer's certificate for server
// "n1" carries exactly one URI SAN "urn:termfence:server:n1" (with openssl:
// subjectAltName=URI:urn:termfence:server:n1). Other SANs (DNS names, IPs,
// other URIs) may be present and are ignored.
const ServerIDURIPrefix = "urn:termfence:server:"

var (
	// ErrNoIdentity is wrapped when a certificate names no server ID, names
	// more than one, names an invalid one (1..64 bytes of [A-Za-z0-9._-]),
	// or lacks one of the extended key usages a Raft peer needs (server-auth
	// and client-auth: a node both accepts and dials). Such a certificate
	// cannot be a peer: a client-only certificate from the cluster CA (an
	// operator's curl certificate, say) cannot vote, append or join.
	ErrNoIdentity = errors.New("transport: certificate names no usable server identity")

	// ErrIdentityMismatch is wrapped when a peer speaks for another server
	// than its certificate names: an inbound RPC whose header claims
	// another server ID (answered with this error), or a dialled peer whose
	// certificate names another server than the one raft meant to reach
	// (the dial fails).
	ErrIdentityMismatch = errors.New("transport: peer identity does not match its certificate")
)

// ServerIDURI returns the URI to put in a certificate as its one URI SAN for
// server id. It fails for an invalid id.
func ServerIDURI(id string) (*url.URL, error) {
	if err := epoch.ValidateName(id); err != nil {
		return nil, fmt.Errorf("transport: server ID %q: %v", id, err)
	}
	return url.Parse(ServerIDURIPrefix + id)
}

// ServerIDFromCertificate returns the server ID that cert names (see
// ServerIDURIPrefix), checking that it is the only one, that it is valid,
// and that cert carries both the server-auth and the client-auth extended
// key usages (or the any-usage one). The error wraps ErrNoIdentity. It does
// not verify the certificate's chain.
func ServerIDFromCertificate(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", fmt.Errorf("%w: no certificate", ErrNoIdentity)
	}
	var ids []string
	for _, u := range cert.URIs {
		if s := u.String(); strings.HasPrefix(s, ServerIDURIPrefix) {
			ids = append(ids, strings.TrimPrefix(s, ServerIDURIPrefix))
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("%w: %q has no URI SAN %s<id>", ErrNoIdentity, cert.Subject.String(), ServerIDURIPrefix)
	case 1:
	default:
		return "", fmt.Errorf("%w: %q names %d server IDs %q", ErrNoIdentity, cert.Subject.String(), len(ids), ids)
	}
	if err := epoch.ValidateName(ids[0]); err != nil {
		return "", fmt.Errorf("%w: %q names server ID %q: %v", ErrNoIdentity, cert.Subject.String(), ids[0], err)
	}
	var server, client bool
	for _, u := range cert.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageAny:
			server, client = true, true
		case x509.ExtKeyUsageServerAuth:
			server = true
		case x509.ExtKeyUsageClientAuth:
			client = true
		}
	}
	if !server || !client {
		return "", fmt.Errorf("%w: %q (server ID %s) has serverAuth %v and clientAuth %v; a Raft peer needs both extended key usages",
			ErrNoIdentity, cert.Subject.String(), ids[0], server, client)
	}
	return ids[0], nil
}

// verifyPeer checks a peer's certificate chain against roots for both the
// server-auth and the client-auth usage and returns the server ID its leaf
// names. The transport calls it after every handshake, in both directions,
// whatever the tls.Config says; MutualTLS's VerifyConnection calls it
// during the handshake, so that a peer that fails it gets a TLS alert.
func verifyPeer(cs tls.ConnectionState, roots *x509.CertPool) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errNoPeerCertificate
	}
	leaf := cs.PeerCertificates[0]
	id, err := ServerIDFromCertificate(leaf)
	if err != nil {
		return "", err
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			CurrentTime:   time.Now(),
			KeyUsages:     []x509.ExtKeyUsage{u},
		}); err != nil {
			return "", fmt.Errorf("transport: peer certificate %q: %w", leaf.Subject.String(), err)
		}
	}
	return id, nil
}

// errNoPeerCertificate is wrapped when a peer presents no certificate.
var errNoPeerCertificate = fmt.Errorf("%w: peer presented no certificate", ErrNoIdentity)
