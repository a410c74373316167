package redisfence_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/internal/skiptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skiptest.Wrap(m)) }
