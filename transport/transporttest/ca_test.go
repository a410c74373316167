package transporttest_test

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/termfence/termfence/transport"
	"github.com/termfence/termfence/transport/transporttest"
)

func TestIssue(t *testing.T) {
	ca, err := transporttest.NewCA(t.TempDir(), "c")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spec transporttest.Spec
		ok   bool
	}{
		{transporttest.Spec{Name: "n1"}, true},
		{transporttest.Spec{Name: "op", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, false},
		{transporttest.Spec{Name: "anon", IDs: []string{}}, false},
		{transporttest.Spec{Name: "old", NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, false},
	}
	for _, c := range cases {
		cert, key, err := ca.Issue(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec.Name, err)
		}
		_, err = transport.MutualTLS(cert, key, ca.CertFile)
		if c.ok != (err == nil) || (!c.ok && !errors.Is(err, transport.ErrCertificate)) {
			t.Errorf("%s: MutualTLS err %v, want ok=%v", c.spec.Name, err, c.ok)
		}
	}
	if _, _, err := ca.Issue(transporttest.Spec{}); err == nil {
		t.Error("Issue without a name succeeded")
	}
	if _, _, err := ca.Peer("bad id"); err == nil {
		t.Error("Peer with an invalid ID succeeded")
	}
}
