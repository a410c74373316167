package httpfence_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// A fencing proxy in front of a backend that cannot check tokens: the
// deposed leader's write never reaches it.
func ExampleNewProxy() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Printf("backend stores %q (token seen: %q)\n", b, r.Header.Get(epoch.Header))
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)

	codec, _ := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes!"))
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	proxy := httptest.NewServer(httpfence.NewProxy(g, target, httpfence.ProxyConfig{
		Resource:  func(*http.Request) string { return "ledger" },
		Transport: tr,
	}))
	defer proxy.Close()

	// Each leader's client stamps its token on every request.
	client := func(ep epoch.Epoch) *http.Client {
		return &http.Client{Transport: epoch.RoundTripper(tr, func() (string, error) { return codec.Sign(ep) })}
	}
	a := client(epoch.Epoch{Cluster: "payments", Term: 33, Leader: "node-a"})
	b := client(epoch.Epoch{Cluster: "payments", Term: 34, Leader: "node-b"})
	post := func(c *http.Client, body string) {
		resp, err := c.Post(proxy.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			var refusal httpfence.Refusal
			_ = json.NewDecoder(resp.Body).Decode(&refusal)
			fmt.Println(resp.Status, refusal.Code, "presented", refusal.Presented, "highest", refusal.Highest)
			return
		}
		fmt.Println(resp.Status)
	}
	post(a, "A1")
	post(b, "B1")
	post(a, "A2") // node-a was paused; node-b has written since
	// Output:
	// backend stores "A1" (token seen: "")
	// 200 OK
	// backend stores "B1" (token seen: "")
	// 200 OK
	// 409 Conflict stale_epoch presented payments/33/node-a highest payments/34/node-b
}

// Middleware fences a handler that owns its storage; the handler learns the
// admitted epoch from the request's context.
func ExampleMiddleware() {
	codec, _ := epoch.NewHMAC([]byte("a shared secret of at least 32 bytes!"))
	g := storageguard.NewGuard(storageguard.NewMemory(), storageguard.GuardConfig{Cluster: "payments", Verifier: codec})
	store := httpfence.Middleware(g, func(r *http.Request) string { return r.URL.Path })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ep, _ := httpfence.EpochFrom(r.Context())
			fmt.Println("stored", r.URL.Path, "under", ep)
		}))

	for _, term := range []uint64{34, 33} {
		tok, _ := codec.Sign(epoch.Epoch{Cluster: "payments", Term: term, Leader: "node-" + fmt.Sprint(term)})
		req := httptest.NewRequest("PUT", "/accounts/7", nil)
		req.Header.Set(epoch.Header, tok)
		rec := httptest.NewRecorder()
		store.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	// Output:
	// stored /accounts/7 under payments/34/node-34
	// 200
	// 409
}
