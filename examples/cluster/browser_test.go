package main

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termfence/termfence/epoch"
	"github.com/termfence/termfence/internal/skiptest"
)

// chromiumPath is Debian's chromium (apt-get install chromium; .ci/run
// installs it).
const chromiumPath = "/usr/bin/chromium"

// TestStatusPageInChromium opens a follower's status page in headless
// Chromium while a three-node cluster and a store run, then freezes the
// leader with SIGSTOP. Without reloading, the page — read through the
// DevTools protocol from the browser's own DOM — must show the new leader
// and term, then (after SIGCONT) the store's refusal of the old leader's
// late write. With TERMFENCE_SCREENSHOT=FILE it saves a screenshot there
// (the one in README.md).
func TestStatusPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		skiptest.Skip(t, "Chromium ("+chromiumPath+")", "headless browser test skipped: %s is missing (apt-get install -y chromium; .ci/run installs it)", chromiumPath)
	}
	// A longer heartbeat than the other cluster tests: on a loaded machine
	// a load-made election between "the page shows L" and "SIGSTOP L"
	// would leave nothing for the test to watch.
	c := startCluster(t, 600*time.Millisecond, 50*time.Millisecond, nil, nil)
	first, firstEp := c.leader(0, "")
	c.waitRecordBy(firstEp)
	var follower string
	for id := range c.nodes {
		if id != first {
			follower = id
			break
		}
	}
	// Every member's HTTP address is recorded (followers record theirs
	// with the leader), so the page can show every node.
	waitUntil(t, 20*time.Second, "the follower's /cluster shows all three nodes", func() (bool, string) {
		var v clusterView
		if err := getJSON(c.hc, c.nodeURL[follower]+"/cluster", &v); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, m := range v.Members {
			if m.Status != nil {
				n++
			}
		}
		return n == 3 && v.Leader != "" && v.Store != nil, fmt.Sprintf("%+v", v)
	})

	b := startBrowser(t, c.nodeURL[follower]+"/")
	dom := func(expr string) string {
		t.Helper()
		return b.eval(t, expr)
	}
	// The leader the page shows, confirmed by that node's own /status.
	var old string
	var oldEp epoch.Epoch
	waitUntil(t, 30*time.Second, "the page shows the node that holds the epoch", func() (bool, string) {
		got := dom(`document.getElementById("leader").dataset.leader + "/" + document.getElementById("leader").dataset.term`)
		id, term, _ := strings.Cut(got, "/")
		st, err := c.status(id)
		if err != nil || st.Epoch == "" || fmt.Sprint(st.Term) != term {
			return false, got
		}
		if id == follower {
			// Leadership moved to the page's own node (an election under
			// load); the test needs it to follow: hand leadership on.
			for other := range c.nodeURL {
				if other != follower {
					status, reply, err := post(c.hc, c.nodeURL[follower]+"/transfer", `{"id":"`+other+`"}`,
						"Origin", c.nodeURL[follower], "Sec-Fetch-Site", "same-origin")
					return false, fmt.Sprintf("%s: the page's own node leads; /transfer to %s: %d %s %v", got, other, status, reply, err)
				}
			}
		}
		old, oldEp = id, mustParse(t, st.Epoch)
		return true, ""
	})
	if rows := dom(`String(document.querySelectorAll("#members tbody tr").length)`); rows != "3" {
		t.Errorf("the page lists %s members, want 3", rows)
	}

	c.nodes[old].signal(syscall.SIGSTOP)
	next, nextEp := c.leader(oldEp.Term, old)
	waitUntil(t, 30*time.Second, "the page (not reloaded) shows a new leader, not "+old, func() (bool, string) {
		got := dom(`document.getElementById("leader").dataset.leader + "/" + document.getElementById("leader").dataset.term`)
		id, term, _ := strings.Cut(got, "/")
		n, err := strconv.ParseUint(term, 10, 64)
		return err == nil && id != "" && id != old && n >= nextEp.Term, got + " (status API: " + next + ")"
	})
	c.waitRecordBy(nextEp)
	c.nodes[old].signal(syscall.SIGCONT)
	waitUntil(t, 30*time.Second, "the page shows the refused write of "+oldEp.String(), func() (bool, string) {
		got := dom(`document.getElementById("last-refused").dataset.epoch + " | " + document.getElementById("last-refused").textContent`)
		return strings.HasPrefix(got, oldEp.String()+" |") && strings.Contains(got, "stale epoch"), got
	})
	if h := dom(`document.querySelector('#highest tr[data-resource="register"] td:nth-child(2)').textContent`); h == oldEp.String() {
		t.Errorf("the page shows the old leader's epoch %s as the store's highest", h)
	}
	if file := os.Getenv("TERMFENCE_SCREENSHOT"); file != "" {
		if err := os.WriteFile(file, b.screenshot(t), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", file)
	}
}

