package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/termfence/termfence/epoch"
)

// disconnect sends writes through the leader whose clients give up after
// a random few milliseconds, most of them while the store holds the fence
// for them (the store's -write-delay keeps writes inside it that long): the
// node's store request is cancelled mid-write. A fence that let go when its
// caller's context ended would admit the next epoch beside them.
func (n *nemesis) disconnect(ctx context.Context) error {
	li, err := n.waitLeader(ctx, 20*n.cfg.Heartbeat)
	if err != nil {
		n.logf("fault %d: disconnect: no leader", n.faults+1)
		return nil
	}
	patience := max(n.cfg.WriteDelay, 10*time.Millisecond)
	var wg sync.WaitGroup
	const writes = 6
	outcomes := make([]string, writes)
	for k := 0; k < writes; k++ {
		timeout := time.Millisecond + time.Duration(n.rng.Int63n(int64(patience)))
		client := n.cfg.Writers + k%n.cfg.Resources
		op := Op{Client: client, Kind: Write, Resource: n.cfg.resource(k % n.cfg.Resources), Node: n.c.nodes[li].id}
		op.Value = n.w.nextValue(client)
		wg.Add(1)
		go func() {
			defer wg.Done()
			op.Call = n.w.rec.Now()
			st, body, err := n.c.do(ctx, http.MethodPost, "http://"+n.c.nodes[li].proc.addr+"/write",
				map[string]string{"resource": op.Resource, "value": op.Value}, timeout)
			op.Return = n.w.rec.Now()
			classify(&op, st, body, err)
			n.w.rec.Add(op)
			outcomes[k] = fmt.Sprintf("%v after %v", op.Outcome, timeout.Round(time.Millisecond))
		}()
	}
	// Meanwhile the leadership moves, so that a newer epoch is at the
	// fence while the abandoned writes still hold it.
	moved := "no resign"
	if n.rng.Intn(2) == 0 {
		moved, err = n.moveLeadership(ctx, li)
	}
	wg.Wait()
	if err != nil {
		return err
	}
	n.logf("fault %d: disconnect: writes via %s whose clients gave up: %v; %s", n.faults+1, n.c.nodes[li].id, outcomes, moved)
	return nil
}

// moveLeadership asks node li to resign (POST /resign, a JSON body: the
// admin API takes nothing else) and says what happened. A 4xx is an error:
// the node refused the nemesis's request itself, so the fault would not be
// injected (before, an empty POST got 415 and the run went on without it).
func (n *nemesis) moveLeadership(ctx context.Context, li int) (string, error) {
	st, b, err := n.c.do(ctx, http.MethodPost, "http://"+n.c.nodes[li].proc.addr+"/resign", struct{}{}, 2*time.Second)
	switch {
	case err != nil:
		return fmt.Sprintf("resign %s: %v", n.c.nodes[li].id, err), nil
	case st/100 == 4:
		return "", fmt.Errorf("%s /resign refused the nemesis: %d %s", n.c.nodes[li].id, st, bytes.TrimSpace(b))
	}
	return fmt.Sprintf("resign %s: %d", n.c.nodes[li].id, st), nil
}

// trickle sends a write under the leader's epoch straight to the store's
// proxy, with its body trickling in one byte at a time over longer than
// the proxy's timeout, and makes the leader resign meanwhile: the proxy
// must cut the slow request off at its timeout (504), and the successor's
// writes must go on.
func (n *nemesis) trickle(ctx context.Context) error {
	li, err := n.waitLeader(ctx, 20*n.cfg.Heartbeat)
	if err != nil {
		n.logf("fault %d: trickle: no leader", n.faults+1)
		return nil
	}
	st, err := n.c.status(ctx, li, 5*n.cfg.PollEvery)
	if err != nil {
		return nil
	}
	ep, ok := st.leaderEpoch()
	if !ok {
		return nil
	}
	codec, err := epoch.NewHMAC(n.c.key)
	if err != nil {
		return err
	}
	tok, err := codec.Sign(ep)
	if err != nil {
		return err
	}
	client := n.cfg.Writers + n.cfg.Resources
	op := Op{Client: client, Kind: Write, Resource: n.cfg.resource(n.rng.Intn(n.cfg.Resources)), Node: n.c.nodes[li].id}
	op.Value = n.w.nextValue(client)
	body := fmt.Sprintf(`{"resource":%q,"value":%q}`, op.Resource, op.Value)
	// Spread the body over one and a half times the proxy's timeout.
	every := 3 * n.cfg.ProxyTimeout / 2 / time.Duration(len(body))
	done := make(chan struct{})
	go func() {
		defer close(done)
		op.Call = n.w.rec.Now()
		status, reply, err := n.trickleWrite(ctx, tok, op.Resource, body, every)
		op.Return = n.w.rec.Now()
		classify(&op, status, reply, err)
		if status == http.StatusGatewayTimeout && strings.Contains(string(reply), "backend_timeout") {
			// Cut off by the proxy before the body was complete: the
			// record service never got it.
			op.Cut, op.Pending = true, false
		}
		op.Detail = "trickle: " + op.Detail
		n.w.rec.Add(op)
	}()
	sleepCtx(ctx, n.cfg.ProxyTimeout/4)
	moved, err := n.moveLeadership(ctx, li)
	<-done
	if err != nil {
		return err
	}
	n.logf("fault %d: trickle: write under %s trickled over %v: %v (%d); %s", n.faults+1, ep, every*time.Duration(len(body)), op.Outcome, op.Status, moved)
	return nil
}

// trickleWrite posts body to the store one byte every interval.
func (n *nemesis) trickleWrite(ctx context.Context, tok, resource, body string, every time.Duration) (int, []byte, error) {
	addr := strings.TrimPrefix(n.c.storeURL, "http://")
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(n.cfg.WriteTimeout + 4*n.cfg.ProxyTimeout))
	head := fmt.Sprintf("POST /write?resource=%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s: %s\r\nConnection: close\r\n\r\n",
		url.QueryEscape(resource), addr, len(body), epoch.Header, tok)
	if _, err := io.WriteString(conn, head); err != nil {
		return 0, nil, err
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; i < len(body); i++ {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return // cut off
			}
			<-t.C
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		<-sent
		return 0, nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	conn.Close()
	<-sent
	return resp.StatusCode, b, err
}

// killSession terminates the store's PostgreSQL sessions while writes hold
// the fence in them: their transactions, fence and record together, roll
// back, the writes fail (503) and are indeterminate, and the next ones
// open new sessions.
func (n *nemesis) killSession(ctx context.Context) error {
	from := n.w.rec.Now()
	// Writes are in flight most of the time; wait a little for one to be.
	sleepCtx(ctx, n.leases(0, 1))
	killed, inTx, err := terminateStoreSessions(ctx, n.cfg.PostgresDSN)
	// Writes whose session was killed are answered 5xx within the write
	// delay: the store was "down" for them.
	sleepCtx(ctx, n.cfg.WriteDelay+100*time.Millisecond)
	n.c.noteStoreDown(from, n.w.rec.Now())
	n.logf("fault %d: pg_terminate_backend: %d store sessions ended, %d of them in a transaction: %v", n.faults+1, killed, inTx, errString(err))
	return nil
}

// errString is err's text, or "ok".
func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
