package httpfence_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/storageguard/httpfence"
)

// TestProxyUnfencedReadsRefuseUpgrade: a GET that asks for a protocol
// upgrade (Upgrade, or Connection: upgrade, in any spelling), and any
// CONNECT, is a write: the upgraded channel carries whatever the client
// sends, for as long as it likes. Without a token it is refused, never
// switched.
func TestProxyUnfencedReadsRefuseUpgrade(t *testing.T) {
	var reached atomic.Int64
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("Upgrade") == "" {
			w.Write([]byte("plain"))
			return
		}
		conn, _, err := switchProtocols(w, "websocket")
		if err != nil {
			return
		}
		conn.Close()
	})
	e := newPxEnv(t, backend, httpfence.ProxyConfig{UnfencedReads: true})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		method string
		kv     []string
	}{
		{"websocket", "GET", []string{"Connection", "Upgrade", "Upgrade", "websocket"}},
		{"upgrade only", "GET", []string{"Upgrade", "websocket"}},
		{"upgrade lower case", "GET", []string{"upgrade", "h2c"}},
		{"connection upgrade only", "GET", []string{"Connection", "keep-alive, UPGRADE"}},
		{"HEAD upgrade", "HEAD", []string{"Connection", "upgrade", "Upgrade", "websocket"}},
		{"CONNECT", "CONNECT", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := reached.Load()
			req, err := tokenRequest(ctx, c.method, e.proxy.URL+"/", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(c.kv); i += 2 {
				// Keep the spelling: Header.Set canonicalises.
				req.Header[c.kv[i]] = append(req.Header[c.kv[i]], c.kv[i+1])
			}
			r := doRequest(e.client, req)
			if r.status != http.StatusUnauthorized {
				t.Fatalf("%s without a token: %d (err %v), want 401", c.name, r.status, r.err)
			}
			if n := reached.Load() - before; n != 0 {
				t.Fatalf("%s without a token reached the backend unfenced", c.name)
			}
		})
	}
	// A plain GET still goes through unfenced.
	if r := e.sendBody(ctx, "GET", "/", nil, nil); r.status != http.StatusOK || r.body != "plain" {
		t.Fatalf("plain GET: %+v", r)
	}
}

// switchProtocols is a backend's side of an upgrade: it takes w's
// connection and answers 101 with protocol proto. The caller closes the
// connection.
func switchProtocols(w http.ResponseWriter, proto string) (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + proto + "\r\nConnection: Upgrade\r\n\r\n")
	if err := brw.Flush(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, brw, nil
}
