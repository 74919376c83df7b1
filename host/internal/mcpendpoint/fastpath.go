package mcpendpoint

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
)

// The fast path answers tools/call on an open session without go-sdk's
// server machinery. A call is the endpoint's hot path, and go-sdk handles
// every message through its asynchronous JSON-RPC connection: a decoder
// that allocates 32 KiB per message and several goroutine hand-offs per
// request, which on a busy machine cost more than the rest of the
// endpoint. The fast path decodes the request once with encoding/json,
// runs the call on the request's goroutine through the same session
// routing (session.call) and writes the JSON-RPC response itself. Anything
// it does not recognise exactly — another method, a notification, a
// progress token, an unknown tool, a session of another principal, an
// unsupported protocol version header — goes to go-sdk unchanged, so the
// answers and errors stay go-sdk's.

// fastRequest is the one request shape the fast path serves.
type fastRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// fastCall serves r when it is a tools/call on session sid of principal p,
// and reports whether it did. When it did not, r's body is intact.
func (e *Endpoint) fastCall(w http.ResponseWriter, r *http.Request, p Principal, sid string) bool {
	if !strings.Contains(r.Header.Get("Accept"), "application/json") ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return false
	}
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(protocolVersions, v) {
		return false
	}
	s := e.sessionByID(sid)
	if s == nil || s.revoked.Load() || bindingKey(s.p) != bindingKey(p) {
		return false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		e.bodyError(w, err)
		return true
	}
	restore := func() bool {
		r.Body = readCloser{bytes.NewReader(body), r.Body}
		return false
	}
	var req fastRequest
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" || req.Method != "tools/call" ||
		len(req.ID) == 0 || string(req.ID) == "null" || len(req.Params.Meta) > 0 {
		return restore()
	}
	ent := s.u.table.Load().byName[req.Params.Name]
	if ent == nil {
		return restore()
	}
	e.fast.Add(1)
	res := s.call(r.Context(), ent, req.Params.Arguments)
	out, err := json.Marshal(res)
	if err != nil {
		// A block the host sent is not valid JSON: the same answer as
		// session.call gives for malformed content.
		out, _ = json.Marshal(errorResult("tool " + quote(ent.name) + " returned malformed content"))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	buf.Grow(len(out) + len(req.ID) + 40)
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(req.ID)
	buf.WriteString(`,"result":`)
	buf.Write(out)
	buf.WriteString("}\n")
	_, _ = w.Write(buf.Bytes())
	return true
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// sessionByID returns the bound session with that Mcp-Session-Id.
func (e *Endpoint) sessionByID(id string) *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.byID[id]
	if s == nil || s.ss == nil || s.dropped {
		return nil
	}
	return s
}
