package transport

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// docRecipe returns the shell lines of the openssl recipe in MutualTLS's doc
// comment (tls.go): the tab-indented lines after "To issue such
// certificates with openssl", without the comment marker.
func docRecipe(t *testing.T) string {
	t.Helper()
	f, err := os.Open("tls.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.Contains(l, "To issue such certificates with openssl"):
			in = true
		case in && strings.HasPrefix(l, "//\t"):
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		case in && len(lines) > 0:
			return strings.Join(lines, "\n") + "\n"
		}
	}
	t.Fatal("no openssl recipe found in tls.go")
	return ""
}

// TestOpenSSLRecipe runs the openssl commands of MutualTLS's doc comment,
// as written, with the system's openssl (Debian's here), and uses what they
// make: MutualTLS accepts each node certificate and reads its server ID,
// and two transports built from them exchange an RPC over mutual TLS.
func TestOpenSSLRecipe(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", docRecipe(t))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}
	mk := func(id string) Transport {
		cfg, err := MutualTLS(filepath.Join(dir, id+".crt"), filepath.Join(dir, id+".key"), filepath.Join(dir, "ca.crt"))
		if err != nil {
			t.Fatalf("MutualTLS(%s): %v", id, err)
		}
		tr := newTestTCP(t, Config{TLS: cfg, Timeout: 2 * time.Second})
		if got := LocalServerID(tr); got != id {
			t.Fatalf("%s.crt names server %q", id, got)
		}
		return tr
	}
	n1, n2 := mk("n1"), mk("n2")
	mk("n3")
	answer(t, n2)
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(n1.LocalAddr())}, Term: 1}
	if err := n1.AppendEntries("n2", n2.LocalAddr(), req, &raft.AppendEntriesResponse{}); err != nil {
		t.Fatalf("n1 -> n2 over the recipe's certificates: %v", err)
	}
	// The same commands without the URI SAN give a certificate MutualTLS
	// refuses: the recipe's SAN line is what makes a peer.
	bad := exec.Command("bash", "-euo", "pipefail", "-c", strings.ReplaceAll(docRecipe(t), "subjectAltName=URI:urn:termfence:server:$id\\n", ""))
	bad.Dir = t.TempDir()
	if out, err := bad.CombinedOutput(); err != nil {
		t.Fatalf("the recipe without the SAN failed: %v\n%s", err, out)
	}
	if _, err := MutualTLS(filepath.Join(bad.Dir, "n1.crt"), filepath.Join(bad.Dir, "n1.key"), filepath.Join(bad.Dir, "ca.crt")); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("a certificate without the URI SAN: %v, want ErrNoIdentity", err)
	}
}
