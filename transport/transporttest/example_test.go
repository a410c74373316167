package transporttest_test

import (
	"fmt"
	"os"

	"github.com/termfence/termfence/transport"
	"github.com/termfence/termfence/transport/transporttest"
)

// A CA for one test cluster, a peer certificate for server n1, and the TLS
// configuration MutualTLS builds from them.
func Example() {
	dir, err := os.MkdirTemp("", "ca")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ca, err := transporttest.NewCA(dir, "test cluster")
	if err != nil {
		fmt.Println(err)
		return
	}
	cert, key, err := ca.Peer("n1")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := transport.MutualTLS(cert, key, ca.CertFile)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := transport.ServerIDFromCertificate(cfg.Certificates[0].Leaf)
	fmt.Println(id, err)
	// Output: n1 <nil>
}
