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

// TestSetAliases: the older set names still select the same mutants.
func TestSetAliases(t *testing.T) {
	for old, name := range setAliases {
		a, err := mutantSet(old)
		if err != nil {
			t.Fatal(err)
		}
		b, err := mutantSet(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(a) == 0 || len(a) != len(b) || a[0].ID != b[0].ID {
			t.Errorf("-set %s gives %d mutants, -set %s %d", old, len(a), name, len(b))
		}
	}
}
