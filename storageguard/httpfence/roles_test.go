package httpfence_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/storageguard"
	"github.com/termfence/termfence/storageguard/httpfence"
)

// TestProxyRoleResources: a proxy in front of a store that serves many
// roles of one group, one resource per role (the first path segment), takes
// each role's token on its own resource and refuses another role's token
// there as foreign (403), before the backend sees the request.
func TestProxyRoleResources(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	m := storageguard.NewMemory()
	defer m.Close()
	g := storageguard.NewGuard(m, storageguard.GuardConfig{
		Cluster:    "jobs",
		Verifier:   epoch.Plain(),
		ClusterFor: storageguard.RoleClusters("jobs", nil),
	})
	resource := func(r *http.Request) string {
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		return seg
	}
	proxy := httptest.NewServer(httpfence.NewProxy(g, target, httpfence.ProxyConfig{Resource: resource}))
	defer proxy.Close()
	put := func(path string, ep epoch.Epoch) int {
		tok, err := epoch.Plain().Sign(ep)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, proxy.URL+path, strings.NewReader("x"))
		req.Header.Set(epoch.Header, tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := put("/billing/x", epoch.Epoch{Cluster: "jobs.billing", Term: 5, Leader: "n1"}); code != http.StatusOK {
		t.Fatalf("billing's token on billing: %d", code)
	}
	before := hits.Load()
	if code := put("/billing/x", epoch.Epoch{Cluster: "jobs.reports", Term: 50, Leader: "n2"}); code != http.StatusForbidden {
		t.Fatalf("reports' token on billing: %d, want 403", code)
	}
	if hits.Load() != before {
		t.Fatal("the backend saw a refused request")
	}
	if code := put("/reports/y", epoch.Epoch{Cluster: "jobs.reports", Term: 50, Leader: "n2"}); code != http.StatusOK {
		t.Fatalf("reports' token on reports: %d", code)
	}
}
