package netlab_test

import (
	"context"
	"fmt"
	"log"

	"github.com/termfence/termfence/internal/netlab"
)

// Three hosts; a server on n2; n1 is refused by n2's link, then healed.
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2, so it has no
// Output line and is compiled, not run, by go test.
func Example() {
	ctx := context.Background()
	lab, err := netlab.New(ctx, netlab.Config{Hosts: []string{"n1", "n2", "n3"}})
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Close()
	n1, n2 := lab.Host("n1"), lab.Host("n2")

	ln, err := n2.Listen(ctx, "tcp", n2.HostPort(7000))
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()

	_ = lab.Block(ctx, n1, n2, netlab.Refused)
	_, err = n1.DialContext(ctx, "tcp", n2.HostPort(7000))
	fmt.Println(err) // dial tcp 198.18.0.2:7000: connect: connection refused

	_ = lab.Heal(ctx)
	c, err := n1.DialContext(ctx, "tcp", n2.HostPort(7000))
	if err == nil {
		c.Close()
	}
	fmt.Println(err) // <nil>

	// A program on a host: its process is the program's own.
	out, _ := n2.Command(ctx, "ip", "-brief", "addr", "show", "eth0").Output()
	fmt.Print(string(out)) // eth0@if4  UP  198.18.0.2/24
}
