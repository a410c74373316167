package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"

	"github.com/termfence/termfence/epoch"
)

// storeClient talks to the store's HTTP API.
type storeClient struct {
	base string // "http://host:port", no trailing slash
	hc   *http.Client
}

// newStoreClient returns a client of the store at base over hc's transport.
// Its writes carry the token in a header that http.Client would copy to
// every redirect, whatever the host: the client refuses to follow a
// redirect to another origin (epoch.CheckRedirect), so the token never
// leaves for a host it was not meant for.
func newStoreClient(base string, hc *http.Client) *storeClient {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c := *hc
	c.CheckRedirect = epoch.CheckRedirect
	return &storeClient{base: strings.TrimRight(base, "/"), hc: &c}
}

// storeAnswer is the store's reply to a write: its status and body.
type storeAnswer struct {
	Status int
	Body   []byte
}

// Accepted reports whether the store accepted the write.
func (a storeAnswer) Accepted() bool { return a.Status == http.StatusOK }

// Refused reports whether the store refused the token: a stale or
// conflicting epoch (409), or a token that is not authentic (401, 403).
func (a storeAnswer) Refused() bool {
	return a.Status == http.StatusConflict || a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden
}

// Reason is the store's error text, for a refusal.
func (a storeAnswer) Reason() string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(a.Body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(a.Body))
}

// write sends one write stamped with token. An error means no answer.
func (c *storeClient) write(ctx context.Context, token string, req writeRequest) (storeAnswer, error) {
	body, _ := json.Marshal(req) // two strings: cannot fail
	// The resource also travels in the query: a proxy in front of the store
	// maps a request to its resource before it reads the body.
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/write?resource="+url.QueryEscape(req.Resource), bytes.NewReader(body))
	if err != nil {
		return storeAnswer{}, fmt.Errorf("store write: %w", err)
	}
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set(epoch.Header, token)
	}
	var conn httptrace.GotConnInfo
	r = r.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i }}))
	resp, err := c.hc.Do(r)
	if err != nil {
		return storeAnswer{}, fmt.Errorf("store write (%s): %w", connInfo(conn), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return storeAnswer{}, fmt.Errorf("store write (%s): reading answer: %w", connInfo(conn), err)
	}
	return storeAnswer{Status: resp.StatusCode, Body: b}, nil
}

// read returns a resource's record; ok is false if it was never written.
func (c *storeClient) read(ctx context.Context, resource string) (rep readReply, ok bool, err error) {
	err = c.getJSON(ctx, "/read?resource="+url.QueryEscape(resource), &rep)
	if err == errNotFound {
		return readReply{}, false, nil
	}
	return rep, err == nil, err
}

// status returns the store's /status.
func (c *storeClient) status(ctx context.Context) (storeStatus, error) {
	var st storeStatus
	err := c.getJSON(ctx, "/status", &st)
	return st, err
}

var errNotFound = fmt.Errorf("not found")

func (c *storeClient) getJSON(ctx context.Context, path string, v any) error {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errNotFound
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// connInfo describes the connection a failed write used, for the error:
// a reused keep-alive connection that the store closed while it sat idle
// fails differently from a fresh one.
func connInfo(i httptrace.GotConnInfo) string {
	switch {
	case i.Conn == nil:
		return "no connection"
	case !i.Reused:
		return "new connection " + i.Conn.LocalAddr().String()
	case i.WasIdle:
		return fmt.Sprintf("reused connection %s, idle %v", i.Conn.LocalAddr(), i.IdleTime.Round(time.Millisecond))
	default:
		return "reused connection " + i.Conn.LocalAddr().String()
	}
}
