package chaos

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/internal/skiptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(skiptest.Wrap(m), goleak.Cleanup(func(code int) {
		if buildDir != "" {
			_ = os.RemoveAll(buildDir)
		}
		os.Exit(code)
	}))
}
