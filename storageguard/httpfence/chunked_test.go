package httpfence_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// TestProxyForwardsNoBytesOfABadlyFramedBody: a chunk extension with a
// quoted line break ("3;x=\"a CRLF b\"") is cut at the line break by the
// server's chunked reader, which then takes the next three bytes as the
// chunk's data and fails at the missing CRLF after them. Those three bytes
// of garbage were forwarded to the backend before the framing error; the
// proxy forwards nothing of a read that ended in an error.
func TestProxyForwardsNoBytesOfABadlyFramedBody(t *testing.T) {
	eachTransport(t, func(t *testing.T, std bool) {
		var mu sync.Mutex
		var got []byte
		backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, b...)
			mu.Unlock()
		})
		e := newPxEnv(t, backend, pxConfig(t, std, httpfence.ProxyConfig{Timeout: time.Second}))
		conn, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(waitLimit))
		req := fmt.Sprintf("POST / HTTP/1.1\r\nHost: x\r\n%s: %s\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"3;x=\"a\r\nb\"\r\nabc\r\n0\r\n\r\n", epoch.Header, e.token(t, 1, "node-a")[0])
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		// The proxy answers (an error) or closes; either way it is done
		// with the body.
		io.Copy(io.Discard, conn)
		conn.Close()
		e.proxy.Close() // waits for the handler, and so for the backend exchange
		e.backend.Close()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 0 {
			t.Fatalf("the backend got %q of a body whose framing is broken, want nothing", got)
		}
	})
}
