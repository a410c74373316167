package chaos

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if buildDir != "" {
			_ = os.RemoveAll(buildDir)
		}
		os.Exit(code)
	}))
}
