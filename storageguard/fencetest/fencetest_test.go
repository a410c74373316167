package fencetest_test

import (
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/fencetest"
)

func TestMain(m *testing.M) {
	fencetest.RunChild(harnessDurable) // returns unless this process is a child
	goleak.VerifyTestMain(m)
}

func TestCheckSpansDetects(t *testing.T) {
	good := []fencetest.Span{{1, 0, 3}, {1, 1, 2}, {2, 4, 6}, {2, 5, 7}, {5, 8, 9}}
	if err := fencetest.CheckSpans(good); err != nil {
		t.Fatal(err)
	}
	overlap := []fencetest.Span{{1, 0, 5}, {2, 4, 6}}
	if fencetest.CheckSpans(overlap) == nil {
		t.Fatal("missed an older write still running when a newer started")
	}
	late := []fencetest.Span{{2, 0, 1}, {1, 2, 3}}
	if fencetest.CheckSpans(late) == nil {
		t.Fatal("missed an older write that started after a newer one")
	}
}

// TestSpanLog: AppendSpan and ReadSpans agree, the line order is the clock,
// and a log with a write that never ended, or one writer inside twice, is
// refused.
func TestSpanLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := fencetest.AppendSpan(path, 3, 1, func() {
		if err := fencetest.AppendSpan(path, 3, 2, nil); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	spans, err := fencetest.ReadSpans(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []fencetest.Span{{3, 1, 2}, {3, 0, 3}}
	if len(spans) != 2 || spans[0] != want[0] || spans[1] != want[1] {
		t.Fatalf("spans = %v, want %v", spans, want)
	}
	// Writer 1 starts again inside its own write: the log cannot say which
	// end is whose.
	if err := fencetest.AppendSpan(path, 4, 1, func() { fencetest.AppendSpan(path, 4, 1, nil) }); err != nil {
		t.Fatal(err)
	}
	if _, err := fencetest.ReadSpans(path); err == nil {
		t.Fatal("a writer that started twice read as a valid log")
	}
}

// TestSuiteOnMemory runs the suite on the simplest fence, so that the suite
// itself is checked wherever this package's tests run.
func TestSuiteOnMemory(t *testing.T) {
	fencetest.Run(t, fencetest.Kind{Open: func(t *testing.T) storageguard.Fence {
		m := storageguard.NewMemory()
		t.Cleanup(func() { m.Close() })
		return m
	}})
}
