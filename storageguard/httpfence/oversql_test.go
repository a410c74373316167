package httpfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
	"github.com/termfence/termfence/storageguard/internal/sqltest"
	"github.com/termfence/termfence/storageguard/sqlfence"
)

// sqlFences returns the SQL fences the client-gone tests run over: SQLite
// always, PostgreSQL (database/sql) when sqltest.PostgresEnv is set.
func sqlFences(t *testing.T) map[string]func(t *testing.T) storageguard.Fence {
	open := func(t *testing.T, f *sqlfence.Fence, err error) storageguard.Fence {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return map[string]func(t *testing.T) storageguard.Fence{
		"sqlite": func(t *testing.T) storageguard.Fence {
			db := sqltest.OpenSQLite(t, filepath.Join(t.TempDir(), "fence.db"))
			f, err := sqlfence.Open(context.Background(), db, sqlfence.SQLite)
			return open(t, f, err)
		},
		"postgres": func(t *testing.T) storageguard.Fence {
			db := sqltest.OpenPostgres(t, sqltest.PostgresDSN(t))
			f, err := sqlfence.Open(context.Background(), db, sqlfence.Postgres)
			return open(t, f, err)
		},
	}
}

// TestProxyOverSQLClientGone: through the proxy over an SQL fence, a client
// that disconnects while the backend works on its request must not let a
// newer epoch's request reach the backend before the older one finished
// (database/sql would roll the fence's transaction back on the request's
// cancelled context and release the lock).
func TestProxyOverSQLClientGone(t *testing.T) {
	for name, open := range sqlFences(t) {
		t.Run(name, func(t *testing.T) { testOlderFirst(t, open(t), false, false, true) })
	}
}

// TestMiddlewareOverSQLClientGone: the same through Middleware: the
// handler under the older epoch still runs after its client went away;
// the newer epoch's handler waits for it.
func TestMiddlewareOverSQLClientGone(t *testing.T) {
	for name, open := range sqlFences(t) {
		t.Run(name, func(t *testing.T) { testMiddlewareClientGone(t, open(t)) })
	}
}

func testMiddlewareClientGone(t *testing.T, fence storageguard.Fence) {
	oldIn, releaseOld, newIn := make(chan struct{}), make(chan struct{}), make(chan bool, 1)
	var mu sync.Mutex
	oldRunning := false
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, _ := epochFrom(r)
		switch ep.Term {
		case 33:
			// Having read its body, the server watches the connection and
			// cancels the request's context when the client goes away.
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			oldRunning = true
			mu.Unlock()
			close(oldIn)
			select { // the handler goes on after its client left
			case <-releaseOld:
			case <-time.After(waitLimit):
			}
			mu.Lock()
			oldRunning = false
			mu.Unlock()
		case 34:
			mu.Lock()
			newIn <- oldRunning
			mu.Unlock()
		}
	})
	e := newMwEnvOver(t, fence, h, nil)
	var once sync.Once
	release := func() { once.Do(func() { close(releaseOld) }) }
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	oldRes := async(func() pxResult {
		req, err := tokenRequest(ctx, "POST", e.server.URL+"/", e.token(t, 33, "node-a"), []byte("payload"))
		if err != nil {
			return pxResult{err: err}
		}
		return doRequest(e.client, req)
	})
	recv(t, oldIn, "the old handler")
	cancel() // the client goes away
	if r := recv(t, oldRes, "the old client to give up"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("old client: %+v", r)
	}
	newRes := async(func() pxResult { return e.send("/", e.token(t, 34, "node-b")) })
	select {
	case running := <-newIn:
		t.Fatalf("the epoch-34 handler ran after the epoch-33 client left (33's handler still running: %v)", running)
	case <-time.After(250 * time.Millisecond):
	}
	release()
	if running := recv(t, newIn, "the new handler"); running {
		t.Fatal("the epoch-34 handler ran beside the epoch-33 handler")
	}
	if r := recv(t, newRes, "the new response"); r.status != 200 {
		t.Fatalf("new: %+v", r)
	}
}

func epochFrom(r *http.Request) (epoch.Epoch, bool) { return httpfence.EpochFrom(r.Context()) }

// losingFence runs each write, then reports that its hold was lost, as
// sqlfence does when the session holding its lock ended under the write.
type losingFence struct{ storageguard.Fence }

func (f losingFence) Do(ctx context.Context, r string, ep epoch.Epoch, w func(context.Context) error) error {
	if err := f.Fence.Do(ctx, r, ep, w); err != nil {
		return err
	}
	return fmt.Errorf("%w: session terminated", storageguard.ErrFenceLost)
}

// TestProxyLogsLostFence: a request served while the fence was lost under
// it cannot be answered otherwise (its response went out): the proxy logs
// it. HTTPStatus maps the error to 503 fence_lost for servers that can
// still answer.
func TestProxyLogsLostFence(t *testing.T) {
	var logged syncBuffer
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	e := newPxEnvOver(t, losingFence{storageguard.NewMemory()}, backend, httpfence.ProxyConfig{ErrorLog: log.New(&logged, "", 0)})
	if r := e.send("POST", "/", e.token(t, 3, "node-a")); r.status != 200 {
		t.Fatalf("%+v", r)
	}
	if !strings.Contains(logged.String(), "without a guaranteed fence") {
		t.Fatalf("the lost fence was not logged: %q", logged.String())
	}
	if st, code := httpfence.HTTPStatus(fmt.Errorf("x: %w", storageguard.ErrFenceLost)); st != 503 || code != "fence_lost" {
		t.Fatalf("HTTPStatus(ErrFenceLost) = %d %s", st, code)
	}
}
