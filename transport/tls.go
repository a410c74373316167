package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// MutualTLS reads a node's PEM certificate and key and the cluster's PEM CA
// bundle, and returns a TLS configuration for Config.TLS under which both
// ends of every connection must present a certificate signed by that CA:
//
//   - accepting: tls.RequireAndVerifyClientCert against the CA, with the
//     client-auth extended key usage;
//   - dialling: the peer's chain is verified against the CA, with the
//     server-auth extended key usage, in VerifyConnection;
//   - TLS 1.3 only.
//
// Peer identity is cluster membership, not an address: the dialled host name
// or IP is not matched against the peer certificate's names, because Raft
// nodes are often addressed by IP and certificates are often issued per node
// name. Any certificate the CA signed (and that is within its validity
// period) is accepted as a peer, so use a CA dedicated to the cluster, and
// give node certificates both the server-auth and client-auth extended key
// usages. To verify host names instead, build your own tls.Config with
// RootCAs and leave ServerName empty: NewTCP then sets ServerName to the
// dialled host.
//
// The files are read once. MutualTLS fails with an error wrapping
// ErrCertificate if a file cannot be read or parsed, the key does not match
// the certificate, or the certificate does not verify against the CA now
// (wrong CA, expired, not yet valid).
func MutualTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("%w: certificate: %w", ErrCertificate, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: key: %w", ErrCertificate, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %w", ErrCertificate, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %w", ErrCertificate, certFile, keyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s: no PEM certificate found", ErrCertificate, caFile)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCertificate, certFile, err)
		}
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, fmt.Errorf("%w: %s does not verify against %s: %w", ErrCertificate, certFile, caFile, err)
	}

	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		RootCAs:      pool,
		// crypto/tls's own client-side verification would also match the
		// dialled host against the certificate's names; VerifyConnection
		// below verifies the chain against the CA instead (see above).
		InsecureSkipVerify: true, //nolint:gosec // chain verified in VerifyConnection
		VerifyConnection:   verifyPeerChain(pool),
	}, nil
}

// errNoPeerCertificate is wrapped when a peer presents no certificate.
var errNoPeerCertificate = errors.New("transport: peer presented no certificate")

// verifyPeerChain accepts a connection only if the peer's certificate chain
// verifies against roots. On the accepting side crypto/tls has already done
// so (RequireAndVerifyClientCert fills VerifiedChains); on the dialling side
// it is done here, without host name matching.
func verifyPeerChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) > 0 {
			return nil
		}
		if len(cs.PeerCertificates) == 0 {
			return errNoPeerCertificate
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: inter,
			CurrentTime:   time.Now(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("transport: peer certificate: %w", err)
		}
		return nil
	}
}
