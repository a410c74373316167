package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClassifyWhole: a go test that timed out is a timeout naming the
// tests that were running, a failure a kill naming the failing tests, a
// build failure unbuilt.
func TestClassifyWhole(t *testing.T) {
	hung := []byte("=== RUN   TestSQLitePowerLoss\npanic: test timed out after 4m0s\n\trunning tests:\n\t\tTestSQLitePowerLoss (4m0s)\n\t\tTestSQLitePowerLoss/round-3 (2m0s)\n\ngoroutine 1 [running]:\nFAIL\tgithub.com/x/sqlfence\t240.1s\n")
	if got := classifyWhole(false, hung); got != "timeout" {
		t.Errorf("hung: %s", got)
	}
	if got, want := runningTests(hung), []string{"TestSQLitePowerLoss (running)", "TestSQLitePowerLoss/round-3 (running)"}; !slices.Equal(got, want) {
		t.Errorf("runningTests = %q, want %q", got, want)
	}
	killed := []byte("=== RUN   TestA\n--- PASS: TestA (0.01s)\n=== RUN   TestB\n=== RUN   TestB/sub\n    --- PASS: TestB/sub (1.00s)\n=== RUN   TestB/other\n")
	if got, want := runningTests(killed), []string{"TestB (running)", "TestB/other (running)"}; !slices.Equal(got, want) {
		t.Errorf("runningTests of a killed verbose run = %q, want %q", got, want)
	}
	failed := []byte("=== RUN   TestSQLite\n=== RUN   TestSQLite/RaiseReturns\n    suite.go:45: raise did not return within 15s\n    --- FAIL: TestSQLite/RaiseReturns (15.00s)\n--- FAIL: TestSQLite (15.20s)\nFAIL\n")
	if got := classifyWhole(false, failed); got != "killed" {
		t.Errorf("failed: %s", got)
	}
	if got, want := failedTests(failed), []string{"TestSQLite/RaiseReturns", "TestSQLite"}; !slices.Equal(got, want) {
		t.Errorf("failedTests = %q, want %q", got, want)
	}
	if got := classifyWhole(false, []byte("FAIL\tgithub.com/x/election [build failed]\n")); got != "unbuilt" {
		t.Errorf("build failure: %s", got)
	}
	if got := classifyWhole(true, []byte("ok\n")); got != "passed" {
		t.Errorf("pass: %s", got)
	}
}

// TestMarkdownTable: one row per mutant with its time, package and test.
func TestMarkdownTable(t *testing.T) {
	tab := markdownTable([]wholeResult{
		{ID: "Q1", Result: "killed", Took: 17100 * time.Millisecond, Package: "./storageguard/sqlfence/", Tests: []string{"TestSQLite/RaiseReturns", "TestSQLite"}},
		{ID: "X9", Result: "timeout", Took: 8 * time.Minute, Package: "./election/", Tests: []string{"TestA (running)", "TestB (running)", "TestC (running)"}},
	})
	for _, want := range []string{
		"| Q1 | killed | 17.1 s | storageguard/sqlfence/ | TestSQLite/RaiseReturns, TestSQLite |",
		"| X9 | timeout | 480.0 s | election/ | TestA (running), TestB (running), … |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}
