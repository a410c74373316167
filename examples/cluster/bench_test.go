package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/termfence/termfence/epoch"
)

// BenchmarkStoreWrite measures one POST /write through the store's HTTP
// handler (in process, no network), fenced and unfenced, on both backends:
// what the fence costs per write at the resource. Every write is under the
// same epoch (the steady state of one leader).
func BenchmarkStoreWrite(b *testing.B) {
	codec, err := epoch.NewHMAC([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	tok, err := codec.Sign(epoch.Epoch{Cluster: "demo", Term: 3, Leader: "n1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, backendName := range []string{"sqlite", "bolt"} {
		for _, unfenced := range []bool{false, true} {
			name := backendName + "/fenced"
			if unfenced {
				name = backendName + "/unfenced"
			}
			b.Run(name, func(b *testing.B) {
				st, err := openStore(context.Background(), storeConfig{
					Backend: backendName, Data: filepath.Join(b.TempDir(), "store.db"), Cluster: "demo",
					Unfenced: unfenced, Verifier: codec, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				h := st.Handler()
				const body = `{"resource":"register","value":"v"}`
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodPost, "/write", strings.NewReader(body))
					req.Header.Set(epoch.Header, tok)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("write: %d %s", w.Code, w.Body)
					}
				}
			})
		}
	}
}
