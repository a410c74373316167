package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termfence/termfence/internal/freeport"
	"github.com/termfence/termfence/internal/skiptest"
)

// bin is the example binary, built once per test run by TestMain.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "termfence-cluster-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "cluster")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the example: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(skiptest.Wrap(m), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// proc is a running example process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs the binary with args. The process is killed (and resumed
// first, if stopped) when the test ends; its output is logged if the test
// failed.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: exec.Command(bin, args...), log: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.log.String())
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %v", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitUntil polls cond until it returns true, failing the test with cond's
// last description after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, desc := cond()
		if ok {
			return
		}
		last = desc
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s; last: %s", timeout, what, last)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// addrFile waits for a process's -addr-file and returns its content.
func addrFile(t *testing.T, path string, p *proc) string {
	t.Helper()
	var content string
	waitUntil(t, 20*time.Second, "the address file "+path+" exists", func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("%s exited early: %v", p.name, p.err)
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		content = strings.TrimSpace(string(b))
		return content != "", "empty"
	})
	return content
}

// field returns "key=value"'s value from a node's address file.
func field(content, key string) string {
	for _, f := range strings.Fields(content) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// freePorts returns n distinct loopback addresses that were free a moment
// ago (raft addresses must be known before the nodes start, for -bootstrap).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := freeport.Addrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// client is an HTTP client that keeps no idle connections (nothing for
// goleak to find) and gives up quickly on a stopped process.
func client(tr *http.Transport) *http.Client {
	if tr == nil {
		tr = &http.Transport{}
	}
	tr.DisableKeepAlives = true
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}
}

// getJSON GETs url and decodes a 200 answer into v.
func getJSON(hc *http.Client, url string, v any) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// post POSTs body to url as application/json, with optional headers
// (name, value, ...) that may override it, and returns the status and body.
func post(hc *http.Client, url, body string, header ...string) (int, string, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	// JSON unless the caller says otherwise, as the node's
	// state-changing endpoints require.
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// getText GETs url and returns a 200 answer's body.
func getText(hc *http.Client, url string) (string, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}
