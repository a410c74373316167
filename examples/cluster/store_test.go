package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
)

func mustCodec(t *testing.T, key string) epoch.Codec {
	t.Helper()
	c, err := epoch.NewHMAC([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sign(t *testing.T, c epoch.Signer, term uint64, leader string) string {
	t.Helper()
	tok, err := c.Sign(epoch.Epoch{Cluster: "demo", Term: term, Leader: leader})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestStoreRefusals drives the store's HTTP API in-process, on every
// backend but postgres (the fault suite runs that one): the admission rule (stale, conflicting, foreign epochs), token
// authentication (unsigned, forged, missing, malformed) and bad requests,
// each with its status, and the counts in /status.
func TestStoreRefusals(t *testing.T) {
	for _, backendName := range storeBackends {
		if backendName == "postgres" || backendName == "postgres-trigger" || (runtime.GOOS == "windows" && strings.Contains(backendName, "dir")) {
			continue
		}
		t.Run(backendName, func(t *testing.T) {
			key := "0123456789abcdef0123456789abcdef"
			codec := mustCodec(t, key)
			forger := mustCodec(t, strings.Repeat("x", 32))
			st, err := openStore(context.Background(), storeConfig{
				Backend: backendName, Data: filepath.Join(t.TempDir(), "store.db"), Cluster: "demo",
				Verifier: codec, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(st.Handler())
			defer func() {
				srv.Close()
				if err := st.Close(); err != nil {
					t.Error(err)
				}
			}()
			hc := client(nil)
			write := func(tok, body string) (int, string) {
				t.Helper()
				var h []string
				if tok != "" {
					h = []string{epoch.Header, tok}
				}
				u := srv.URL + "/write"
				if strings.Contains(body, `"resource":"r2"`) {
					u += "?resource=r2" // as the node's store client sends it
				}
				status, reply, err := post(hc, u, body, h...)
				if err != nil {
					t.Fatal(err)
				}
				return status, reply
			}
			unsigned, _ := epoch.Plain().Sign(epoch.Epoch{Cluster: "demo", Term: 99, Leader: "n1"})
			foreign, _ := codec.Sign(epoch.Epoch{Cluster: "other", Term: 99, Leader: "n1"})
			steps := []struct {
				name   string
				tok    string
				body   string
				status int
				reply  string // substring
			}{
				{"first epoch", sign(t, codec, 5, "n1"), `{"value":"a"}`, 200, `"term":5`},
				{"same epoch", sign(t, codec, 5, "n1"), `{"value":"b"}`, 200, `"leader":"n1"`},
				{"newer epoch", sign(t, codec, 6, "n2"), `{"value":"c"}`, 200, `"term":6`},
				{"stale epoch", sign(t, codec, 5, "n1"), `{"value":"stale"}`, 409, `"presented":"demo/5/n1","highest":"demo/6/n2"`},
				{"conflicting epoch", sign(t, codec, 6, "n3"), `{"value":"x"}`, 409, `conflicting`},
				{"unsigned huge term", unsigned, `{"value":"x"}`, 401, `unsigned`},
				{"forged huge term", sign(t, forger, 1000, "n1"), `{"value":"x"}`, 403, `signature`},
				{"other cluster", foreign, `{"value":"x"}`, 403, `other`},
				{"no token", "", `{"value":"x"}`, 401, `error`},
				{"malformed token", "demo/7", `{"value":"x"}`, 401, `malformed`},
				{"malformed JSON", sign(t, codec, 6, "n2"), `{"value":`, 400, `malformed JSON`},
				{"other resource", sign(t, codec, 1, "n1"), `{"resource":"r2","value":"y"}`, 200, `"term":1`},
			}
			for _, s := range steps {
				status, reply := write(s.tok, s.body)
				if status != s.status || !strings.Contains(reply, s.reply) {
					t.Errorf("%s: %d %s; want %d containing %q", s.name, status, reply, s.status, s.reply)
				}
			}
			var rec readReply
			if err := getJSON(hc, srv.URL+"/read", &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Value != "c" || rec.Term != 6 || rec.Leader != "n2" {
				t.Errorf("register = %+v; want c written under term 6 by n2", rec)
			}
			if resp, err := hc.Get(srv.URL + "/read?resource=never"); err != nil || resp.StatusCode != 404 {
				t.Errorf("read of a never-written resource: %v %v; want 404", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
			var ss storeStatus
			if err := getJSON(hc, srv.URL+"/status", &ss); err != nil {
				t.Fatal(err)
			}
			if ss.Accepted != 4 || ss.Refused != 7 || ss.Highest[DefaultResource] != "demo/6/n2" || ss.Highest["r2"] != "demo/1/n1" {
				t.Errorf("status %+v; want accepted=4 refused=7 highest register=demo/6/n2 r2=demo/1/n1", ss)
			}
			if ss.RefusedBy["demo/5/n1"] != 1 {
				t.Errorf("status %+v does not count the stale write against demo/5/n1", ss)
			}
			// /metrics sees the same decisions, whichever path the
			// backend writes through (Tx, Do, the proxy): the fence's
			// and the Guard's refusals alike.
			got := fenceDecisions(t, hc, srv.URL+"/metrics")
			admitted := 4.0
			if strings.HasPrefix(backendName, "proxy-") {
				admitted++ // the proxy admits the malformed JSON; the 400 is its backend's
			}
			for result, want := range map[string]float64{"admitted": admitted, "stale": 1, "conflict": 1, "foreign": 1, "malformed": 1} {
				if got[result] != want {
					t.Errorf("/metrics: %s decisions %v, want %v (all: %v)", result, got[result], want, got)
				}
			}
			if got["bad_signature"] < 2 { // unsigned, forged; a missing token where the Guard sees it
				t.Errorf("/metrics: bad_signature decisions %v, want at least 2 (all: %v)", got["bad_signature"], got)
			}
		})
	}
}

// TestStoreSurvivesKill shows the store's records and high-water mark are
// durable: after SIGKILL and a restart on the same file an old epoch is
// still refused and the data is intact (docs/DESIGN.md I5).
func TestStoreSurvivesKill(t *testing.T) {
	for _, backendName := range []string{"sqlite", "bolt"} {
		t.Run(backendName, func(t *testing.T) {
			dir := t.TempDir()
			keyFile := filepath.Join(dir, "token.key")
			if err := os.WriteFile(keyFile, newKey(), 0o600); err != nil {
				t.Fatal(err)
			}
			codec, err := loadCodec(keyFile, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			hc := client(nil)
			run := func(i int) (*proc, string) {
				af := filepath.Join(dir, fmt.Sprintf("addr%d", i))
				p := start(t, fmt.Sprintf("store#%d", i), "store", "-http", "127.0.0.1:0", "-backend", backendName,
					"-data", filepath.Join(dir, "store.db"), "-token-key", keyFile, "-addr-file", af)
				return p, "http://" + addrFile(t, af, p)
			}
			p, url := run(1)
			if status, reply, err := post(hc, url+"/write", `{"value":"kept"}`, epoch.Header, sign(t, codec, 8, "n3")); err != nil || status != 200 {
				t.Fatalf("write: %d %s %v", status, reply, err)
			}
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)

			_, url = run(2)
			if status, reply, err := post(hc, url+"/write", `{"value":"late"}`, epoch.Header, sign(t, codec, 7, "n1")); err != nil || status != http.StatusConflict {
				t.Errorf("old epoch after restart: %d %s %v; want 409", status, reply, err)
			}
			var rec readReply
			if err := getJSON(hc, url+"/read", &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Value != "kept" || rec.Term != 8 {
				t.Errorf("after restart the register is %+v; want kept under term 8", rec)
			}
			var ss storeStatus
			if err := getJSON(hc, url+"/status", &ss); err != nil {
				t.Fatal(err)
			}
			if ss.Highest[DefaultResource] != "demo/8/n3" {
				t.Errorf("after restart the high-water mark is %q; want demo/8/n3", ss.Highest[DefaultResource])
			}
		})
	}
}

// TestStoreUnfencedAcceptsStale is the control experiment at the store:
// with -unfenced the same stale write is accepted (and forged tokens are
// still refused).
func TestStoreUnfencedAcceptsStale(t *testing.T) {
	codec := mustCodec(t, "0123456789abcdef0123456789abcdef")
	st, err := openStore(context.Background(), storeConfig{
		Data: filepath.Join(t.TempDir(), "store.db"), Cluster: "demo", Unfenced: true,
		Verifier: codec, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(st.Handler())
	defer func() {
		srv.Close()
		st.Close()
	}()
	hc := client(nil)
	for _, w := range []struct {
		tok    string
		status int
	}{
		{sign(t, codec, 6, "n2"), 200},
		{sign(t, codec, 5, "n1"), 200}, // stale, but nothing checks
		{sign(t, mustCodec(t, strings.Repeat("y", 32)), 9, "n1"), 403},
	} {
		if status, reply, err := post(hc, srv.URL+"/write", `{"value":"v"}`, epoch.Header, w.tok); err != nil || status != w.status {
			t.Errorf("write %s: %d %s %v; want %d", w.tok, status, reply, err, w.status)
		}
	}
	var rec readReply
	if err := getJSON(hc, srv.URL+"/read", &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Term != 5 {
		t.Errorf("unfenced register %+v; want the stale term-5 write to have overwritten term 6", rec)
	}
	// The lost update is visible: counted, and "highest" means what it
	// means on a fenced store (the newest epoch accepted), not the last
	// write's.
	var ss storeStatus
	if err := getJSON(hc, srv.URL+"/status", &ss); err != nil {
		t.Fatal(err)
	}
	if ss.LostUpdates != 1 || ss.Highest[DefaultResource] != "demo/6/n2" || ss.Fenced {
		t.Errorf("unfenced status %+v; want lost_updates=1, highest demo/6/n2, fenced=false", ss)
	}
}

// TestParseBootstrap checks the -bootstrap syntax.
func TestParseBootstrap(t *testing.T) {
	got, err := parseBootstrap("n1=127.0.0.1:7101, n2=host:7102")
	if err != nil || len(got) != 2 || got[1].ID != "n2" || got[1].Addr != "host:7102" {
		t.Fatalf("parseBootstrap = %+v, %v", got, err)
	}
	for _, bad := range []string{"n1", "=a:1", "n1=", "n1=a:1,,"} {
		if _, err := parseBootstrap(bad); err == nil {
			t.Errorf("parseBootstrap(%q) accepted", bad)
		}
	}
}

// Example_store shows the store refusing a deposed leader: term 3 writes,
// then a late write under term 2 is refused with both epochs named.
func Example_store() {
	dir, _ := os.MkdirTemp("", "example-store-*")
	defer os.RemoveAll(dir)
	codec, _ := epoch.NewHMAC([]byte("an example key of at least 32 bytes"))
	st, err := openStore(context.Background(), storeConfig{
		Data: filepath.Join(dir, "store.db"), Cluster: "demo", Verifier: codec,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	srv := httptest.NewServer(st.Handler())
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, e := range []epoch.Epoch{{Cluster: "demo", Term: 3, Leader: "n2"}, {Cluster: "demo", Term: 2, Leader: "n1"}} {
		tok, _ := codec.Sign(e)
		status, reply, err := post(hc, srv.URL+"/write", `{"value":"from `+e.Leader+`"}`, epoch.Header, tok)
		if err != nil {
			fmt.Println(err)
			return
		}
		var r struct {
			OK        bool   `json:"ok"`
			Presented string `json:"presented"`
			Highest   string `json:"highest"`
		}
		_ = json.Unmarshal([]byte(reply), &r)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(e, status, r.OK, r.Presented, r.Highest)))
	}
	// Output:
	// demo/3/n2 200 true
	// demo/2/n1 409 false demo/2/n1 demo/3/n2
}

// TestLoadCodec: without a key file tokens are unsigned and a warning says
// so; a key file signs, and a short key is refused.
func TestLoadCodec(t *testing.T) {
	var logs strings.Builder
	c, err := loadCodec("", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "NOT signed") {
		t.Errorf("no warning for unsigned tokens: %q", logs.String())
	}
	if tok := sign(t, c, 3, "n1"); tok != "demo/3/n1" {
		t.Errorf("unsigned token %q", tok)
	}
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	if err := os.WriteFile(good, newKey(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = loadCodec(good, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify("demo/3/n1"); !errors.Is(err, epoch.ErrUnsigned) {
		t.Errorf("the HMAC codec verified an unsigned token: %v", err)
	}
	if _, err := loadCodec(short, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Error("a 9-byte key was accepted")
	}
	if _, err := loadCodec(filepath.Join(dir, "missing"), slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Error("a missing key file was accepted")
	}
}

// TestCaptureUnwraps: the store's response recorder passes
// http.ResponseController through to the connection, so the proxy
// backends' httpfence proxy can set the client connection's deadlines and
// full duplex (without Unwrap each call fails with ErrNotSupported, and the
// proxy runs without its slow-client protection). The server must log
// nothing: a full-duplex handler that returns with its request body unread
// makes net/http panic in the connection's next read ("invalid concurrent
// Body.Read call", golang/go#68560; the server recovers and logs it), so
// the handler reads the body to its end, as a real one does.
func TestCaptureUnwraps(t *testing.T) {
	errs := make(chan error, 1)
	var serverLog strings.Builder // written by the server's goroutines, read after Close
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(&capture{ResponseWriter: w})
		err := errors.Join(rc.EnableFullDuplex(), rc.SetReadDeadline(time.Now().Add(time.Second)),
			rc.SetWriteDeadline(time.Now().Add(time.Second)))
		if _, rerr := io.Copy(io.Discard, r.Body); rerr != nil {
			err = errors.Join(err, fmt.Errorf("read body: %w", rerr))
		}
		errs <- err
	}))
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	resp.Body.Close()
	srv.Client().CloseIdleConnections()
	srv.Close() // waits for the connection's goroutine, which logs a recovered panic
	if err := <-errs; err != nil {
		t.Fatalf("through capture: %v", err)
	}
	if serverLog.Len() > 0 {
		t.Fatalf("the server logged:\n%s", serverLog.String())
	}
}

// fenceDecisions sums termfence_fence_decisions_total by result over every
// op, from a Prometheus text exposition at url.
func fenceDecisions(t *testing.T, hc *http.Client, url string) map[string]float64 {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	sums := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "termfence_fence_decisions_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `result="`)
		result, rest, _ := strings.Cut(rest, `"`)
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sums[result] += v
	}
	if len(sums) == 0 {
		t.Fatalf("GET %s: no termfence_fence_decisions_total series:\n%s", url, body)
	}
	return sums
}
