package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/termfence/termfence/internal/freeport"
	"github.com/termfence/termfence/internal/netlab"
)

// ModuleRoot returns the directory of the main module's go.mod, as
// `go env GOMOD` reports it.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("chaos: not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles ./examples/cluster of the module at root into out.
func Build(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./examples/cluster")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("chaos: go build ./examples/cluster: %w\n%s", err, stderr.String())
	}
	return nil
}

// BuildForge compiles ./internal/cmd/forge (the hostile peer) of the
// module at root into out.
func BuildForge(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./internal/cmd/forge")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("chaos: go build ./internal/cmd/forge: %w\n%s", err, stderr.String())
	}
	return nil
}

// freePort returns a loopback address with a port that was free a moment
// ago. Raft addresses must be known before any node starts (they go into
// -bootstrap) and stay the same across restarts, so ports are chosen up
// front rather than with port 0.
func freePort() (string, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return "", fmt.Errorf("chaos: pick a port: %w", err)
	}
	return addr, nil
}

// proc is one child process, restartable with the same arguments.
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string
	addr    string // the HTTP address the process serves on
	// host, in netlab mode, is the lab host the process runs in.
	host *netlab.Host

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has been reaped
	stopped bool          // SIGSTOPped and not yet continued
	starts  int
}

// start launches the process (it must not be running) and returns once it
// is reaped in the background; readiness is the caller's business.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("chaos: %s is already running", p.name)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %s log: %w", p.name, err)
	}
	p.starts++
	fmt.Fprintf(logf, "=== chaos: start #%d: %s %s\n", p.starts, p.bin, strings.Join(p.args, " "))
	var cmd *exec.Cmd
	if p.host != nil {
		// ip netns exec becomes the program: signals reach it, and it
		// dies with the harness (Pdeathsig, set by Command).
		cmd = p.host.Command(context.Background(), p.bin, p.args...)
	} else {
		cmd = exec.Command(p.bin, p.args...)
		// Children die with the harness even if it is killed before cleanup.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.stopped = cmd, done, false
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// running reports whether the process is alive (possibly stopped).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("chaos: %s never started", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("chaos: %s %v: %w", p.name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// kill SIGKILLs the process (continuing it first if stopped) and waits until
// it is reaped. Killing a dead process is a no-op.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done, stopped := p.cmd, p.done, p.stopped
	p.stopped = false
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	if stopped {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// waitFile waits until path exists and is not empty.
func waitFile(ctx context.Context, path string, p *proc) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("chaos: %s exited before writing %s (see %s); its log ends:\n%s", p.name, path, p.logPath, logTail(p.logPath, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s did not write %s: %w (see %s)", p.name, path, ctx.Err(), p.logPath)
		case <-tick.C:
		}
	}
}

// logTail returns the last n lines of the log at path, for an error that
// must outlive the test's temporary directory.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
