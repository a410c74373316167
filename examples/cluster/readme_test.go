package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeLogMessages returns the log messages README.md quotes, in slog's
// text form: msg="..." (a quote wrapped over two lines is joined with one
// space, as Markdown renders it). With unfenced, it returns the messages
// that name -unfenced, which only a store started with that flag writes
// (TestPausedLeaderUnfencedControl checks them); without, all the others
// (TestPausedLeaderIsFenced checks them against the processes' real output).
func readmeLogMessages(t *testing.T, unfenced bool) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, m := range regexp.MustCompile(`msg="[^"]+"`).FindAllString(string(b), -1) {
		m = strings.Join(strings.Fields(m), " ")
		if strings.Contains(m, "-unfenced") == unfenced {
			msgs = append(msgs, m)
		}
	}
	if unfenced && len(msgs) < 1 {
		t.Fatalf("README.md quotes no log line of an -unfenced store; the test expects the lost update's")
	}
	if !unfenced && len(msgs) < 4 {
		t.Fatalf("README.md quotes only %d log lines; the test expects the refusal, took epoch, shutdown and store lines", len(msgs))
	}
	return msgs
}

// readmeSection returns the sh code blocks of README.md between the
// headings start and end.
func readmeSection(t *testing.T, start, end string) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, start), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no section from %q to %q", start, end)
	}
	var blocks []string
	for _, part := range strings.Split(s[i:j], "```sh\n")[1:] {
		blocks = append(blocks, part[:strings.Index(part, "```")])
	}
	return blocks
}

// TestReadmeCommandsStayInRunFolder reads the commands of README.md's
// "Three nodes and a store on one machine" section: every file they make
// (-o, -data, redirections, PID files) is under $R, which is cluster-run,
// which .gitignore ignores; and every kill uses a PID file written by the
// commands, never pgrep -f.
func TestReadmeCommandsStayInRunFolder(t *testing.T) {
	blocks := readmeSection(t, "## Three nodes and a store on one machine", "## Several machines")
	all := strings.Join(blocks, "\n")
	if !strings.Contains(all, "R=cluster-run") {
		t.Fatalf("the commands do not set R=cluster-run:\n%s", all)
	}
	gi, err := os.ReadFile("../../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gi), "\n/cluster-run/\n") {
		t.Errorf(".gitignore does not ignore /cluster-run/")
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`-o (\S+)`),
		regexp.MustCompile(`-data (\S+)`),
		regexp.MustCompile(`\d?>>? ?(\S+)`),
	} {
		for _, m := range re.FindAllStringSubmatch(all, -1) {
			if !strings.HasPrefix(m[1], "$R/") {
				t.Errorf("README command writes %q outside $R: %s", m[1], m[0])
			}
		}
	}
	if strings.Contains(all, "pgrep") {
		t.Errorf("README uses pgrep, which matches other clusters on the host")
	}
	for _, k := range regexp.MustCompile(`kill (-\w+ )?(.*)`).FindAllStringSubmatch(all, -1) {
		if !strings.HasPrefix(k[2], "$(cat $R/") {
			t.Errorf("README kills %q, not a PID the commands wrote", k[0])
		}
	}
	if !strings.Contains(all, "echo $! > $R/") {
		t.Errorf("README does not record the PIDs of the processes it starts")
	}
}

// TestReadmeTableListsEveryScenario: README.md's table of scenarios has a
// row for every scenario `-scenario list` prints (a new user runs the list
// and looks each one up).
func TestReadmeTableListsEveryScenario(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		if !strings.Contains(string(b), "\n| `"+s.name+"` ") {
			t.Errorf("README.md's scenario table has no row for -scenario %s", s.name)
		}
	}
}
