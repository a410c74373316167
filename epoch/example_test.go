package epoch_test

import (
	"errors"
	"fmt"

	"github.com/termfence/termfence/epoch"
)

func Example() {
	// The leader of term 33 was paused; node-b won term 34 meanwhile.
	old := epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"}
	cur := epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"}
	fmt.Println(old, "vs", cur, "=", old.Compare(cur))
	// Output: payments/33/node-a vs payments/34/node-b = -1
}

func ExampleNewHMAC() {
	codec, err := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes!"))
	if err != nil {
		panic(err)
	}
	tok, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})
	e, err := codec.Verify(tok)
	fmt.Println(e, err)

	forged := tok[:len(tok)-1] + "A"
	if tok[len(tok)-1] == 'A' {
		forged = tok[:len(tok)-1] + "B"
	}
	_, err = codec.Verify(forged)
	fmt.Println(errors.Is(err, epoch.ErrBadSignature))

	_, err = codec.Verify("payments/99/mallory")
	fmt.Println(errors.Is(err, epoch.ErrUnsigned))
	// Output:
	// payments/34/node-b <nil>
	// true
	// true
}

func ExampleParse() {
	e, err := epoch.Parse("payments/34/node-b")
	fmt.Println(e.Cluster, e.Term, e.Leader, err)
	_, err = epoch.Parse("payments/034/node-b")
	fmt.Println(errors.Is(err, epoch.ErrMalformed))
	// Output:
	// payments 34 node-b <nil>
	// true
}
