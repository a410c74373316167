package transport

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// MutualTLS reads a node's PEM certificate and key and the cluster's PEM CA
// bundle, and returns a TLS configuration for Config.TLS under which both
// ends of every connection must present a certificate signed by that CA
// that names the Raft server it speaks for:
//
//   - the certificate carries exactly one URI SAN urn:termfence:server:<ID>
//     (ServerIDURIPrefix) and both the server-auth and the client-auth
//     extended key usages (a node dials and accepts), or it is no peer: a
//     client-only certificate from the same CA cannot vote, append, send
//     TimeoutNow or join;
//   - the chain of the peer's certificate is verified against the CA for
//     both usages, in both directions, during the handshake
//     (VerifyConnection), so a peer without such a certificate gets a TLS
//     alert before any RPC is read;
//   - TLS 1.3 only.
//
// Identity is the server ID, not an address: the dialled host name or IP
// is not matched against the certificate (Raft nodes are often addressed by
// IP). NewTCP binds the ID to the traffic: an inbound RPC may only claim
// the server ID its connection's certificate names, and a dialled peer must
// present the certificate of the server raft meant to reach. So a node's
// own certificate must name its own server ID (election.Config.ID).
//
// To issue such certificates with openssl (a CA for this cluster only, then
// one certificate per node; TestOpenSSLRecipe runs these very lines):
//
//	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
//	  -subj "/CN=raft CA" -keyout ca.key -out ca.crt
//	for id in n1 n2 n3; do
//	  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
//	    -subj "/CN=$id" -keyout $id.key -out $id.csr
//	  openssl x509 -req -in $id.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -out $id.crt \
//	    -extfile <(printf "subjectAltName=URI:urn:termfence:server:$id\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature")
//	done
//
// The files are read once. MutualTLS fails with an error wrapping
// ErrCertificate if a file cannot be read or parsed, the key does not match
// the certificate, the certificate does not verify against the CA now
// (wrong CA, expired, not yet valid), or it names no usable server identity
// (the error then also wraps ErrNoIdentity).
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
	var chain []*x509.Certificate
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			chain = append(chain, c)
		}
	}
	if _, err := verifyPeer(tls.ConnectionState{PeerCertificates: append([]*x509.Certificate{leaf}, chain...)}, pool); err != nil {
		return nil, fmt.Errorf("%w: %s against %s: %w", ErrCertificate, certFile, caFile, err)
	}

	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		RootCAs:      pool,
		// crypto/tls's own client-side verification would also match the
		// dialled host against the certificate's names; VerifyConnection
		// below verifies the chain and the identity instead (see above).
		InsecureSkipVerify: true, //nolint:gosec // chain verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyPeer(cs, pool)
			return err
		},
	}, nil
}
