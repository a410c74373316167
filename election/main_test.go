package election

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	runPowerChild() // powercut_linux_test.go
	goleak.VerifyTestMain(m)
}
