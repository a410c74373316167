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
//     it never raises the fence (docs/DESIGN.md I6).
//   - The forwarded request (the wrapped handler) runs inside the fence's
//     Do, so it runs only under an admitted epoch, and no newer epoch is
//     admitted until every request in flight under an older one has been
//     served (I4): the proxy returns from the write only after the
//     backend's response has been copied to the client in full, or cut off
//     at ProxyConfig.Timeout. Requests under the same epoch run
//     concurrently.
//   - The proxy retries a request to the backend only when a pooled
//     connection failed before any response byte and the request is
//     replayable (GET, HEAD, OPTIONS, TRACE or with an Idempotency-Key, and
//     without a body); any other failure is answered 502 and not repeated.
//
// # Non-guarantees
//
//   - A request that reaches the resource around the proxy is unfenced
//     (I7): the proxy must be its only path.
//   - With no Verifier (or epoch.Plain) nothing is authenticated: anyone
//     who can reach the proxy can present any epoch.
//   - Fencing refuses; it does not undo. A backend that keeps working on a
//     request after the proxy cut it off at the timeout may still apply it,
//     possibly after a newer epoch was admitted: set the timeout above the
//     backend's own.
//   - The timeout bounds the backend exchange, not a client that is slow to
//     send its body or to read the response.
//   - A refusal's body names the resource and, when the fence knows it, its
//     highest epoch.
//   - Reads are fenced only if they carry a token (ProxyConfig.UnfencedReads
//     lets GET and HEAD without one through); a read admitted under an
//     epoch can be stale by the time the client uses it.
package httpfence
