package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxBody bounds every JSON request body the example's servers read.
const maxBody = 64 << 10

// errorBody is the JSON body of every error response: {"error": "..."}, plus
// fields some endpoints add (the leader to retry at, the epochs of a
// refusal).
type errorBody struct {
	Error      string `json:"error"`
	Code       string `json:"code,omitempty"`
	Leader     string `json:"leader,omitempty"`
	LeaderHTTP string `json:"leader_http,omitempty"`
	Presented  string `json:"presented,omitempty"`
	Highest    string `json:"highest,omitempty"`
}

// writeJSON writes v as the JSON response body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes {"error": msg} with the given status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// decodeJSON reads one JSON object from r's body into v. It refuses a body
// larger than maxBody, malformed JSON and trailing data, with an error that
// says which.
func decodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("reading request body: %w", err)
	}
	if len(body) > maxBody {
		return fmt.Errorf("request body is larger than %d bytes", maxBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("malformed JSON body: trailing data after the object")
	}
	return nil
}

// allow answers 405 unless r uses method.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed, use %s", r.Method, r.URL.Path, method))
	return false
}
