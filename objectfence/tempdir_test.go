package objectfence_test

import (
	"os"
	"testing"
)

// tempDir is a directory for the shared server, removed by TestMain.
func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "objectfence-versitygw-")
	if err == nil {
		sharedDir = d
	}
	return d, err
}

var sharedDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		if err := srv.Close(); err != nil {
			println(err.Error())
			code = 1
		}
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}
