package mdcheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarkdownFences checks every *.md file under the repository root: a
// fence opened with N backticks (or tildes) closes with a line of at least
// N of the same character and nothing else; no fence is left open at the
// end of the file. CommonMark's rule: a closing fence may carry no info
// string, so "``` text" does not close a block, and everything after it
// renders as code.
func TestMarkdownFences(t *testing.T) {
	root := filepath.Join("..", "..")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "cluster-run") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".md") {
			return nil
		}
		n++
		for _, p := range fenceProblems(t, path) {
			t.Errorf("%s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("checked only %d Markdown files: wrong root?", n)
	}
}

// fenceProblems returns what is wrong with path's code fences.
func fenceProblems(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var probs []string
	var open byte // the fence character of the open block, 0 when none
	var width, openedAt int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		indent := len(s) - len(strings.TrimLeft(s, " "))
		if indent > 3 && open == 0 {
			continue // indented code, not a fence
		}
		body := strings.TrimLeft(s, " ")
		c, w := fenceRun(body)
		if w < 3 {
			continue
		}
		rest := strings.TrimSpace(body[w:])
		switch {
		case open == 0:
			if c == '`' && strings.ContainsRune(rest, '`') {
				continue // inline code, not a fence
			}
			open, width, openedAt = c, w, line
		case c == open && w >= width:
			if rest != "" {
				probs = append(probs, fmt.Sprintf("%s:%d: closing fence carries text %q: the block opened at line %d does not close here",
					path, line, rest, openedAt))
				continue
			}
			open = 0
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		probs = append(probs, fmt.Sprintf("%s:%d: code fence never closed", path, openedAt))
	}
	return probs
}

// fenceRun returns the fence character at the start of s and how many
// times it repeats.
func fenceRun(s string) (byte, int) {
	if s == "" || (s[0] != '`' && s[0] != '~') {
		return 0, 0
	}
	w := 0
	for w < len(s) && s[w] == s[0] {
		w++
	}
	return s[0], w
}
