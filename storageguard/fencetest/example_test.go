package fencetest_test

import (
	"fmt"

	"github.com/termfence/termfence/storageguard/fencetest"
)

// A history of accepted writes (logical start and end times per term) as
// a fence may produce it, and one it must never produce: a write under
// term 33 still running when one under term 34 started.
func ExampleCheckSpans() {
	fenced := []fencetest.Span{
		{Term: 33, Start: 0, End: 2},
		{Term: 33, Start: 1, End: 3}, // same term: concurrent is fine
		{Term: 34, Start: 4, End: 5},
	}
	fmt.Println(fencetest.CheckSpans(fenced))
	unfenced := []fencetest.Span{
		{Term: 33, Start: 0, End: 5},
		{Term: 34, Start: 4, End: 6},
	}
	fmt.Println(fencetest.CheckSpans(unfenced))
	// Output:
	// <nil>
	// write under term 34 started at 4, before a write under older term 33 ended at 5
}