func mustParse(t *testing.T, s string) epoch.Epoch {
	t.Helper()
	e, err := epoch.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// browser is a headless Chromium driven over the DevTools protocol.
type browser struct {
	cmd  *exec.Cmd
	ws   *wsConn
	mu   sync.Mutex
	next int
}

var devtoolsRE = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// startBrowser starts Chromium on pageURL and connects to the page's
// DevTools target. Chromium and its children are killed when the test ends.
func startBrowser(t *testing.T, pageURL string) *browser {
	t.Helper()
	cmd := exec.Command(chromiumPath, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--hide-scrollbars", "--window-size=1100,860",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-port=0", pageURL)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	found := make(chan string, 1)
	var errLog lockedBuffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			errLog.Write([]byte(sc.Text() + "\n"))
			if m := devtoolsRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(waited)
	}()
	b := &browser{cmd: cmd}
	t.Cleanup(func() {
		if b.ws != nil {
			b.ws.Close()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		if t.Failed() {
			t.Logf("--- chromium's stderr:\n%s", errLog.String())
		}
	})
	var browserWS string
	select {
	case browserWS = <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("chromium did not open its DevTools port in 30s:\n%s", errLog.String())
	}
	u, err := url.Parse(browserWS)
	if err != nil {
		t.Fatal(err)
	}
	// The page target's own websocket.
	var pageWS string
	waitUntil(t, 20*time.Second, "chromium lists the page target", func() (bool, string) {
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		if err := getJSON(client(nil), "http://"+u.Host+"/json/list", &targets); err != nil {
			return false, err.Error()
		}
		for _, tg := range targets {
			if tg.Type == "page" && strings.HasPrefix(tg.URL, pageURL) {
				pageWS = tg.WebSocketDebuggerURL
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", targets)
	})
	if b.ws, err = dialWS(pageWS); err != nil {
		t.Fatal(err)
	}
	return b
}

// call sends one DevTools command and returns its result.
func (b *browser) call(t *testing.T, method string, params any) json.RawMessage {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := b.ws.WriteText(msg); err != nil {
		t.Fatalf("devtools %s: %v", method, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = b.ws.c.SetReadDeadline(deadline)
		raw, err := b.ws.ReadMessage()
		if err != nil {
			t.Fatalf("devtools %s: %v", method, err)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct{ Message string }
		}
		if json.Unmarshal(raw, &reply) != nil || reply.ID != id {
			continue // an event, or another reply
		}
		if reply.Error != nil {
			t.Fatalf("devtools %s: %s", method, reply.Error.Message)
		}
		return reply.Result
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as a string ("" for null, undefined or an exception).
func (b *browser) eval(t *testing.T, expr string) string {
	t.Helper()
	res := b.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails any `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.ExceptionDetails != nil || r.Result.Value == nil {
		return ""
	}
	return fmt.Sprint(r.Result.Value)
}

// screenshot returns a PNG of the page.
func (b *browser) screenshot(t *testing.T) []byte {
	t.Helper()
	res := b.call(t, "Page.captureScreenshot", map[string]any{"format": "png"})
	var r struct{ Data string }
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	return png
}

// wsConn is the smallest websocket client the DevTools protocol needs
// (RFC 6455: the handshake, masked text frames out, unmasked frames in,
// fragmentation; no extensions). The standard library has none.
type wsConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialWS(rawURL string) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		return nil, err
	}
	keyb := make([]byte, 16)
	_, _ = rand.Read(keyb)
	key := base64.StdEncoding.EncodeToString(keyb)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key)
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		c.Close()
		return nil, fmt.Errorf("websocket handshake: %s", resp.Status)
	}
	return &wsConn{c: c, r: r}, nil
}

func (w *wsConn) Close() error { return w.c.Close() }

// WriteText sends one masked text frame.
func (w *wsConn) WriteText(p []byte) error {
	hdr := []byte{0x81} // FIN, text
	switch n := len(p); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := make([]byte, 4)
	_, _ = rand.Read(mask)
	hdr = append(hdr, mask...)
	body := make([]byte, len(p))
	for i := range p {
		body[i] = p[i] ^ mask[i%4]
	}
	_ = w.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := w.c.Write(append(hdr, body...))
	return err
}

// ReadMessage returns the next text or binary message, joining fragments
// and skipping control frames.
func (w *wsConn) ReadMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(w.r, h[:]); err != nil {
			return nil, err
		}
		fin, op := h[0]&0x80 != 0, h[0]&0x0f
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(w.r, b[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(w.r, b[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if h[1]&0x80 != 0 || n > 64<<20 {
			return nil, errors.New("websocket: masked or oversized frame from the server")
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(w.r, payload); err != nil {
			return nil, err
		}
		switch op {
		case 0x8:
			return nil, io.EOF
		case 0x9, 0xa:
			continue // ping, pong
		}
		msg = append(msg, payload...)
		if fin {
			return msg, nil
		}
	}
}
