package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// The fast path of the stateless revision: a plain 2026-07-28 tools/call
// of a tool in the user's table is parsed once, run on the request's
// goroutine and answered with the host's result bytes, as the stateful
// sessions answer theirs, instead of going through go-sdk's stateless
// handler (a go-sdk server session, its connection goroutines and two
// decodes and an encode of the result per call). The answer is the one
// go-sdk's handler gives: 200 with one SSE event (Content-Type
// text/event-stream, Cache-Control no-cache, no-transform, Connection
// keep-alive) carrying the result with the server's identity in _meta and
// resultType "complete"; a failed call and a codemode tool get the same
// isError results. Everything else, and anything the fast path cannot
// tell go-sdk would accept the same way, goes to go-sdk's handler, which
// also refuses what it refuses: a progress token or a log level (both
// need the request's stream), any other field of the request, its params
// or its _meta, a missing or bad _meta triple, a revision or a header
// that does not match, Mcp-Param-* headers the tool's schema asks for
// (x-mcp-header), search_tools and unknown tools, a batch, a body go-sdk
// might decode otherwise (over its 1,000 levels of nesting, invalid UTF-8,
// numbers that might not fit a float64). The request keeps everything
// serveStateless gave it: the verified user's table, the lease, the
// cancellation by CloseToken and by the client's disconnect.

// maxSDKDepth is how deep go-sdk's decoder lets JSON nest.
const maxSDKDepth = 1000

// fastCall is a plain stateless tools/call, parsed.
type fastCall struct {
	id   json.RawMessage
	name string
	args json.RawMessage // as the client sent them; nil when absent
	caps json.RawMessage // the client's capabilities as go-sdk reports them
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// serveFast answers r, a stateless request of u, when it is a plain
// tools/call (see above), reporting whether it did; when it did not, r's
// body is left for go-sdk's handler as the client sent it (a failed read
// fails there the same way).
func (e *Endpoint) serveFast(ctx context.Context, w http.ResponseWriter, r *http.Request, u *userState) bool {
	if e.noFast.Load() || !e.fastHeaders(r) {
		return false
	}
	body, err := io.ReadAll(r.Body)
	rest := io.Reader(bytes.NewReader(body))
	if err != nil {
		rest = io.MultiReader(rest, errReader{err})
	}
	r.Body = readCloser{rest, r.Body}
	if err != nil {
		return false
	}
	c, ok := parseFast(r, body)
	if !ok {
		return false
	}
	ent := u.table.Load().byName[c.name]
	if ent == nil || ent.paramHeaders {
		return false
	}
	// From here on the request is answered here: r.Body is not read again.
	var result *ext.CallToolResult
	if refused := ent.refusal(); refused != nil {
		result, _ = statelessFields(&ext.CallToolResult{Raw: refused})
	} else {
		sess := &sdkSession{ctx: ctx, caps: c.caps}
		result = e.callStateless(ctx, u, ent, c.args, nil, sess)
		sess.end()
	}
	e.fastCalls.Add(1)
	sseHeaders(w)
	_ = writeEvent(w, "", resultMsg(c.id, e.statelessResult(fieldsResult(result))))
	return true
}

// fastHeaders reports whether r's headers are those of a plain
// tools/call that go-sdk's handler would take: POST (route sent it) of
// JSON, accepting JSON and SSE, with the revision's headers, and a Host
// that go-sdk's own DNS rebinding check passes.
func (e *Endpoint) fastHeaders(r *http.Request) bool {
	h := r.Header
	if h.Get("Mcp-Protocol-Version") != v20260728 || h.Get("Mcp-Method") != "tools/call" ||
		h.Get("Mcp-Name") == "" || len(h.Values("Last-Event-ID")) > 0 {
		return false
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if jsonOK, sseOK := acceptsStreamable(h.Values("Accept")); !jsonOK || !sseOK {
		return false
	}
	// With AllowedHosts, go-sdk's check is off (newStatelessHandler).
	return len(e.hosts) > 0 || sdkHostAllowed(r)
}

// sdkHostAllowed is go-sdk's DNS rebinding check (StreamableHTTPHandler
// with its util.IsLoopback), narrower than guard.HostAllowed: a loopback
// connection must name "localhost" or a loopback IP, exactly.
func sdkHostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return !ok || local == nil || !sdkLoopback(local.String()) || sdkLoopback(r.Host)
}

func sdkLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// parseFast parses the body of a stateless tools/call whose headers
// passed fastHeaders, when it is plain: exactly jsonrpc "2.0", a string
// or safe-integer id, method tools/call and params of only _meta, name
// (the Mcp-Name header's) and arguments, its _meta exactly the
// revision's triple (2026-07-28, the client's capabilities and
// optionally its info), each valid as go-sdk decodes it. Keys are matched
// exactly (maps, not structs: go-sdk's decoder is case-sensitive).
func parseFast(r *http.Request, body []byte) (fastCall, bool) {
	var c fastCall
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || len(msg) != 4 || !plainJSON(body) ||
		string(msg["jsonrpc"]) != `"2.0"` || string(msg["method"]) != `"tools/call"` {
		return c, false
	}
	c.id = msg["id"]
	if !plainID(c.id) {
		return c, false
	}
	var params map[string]json.RawMessage
	if raw, ok := msg["params"]; !ok || json.Unmarshal(raw, &params) != nil {
		return c, false
	}
	for k := range params {
		switch k {
		case "_meta", "name", "arguments":
		default:
			return c, false
		}
	}
	if json.Unmarshal(params["name"], &c.name) != nil || c.name != r.Header.Get("Mcp-Name") {
		return c, false
	}
	c.args = params["arguments"]
	var meta mcp.Meta
	if json.Unmarshal(params["_meta"], &meta) != nil || meta[mcp.MetaKeyProtocolVersion] != v20260728 {
		return c, false
	}
	for k := range meta {
		switch k {
		case mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientCapabilities, mcp.MetaKeyClientInfo:
		default:
			return c, false
		}
	}
	// go-sdk's own readers of the triple, on the same map it would read.
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Meta: meta}}
	caps := req.ClientCapabilities()
	if caps == nil {
		return c, false
	}
	if _, ok := meta[mcp.MetaKeyClientInfo]; ok && req.ClientInfo() == nil {
		return c, false
	}
	var err error
	if c.caps, err = json.Marshal(caps); err != nil {
		return c, false
	}
	return c, true
}

