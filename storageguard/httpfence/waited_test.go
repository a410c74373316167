package httpfence_test

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// waited wraps h so that the test, once its server is closed, waits for
// every call of h to return, and fails if one is still running after
// waitLimit. httptest.Server.Close waits for the requests on its
// connections, but not for a handler whose connection was hijacked (a
// protocol upgrade) or whose HTTP/2 stream the client reset; the proxy
// holds such a request's epoch until its timeout when the backend may
// still act on it (ProxyStats.Held), so without this a test that did not
// wait for its own hold ends with the handler still running, and the
// package's goroutine check fails at random, depending on which side of an
// upgraded connection happened to close first.
//
// Call it before the server is started, so that the wait (a cleanup
// registered first runs last) comes after the server's Close: by then no
// new call of h can start.
func waited(t testing.TB, h http.Handler) http.Handler {
	var running sync.WaitGroup
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			running.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Errorf("a handler was still running %v after the test's server closed: the test ended without waiting for a request it started (a hold until the proxy's timeout?)", waitLimit)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running.Add(1)
		defer running.Done()
		h.ServeHTTP(w, r)
	})
}
