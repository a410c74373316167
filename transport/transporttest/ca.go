package transporttest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/termfence/termfence/transport"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	Dir      string // where its files and the certificates it issues are written
	CertFile string // the CA certificate, PEM: give it to MutualTLS as caFile

	cert   *x509.Certificate
	key    ed25519.PrivateKey
	serial atomic.Int64
}

// NewCA creates a CA named name, valid for a day, and writes its
// certificate to dir.
func NewCA(dir, name string) (*CA, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &CA{Dir: dir, key: key}
	ca.serial.Store(1)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, err
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	if ca.CertFile, err = writePEM(dir, name+"-ca.crt", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Spec says what certificate to issue. The zero value of each field but
// Name takes the peer default.
type Spec struct {
	Name string // common name and file name stem; required
	// IDs are the server IDs named in URI SANs; nil means []string{Name}
	// (a peer's certificate), an empty non-nil slice none.
	IDs []string
	// Usages are the extended key usages; nil means server-auth and
	// client-auth (a peer's).
	Usages []x509.ExtKeyUsage
	// NotBefore and NotAfter bound validity; zero means an hour ago and a
	// day from now.
	NotBefore, NotAfter time.Time
	// DNSNames and IPs are extra SANs (for HTTPS clients that check names).
	DNSNames []string
}

// Peer issues the certificate of Raft server id.
func (ca *CA) Peer(id string) (certFile, keyFile string, err error) {
	return ca.Issue(Spec{Name: id})
}

// Issue issues a certificate to s and writes it and its key to ca.Dir.
func (ca *CA) Issue(s Spec) (certFile, keyFile string, err error) {
	if s.Name == "" {
		return "", "", fmt.Errorf("transporttest: Spec.Name is required")
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	ids := s.IDs
	if ids == nil {
		ids = []string{s.Name}
	}
	usages := s.Usages
	if usages == nil {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	notBefore, notAfter := s.NotBefore, s.NotAfter
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: s.Name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     s.DNSNames,
	}
	for _, id := range ids {
		u, err := transport.ServerIDURI(id)
		if err != nil {
			return "", "", err
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return "", "", err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	if certFile, err = writePEM(ca.Dir, s.Name+".crt", "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if keyFile, err = writePEM(ca.Dir, s.Name+".key", "PRIVATE KEY", pkcs8); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writePEM(dir, name, typ string, der []byte) (string, error) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return "", err
	}
	return p, nil
}
