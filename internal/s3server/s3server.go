// Package s3server starts a real S3-compatible server for tests and the
// example cluster: versitygw (Apache-2.0, an S3 gateway over a POSIX
// directory) on a free loopback port with a directory of its own, and a
// bucket in it. The binary is found through $VERSITYGW_BIN, then PATH, then
// $(go env GOPATH)/bin (go install's default); Find says where it looked
// when it is missing. CI installs it (.ci/run, the versitygw block) at the
// version pinned there.
//
// It is test and demo scaffolding: nothing under storageguard imports it
// outside _test.go files.
package s3server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/termfence/termfence/internal/freeport"
)

// BinEnv names the variable that points at the versitygw binary.
const BinEnv = "VERSITYGW_BIN"

// Version is the versitygw release the project tests against; .ci/run
// installs this one.
const Version = "v1.8.0"

// ErrNotInstalled is returned by Find and Start when no versitygw binary is
// found.
var ErrNotInstalled = errors.New("s3server: versitygw not found")

// Find returns the path of the versitygw binary: $VERSITYGW_BIN if set,
// else versitygw on PATH, else $GOPATH/bin/versitygw (GOPATH from the
// environment, or `go env GOPATH`, or ~/go). The error matches
// ErrNotInstalled and says where it looked.
func Find() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("%w: $%s=%s is not an executable file", ErrNotInstalled, BinEnv, p)
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var looked []string
	for _, dir := range gopaths() {
		p := filepath.Join(dir, "bin", "versitygw")
		if isExec(p) {
			return p, nil
		}
		looked = append(looked, p)
	}
	return "", fmt.Errorf("%w: not in $%s, not on PATH, not at %s (install: go install github.com/versity/versitygw/cmd/versitygw@%s)",
		ErrNotInstalled, BinEnv, strings.Join(looked, " or "), Version)
}

func gopaths() []string {
	var out []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		out = append(out, filepath.SplitList(gp)...)
	} else if b, err := exec.Command("go", "env", "GOPATH").Output(); err == nil && strings.TrimSpace(string(b)) != "" {
		out = append(out, filepath.SplitList(strings.TrimSpace(string(b)))...)
	} else if home, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(home, "go"))
	}
	return out
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Server is one running versitygw process.
type Server struct {
	Endpoint  string // "http://127.0.0.1:port"
	Bucket    string // created by Start
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the POSIX directory it serves

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  strings.Builder
	once sync.Once
	err  error
}

// Start runs versitygw over dir (created if missing) on a free loopback
// port, waits until it listens (it prints its banner), and creates bucket.
// ctx bounds the start, not the server's life: Close stops it.
func Start(ctx context.Context, dir, bucket string) (*Server, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("s3server: %w", err)
	}
	var lastErr error
	// A port picked free can be taken before versitygw binds it; then
	// versitygw exits and another port is tried.
	for try := 0; try < 5; try++ {
		addrs, err := freeport.Addrs(1)
		if err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
		s, err := start(ctx, bin, dir, addrs[0])
		if err == nil {
			if err := s.createBucket(ctx, bucket); err != nil {
				s.Close()
				return nil, err
			}
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir, addr string) (*Server, error) {
	s := &Server{
		Endpoint: "http://" + addr, AccessKey: "termfence", SecretKey: "termfence-secret-key",
		Region: "us-east-1", Dir: dir, done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "posix", dir)
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("s3server: %w", err)
	}
	s.cmd.Stderr = s.cmd.Stdout
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3server: start %s: %w", bin, err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			if s.log.Len() < 64<<10 {
				s.log.WriteString(line + "\n")
			}
			s.mu.Unlock()
			// The banner names the address once the listener is bound.
			if !signalled && strings.Contains(line, s.Endpoint) {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = s.cmd.Wait()
	}()
	// The banner comes before the listener is bound: after it, dial until
	// a connection is taken (or the process exits, or ctx ends).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ready:
			ready = nil
		case <-s.done:
			return nil, fmt.Errorf("s3server: versitygw on %s exited before listening: %s", addr, s.Log())
		case <-ctx.Done():
			s.Close()
			return nil, fmt.Errorf("s3server: waiting for versitygw to listen on %s: %w", addr, ctx.Err())
		case <-tick.C:
			if ready != nil {
				continue
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				return s, nil
			}
		}
	}
}

// Log returns what the server printed so far (its first 64 KiB).
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Client returns an S3 client for the server: path-style addressing, the
// server's credentials, the SDK's retries off (a test sees each answer).
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		Retryer:      aws.NopRetryer{},
	})
}

func (s *Server) createBucket(ctx context.Context, bucket string) error {
	s.Bucket = bucket
	if bucket == "" {
		return nil
	}
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	if err != nil {
		return fmt.Errorf("s3server: create bucket %q: %w", bucket, err)
	}
	return nil
}

// Close stops the server (SIGKILL: it keeps nothing the tests need) and
// waits for it to exit.
func (s *Server) Close() error {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
		}
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			s.err = errors.New("s3server: versitygw did not exit 30s after SIGKILL")
		}
	})
	return s.err
}
