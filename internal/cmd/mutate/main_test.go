package main

import "testing"

// TestMutantsApply: every mutant's original snippet is found exactly once
// in its file, so that the list does not rot silently as the code changes
// (update the snippet, or drop the mutant with its reason, when it fails).
func TestMutantsApply(t *testing.T) {
	all, err := mutantSet("all")
	if err != nil {
		t.Fatal(err)
	}
	if err := validate("../../..", all); err != nil {
		t.Fatal(err)
	}
}
