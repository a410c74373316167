package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeRecipe returns the shell block that follows the README's marker
// comment "TestREADMECertificates runs the next block".
func readmeRecipe(t *testing.T) string {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	state := 0 // 0 before the marker, 1 before the fence, 2 inside
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case state == 0 && strings.Contains(l, "TestREADMECertificates runs the next block"):
			state = 1
		case state == 1 && strings.HasPrefix(l, "```"):
			state = 2
		case state == 2 && strings.HasPrefix(l, "```"):
			return strings.Join(lines, "\n") + "\n"
		case state == 2:
			lines = append(lines, l)
		}
	}
	t.Fatal("README.md has no marked openssl block")
	return ""
}

// TestREADMECertificates runs the README's openssl commands as written,
// with the system's openssl (Debian's here), and runs the example on what
// they make: n1 leads over mutual TLS; the operator's client-only
// certificate works against the HTTPS API, as curl uses it; n2 joins with
// its certificate; and a node started with the operator's certificate, or
// with another node's, refuses to start.
func TestREADMECertificates(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", readmeRecipe(t))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's openssl commands failed: %v\n%s", err, out)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	tlsFlags := func(name string) []string {
		return []string{"-tls-cert", f(name + ".crt"), "-tls-key", f(name + ".key"), "-tls-ca", f("ca.crt")}
	}
	raft := freePorts(t, 3)
	af1 := f("n1.addr")
	n1 := start(t, "n1", append([]string{"node", "-id", "n1", "-raft", raft[0], "-data", f("data-n1"),
		"-bootstrap", "n1=" + raft[0], "-heartbeat", "200ms", "-addr-file", af1}, tlsFlags("n1")...)...)
	url1 := "https://" + field(addrFile(t, af1, n1), "http")

	// curl --cacert ca.crt --cert operator.crt --key operator.key
	caPEM, err := os.ReadFile(f("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(f("operator.crt"), f("operator.key"))
	if err != nil {
		t.Fatal(err)
	}
	op := client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13}})
	waitUntil(t, 20*time.Second, "n1 leads, seen with the operator's certificate", func() (bool, string) {
		var st nodeStatus
		if err := getJSON(op, url1+"/status", &st); err != nil {
			return false, err.Error()
		}
		return st.Epoch != "", st.State
	})
	af2 := f("n2.addr")
	start(t, "n2", append([]string{"node", "-id", "n2", "-raft", raft[1], "-data", f("data-n2"),
		"-join", url1, "-heartbeat", "200ms", "-addr-file", af2}, tlsFlags("n2")...)...)
	waitUntil(t, 20*time.Second, "n2 joins over mutual TLS", func() (bool, string) {
		var st nodeStatus
		if err := getJSON(op, url1+"/status", &st); err != nil {
			return false, err.Error()
		}
		return slices.Equal(st.Voters, []string{"n1", "n2"}), strings.Join(st.Voters, ",")
	})
	for _, bad := range []struct{ name, cert, want string }{
		{"the operator's certificate", "operator", "server identity"},
		{"n2's certificate as n3", "n2", "names server n2"},
	} {
		p := start(t, "n3", append([]string{"node", "-id", "n3", "-raft", raft[2], "-data", f("data-n3-" + bad.cert),
			"-join", url1, "-heartbeat", "200ms"}, tlsFlags(bad.cert)...)...)
		if code := p.wait(20 * time.Second); code == 0 {
			t.Errorf("n3 with %s started", bad.name)
		}
		if out := p.log.String(); !strings.Contains(out, bad.want) {
			t.Errorf("n3 with %s: output does not say %q:\n%s", bad.name, bad.want, out)
		}
	}
}