// plainID reports whether a request ID reads the same in go-sdk, which
// decodes numbers as float64 and sends them back as integers: a string,
// or an integer of at most 15 digits.
func plainID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		return true
	}
	digits := id
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || digits[0] == '0' && len(id) > 1 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// plainJSON reports whether b, valid JSON, decodes in go-sdk as it does
// here: valid UTF-8, nested at most maxSDKDepth deep, and no number that
// might not fit a float64 (an exponent, or over 300 digits), which go-sdk
// refuses when it decodes a call's arguments into Go values (to check the
// Mcp-Name header).
func plainJSON(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	depth, digits := 0, 0
	inStr, escaped := false, false
	for _, c := range b {
		if inStr {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch {
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			if depth++; depth > maxSDKDepth {
				return false
			}
		case c == '}' || c == ']':
			depth--
		case c >= '0' && c <= '9':
			if digits++; digits > 300 {
				return false
			}
			continue
		case c == '.':
			continue
		case (c == 'e' || c == 'E') && digits > 0:
			return false
		}
		digits = 0
	}
	return true
}

// statelessResult is the result object of checked fields (fieldsResult's
// `{"content":...}`) as go-sdk sends a 2026-07-28 tool's: with the
// server's identity in _meta and resultType "complete".
func (e *Endpoint) statelessResult(fields json.RawMessage) []byte {
	b := make([]byte, 0, len(e.info)+len(fields)+100)
	b = append(b, `{"_meta":{"`+mcp.MetaKeyServerInfo+`":`...)
	b = append(b, e.info...)
	b = append(b, "},"...)
	b = append(b, fields[1:len(fields)-1]...)
	return append(b, `,"resultType":"complete"}`...)
}
