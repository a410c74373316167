// Package httpfence puts a storageguard.Guard in front of HTTP: NewProxy, a
// fencing reverse proxy for a resource that cannot check tokens itself (the
// proxy is the serialization point), and Middleware, for a Go handler that
// owns its storage. Both read the token from the Fencing-Token header
// (epoch.Header, TokenFrom), verify it with the Guard, and serve the request
// from inside the fence's Do for the request's resource; refusals get a JSON
// Refusal and the status of HTTPStatus. Servers that call a Guard or a fence
// themselves answer the same way with RefusalFor.
//
// # Guarantees
//
//   - A token that is missing, malformed, duplicated, unsigned or badly
//     signed (under a signing Verifier), or that names another cluster than
//     the Guard's, is refused before the fence is asked to admit anything:
//     it never raises the fence (docs/DESIGN.md I6). Such a refusal does
//     not read the fence either and names nothing internal: no highest
//     epoch, no resource name (by default the backend's URL).
//   - The forwarded request (the wrapped handler) runs inside the fence's
//     Do, so it runs only under an admitted epoch, and no newer epoch is
//     admitted until every request in flight under an older one has been
//     served (I4): the proxy returns from the write only after the
//     backend's response has been copied to the client in full, or cut off
//     at ProxyConfig.Timeout. Requests under the same epoch run
//     concurrently. A client that goes away does not end its request's
//     hold early: the fence holds for as long as the backend (or the
//     handler) works on the request, whatever the fence (sqlfence included:
//     its transaction outlives the request's cancelled context).
//   - The hold: no byte of a request under an epoch reaches the backend,
//     and a backend that keeps the contract below no longer acts on it,
//     once a newer epoch was admitted for its resource. If any byte of the
//     request (its header included) may have reached the backend, the hold
//     lasts until the backend has answered in full (its response read to
//     the end; an upgraded connection closed by the backend after the
//     client's end was passed on to it). When it did not (the client went
//     away mid-body — HTTP/1.1 close or HTTP/2 stream reset —, the
//     backend connection broke, the response was cut off, the timeout cut
//     the exchange off, the backend half-closed an upgraded connection),
//     the proxy cuts the backend connection with a reset, so that nothing
//     more of the request can reach the backend, and holds the epoch for
//     ProxyConfig.BackendTimeout from the cut. Such a request is counted
//     (ProxyStats.Held) and logged; its client gets its 502 at once (with
//     Connection: close over HTTP/1.1). Only a request that failed to
//     dial is released at once. A newer epoch waits behind an older
//     request for at most Timeout + BackendTimeout + 100 ms.
//   - A restarted proxy (its fence's high-water mark is durable, the
//     holds of the process before it were not) reads each resource's
//     highest epoch before it admits anything for it; requests under that
//     epoch are forwarded at once, a newer epoch's only once
//     Timeout + BackendTimeout + 100 ms from the proxy's start has passed
//     (the longest hold the previous process could have had; the same
//     timeouts are assumed).
//   - Paths have one spelling: before a request is mapped to its resource
//     (ProxyConfig.Resource) and forwarded, empty and "." segments and a
//     trailing "/" are dropped and ".." resolved, and the backend gets the
//     canonical path; a path with no canonical form (an encoded '/', '\'
//     or '.', a '%' or '\' left after decoding, ".." above the root) is
//     refused with 400 before the fence is asked.
//   - Middleware gives the handler a context that a gone client does not
//     cancel, so that storage calls made with it are not abandoned
//     half-way; the hold lasts until the handler returns.
//   - A GET or HEAD with an Upgrade header or a Connection header naming
//     upgrade, and every CONNECT, is a write: never an unfenced read.
//   - Nothing of a request-body read that ended in an error (a broken
//     chunked framing) is forwarded: the backend sees the body cut off,
//     never ended.
//   - The proxy's Timeout bounds the whole request from admission on,
//     slow clients included: deadlines on the client's connection cut off a
//     client that trickles its body or does not read the response (a
//     request cut off so is then held as above, for BackendTimeout). Each cut-off is logged and
//     counted (ProxyStats). The deadlines are set through
//     http.ResponseController: a middleware in front of the proxy that
//     wraps the ResponseWriter must give its wrapper an
//     Unwrap() http.ResponseWriter method, or the proxy cannot set them
//     (it says so once in ErrorLog and still serves, bounded by Timeout
//     only on the backend side).
//   - The backend never sees a token the proxy did not verify: every
//     spelling of the header that a backend could read as the token
//     (Fencing_Token, HTTP_FENCING_TOKEN, …) is stripped; the verified one
//     is forwarded only with ProxyConfig.ForwardToken.
//   - The proxy retries a request to the backend only when a pooled
//     connection failed before any response byte and the request is
//     replayable (GET, HEAD, OPTIONS, TRACE or with an Idempotency-Key, and
//     without a body); any other failure is answered 502 and not repeated.
//
// # Non-guarantees
//
//   - A request that reaches the resource around the proxy is unfenced
//     (I7): the proxy must be its only path.
//   - With epoch.Plain as the Guard's Verifier nothing is authenticated:
//     anyone who can reach the proxy can present any epoch. (A Guard with
//     no Verifier at all refuses every token: 401, ErrNoVerifier.)
//   - Fencing refuses; it does not undo. A backend outside the contract
//     below is not covered: one that answers before it acts (202 Accepted,
//     then applies the write) is taken as done when its answer is
//     complete, and one that works on a request for longer than
//     BackendTimeout after it read it may apply it after a newer epoch was
//     admitted.
//   - A client that went away mid-request, or a backend that broke a
//     connection, holds the epoch for up to BackendTimeout after the cut.
//     Over HTTP/2 the client of a request so held sees its stream end
//     only when the hold does; over HTTP/1.1 a response the backend cut
//     off mid-body is aborted then too.
//   - Middleware has no timeout of its own: a handler that does not return
//     holds its epoch; bound its running time. A handler that returns
//     while its own storage may still act on a request it abandoned
//     half-way (for instance its client's body was cut off while it was
//     forwarded) ends the hold too early: it must wait out the storage's
//     timeout itself, as the proxy does.
//   - A stale or conflicting epoch's refusal (an authentic token) names the
//     resource and both epochs.
//   - Reads are fenced only if they carry a token (ProxyConfig.UnfencedReads
//     lets plain GET and HEAD without one through: no body, no method
//     override, no protocol upgrade — Upgrade, Connection: upgrade and
//     CONNECT are writes); a read admitted under an epoch can be stale by
//     the time the client uses it.
//   - Over an SQL fence, a write is as safe as the database session that
//     holds the lock (see storageguard/sqlfence): a session lost while the
//     request was served is logged (storageguard.ErrFenceLost; the response
//     was already sent), not prevented.
//
// # The backend contract
//
// What the proxy's hold assumes of the backend, in one place:
//
//  1. Its own timeout: it acts on a request at most
//     ProxyConfig.BackendTimeout after it read the request's last byte
//     from its connection, and never after it gave up on it.
//  2. Done when its response is complete: once the proxy has read the
//     response to its end, the backend no longer acts on the request.
//  3. An upgraded connection: done once the backend closed its side after
//     the client's end was passed on to it (it closed both directions). A
//     backend that closes its side while the client's is open may still
//     read and act, and is held as one that did not answer.
//
// A backend that answers before it acts, or that queues a request and
// counts its timeout from when it takes it off the queue, is outside the
// contract, and the hold does not protect it.
package httpfence
