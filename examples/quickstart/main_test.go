package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestRun runs the README's program: the leader's write lands, the write
// under its token after a successor's is refused.
func TestRun(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out bytes.Buffer
	if err := run(context.Background(), &out, strings.Repeat("k", 32)); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"wrote order 1 under payments/", "/node-a\n", "late write refused: true\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestShortKeyRefused: the program says what is wrong with the key instead
// of starting anything.
func TestShortKeyRefused(t *testing.T) {
	err := run(context.Background(), &bytes.Buffer{}, "short")
	if err == nil || !strings.Contains(err.Error(), "TERMFENCE_KEY") {
		t.Fatalf("run with a 5-byte key: %v, want an error naming TERMFENCE_KEY", err)
	}
}

// TestREADMEShowsThisProgram: the README's usage snippet is this file from
// its package clause on, so what the README shows compiles and runs as
// written (TestRun runs it).
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	prog := string(src[bytes.Index(src, []byte("package main")):])
	if !strings.Contains(string(readme), "```go\n"+prog+"```\n") {
		t.Fatal("README.md's usage snippet is not examples/quickstart/main.go from its package clause on; copy it again")
	}
}
