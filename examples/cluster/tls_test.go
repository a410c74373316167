package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termfence/termfence/transport"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM
}

func newCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a peer certificate and key for Raft server name — usable as
// both TLS server and client, naming the server in a URI SAN, as
// transport.MutualTLS requires — and returns their files.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issueUsages(t, dir, name, true)
}

// issueUsages is issue; a non-peer certificate is client-only and names no
// server (an operator's, for curl).
func (ca *testCA) issueUsages(t *testing.T, dir, name string, peer bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if peer {
		u, err := transport.ServerIDURI(name)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tlsClient returns a client that trusts ca and presents cert (if any).
func tlsClient(t *testing.T, ca *testCA, certFile, keyFile string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return client(&http.Transport{TLSClientConfig: conf})
}

// TestTLSJoinNeedsClusterCertificate runs a node with mutual TLS and shows
// that POST /join and POST /resign from a client without a certificate from
// the cluster's CA are refused (no certificate, or one from another CA),
// while a node with a cluster certificate joins through the same endpoint.
func TestTLSJoinNeedsClusterCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "cluster-ca")
	other := newCA(t, dir, "other-ca")
	n1crt, n1key := ca.issue(t, dir, "n1")
	n2crt, n2key := ca.issue(t, dir, "n2")
	opcrt, opkey := ca.issueUsages(t, dir, "operator", false) // client-only: the API takes it, the Raft port would not
	evilcrt, evilkey := other.issue(t, dir, "intruder")

	raft := freePorts(t, 2)
	tlsFlags := func(crt, key string) []string {
		return []string{"-tls-cert", crt, "-tls-key", key, "-tls-ca", ca.file}
	}
	af1 := filepath.Join(dir, "n1.addr")
	n1 := start(t, "n1", append([]string{"node", "-id", "n1", "-raft", raft[0], "-data", filepath.Join(dir, "n1"),
		"-bootstrap", "n1=" + raft[0], "-heartbeat", "200ms", "-addr-file", af1}, tlsFlags(n1crt, n1key)...)...)
	url1 := "https://" + field(addrFile(t, af1, n1), "http")

	op := tlsClient(t, ca, opcrt, opkey)
	waitUntil(t, 20*time.Second, "n1 leads its one-node cluster", func() (bool, string) {
		var st nodeStatus
		if err := getJSON(op, url1+"/status", &st); err != nil {
			return false, err.Error()
		}
		return st.Epoch != "", st.State
	})

	join := `{"id":"n9","addr":"127.0.0.1:1"}`
	for name, hc := range map[string]*http.Client{
		"no client certificate":              tlsClient(t, ca, "", ""),
		"certificate from another CA":        tlsClient(t, ca, evilcrt, evilkey),
		"plain HTTP to the TLS API (no TLS)": client(nil),
	} {
		for _, path := range []string{"/join", "/resign"} {
			body := join
			if path == "/resign" {
				body = "{}"
			}
			url := url1 + path
			if strings.HasPrefix(name, "plain") {
				url = "http" + strings.TrimPrefix(url, "https")
			}
			status, reply, err := post(hc, url, body)
			if err == nil && status < 400 {
				t.Errorf("%s: POST %s answered %d %s; want the connection refused", name, path, status, reply)
			}
		}
	}
	var st nodeStatus
	if err := getJSON(op, url1+"/status", &st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Voters, []string{"n1"}) || st.Epoch == "" {
		t.Fatalf("after the refused requests n1's status is %+v; want n1 still the only voter and leader", st)
	}

	// With a cluster certificate the API works: a malformed join gets a
	// clear 400, and a real node joins.
	if status, reply, err := post(op, url1+"/join", `{"id":`); err != nil || status != http.StatusBadRequest || !strings.Contains(reply, "malformed JSON") {
		t.Errorf("malformed join: %d %q %v; want 400 naming the malformed JSON", status, reply, err)
	}
	if status, reply, err := post(op, url1+"/join", `{"id":"bad id!","addr":"x:1"}`); err != nil || status != http.StatusBadRequest {
		t.Errorf("join with a bad id: %d %q %v; want 400", status, reply, err)
	}
	if status, reply, err := post(op, url1+"/transfer", `{"id":"n7"}`); err != nil || status != http.StatusNotFound || !strings.Contains(reply, "n7") {
		t.Errorf("transfer to an unknown node: %d %q %v; want 404 naming it", status, reply, err)
	}
	af2 := filepath.Join(dir, "n2.addr")
	start(t, "n2", append([]string{"node", "-id", "n2", "-raft", raft[1], "-data", filepath.Join(dir, "n2"),
		"-join", url1, "-heartbeat", "200ms", "-addr-file", af2}, tlsFlags(n2crt, n2key)...)...)
	waitUntil(t, 20*time.Second, "n2 joins over mutual TLS", func() (bool, string) {
		var st nodeStatus
		if err := getJSON(op, url1+"/status", &st); err != nil {
			return false, err.Error()
		}
		return slices.Equal(st.Voters, []string{"n1", "n2"}), strings.Join(st.Voters, ",")
	})
}

// TestWideAPIWarnsOnlyWithoutTLS: a node whose HTTP API listens beyond
// loopback warns that anyone who reaches it may run admin calls — unless
// -tls-* is set, when the API already demands a certificate from the
// cluster CA and there is nothing to warn about.
func TestWideAPIWarnsOnlyWithoutTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "cluster-ca")
	crt, key := ca.issue(t, dir, "n1")
	raft := freePorts(t, 2)
	const warning = "HTTP API listens beyond loopback"
	for i, withTLS := range []bool{true, false} {
		args := []string{"node", "-id", "n1", "-raft", raft[i], "-data", filepath.Join(dir, fmt.Sprint("n", i)),
			"-bootstrap", "n1=" + raft[i], "-heartbeat", "200ms", "-http", "0.0.0.0:0"}
		if withTLS {
			args = append(args, "-tls-cert", crt, "-tls-key", key, "-tls-ca", ca.file)
		}
		p := start(t, fmt.Sprint("wide-api-tls-", withTLS), args...)
		waitUntil(t, 20*time.Second, "the node runs", func() (bool, string) {
			return strings.Contains(p.log.String(), "node running"), p.log.String()
		})
		if got := strings.Contains(p.log.String(), warning); got == withTLS {
			t.Errorf("TLS %v: warned %v, want %v:\n%s", withTLS, got, !withTLS, p.log.String())
		}
	}
}
