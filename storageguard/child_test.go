package storageguard_test

import (
	"fmt"
	"os"
)

// childEnv names the role the re-executed test binary plays; see TestMain.
const childEnv = "TERMFENCE_STORAGEGUARD_CHILD"

// childRoles maps a role name to its body, which returns the exit code.
var childRoles = map[string]func() int{}

func runChild(role string) int {
	fn, ok := childRoles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "storageguard test child: unknown role %q\n", role)
		return 2
	}
	return fn()
}
