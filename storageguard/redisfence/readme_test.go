package redisfence_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEShowsTheExample: README.md's Redis snippet is Example's code
// between its README markers, one tab less indented, so what the README
// shows compiles and runs (Example runs it).
func TestREADMEShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "\t// README begin\n")
	region, _, ok2 := strings.Cut(rest, "\t// README end\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no README markers")
	}
	lines := strings.Split(region, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "\t")
	}
	if !strings.Contains(string(readme), "```go\n"+strings.Join(lines, "\n")+"```\n") {
		t.Fatal("README.md's Redis snippet is not Example's code between its README markers; copy it again")
	}
}
