package mcpendpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
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
// numbers that might not fit a float64, an ID it would send back
// otherwise). The request keeps everything serveStateless gave it: the
// verified user's table, the lease, the cancellation by CloseToken and by
// the client's disconnect.

// maxSDKDepth is how deep go-sdk's decoder lets JSON nest.
const maxSDKDepth = 1000

// fastCall is a plain stateless tools/call, parsed.
type fastCall struct {
	id   json.RawMessage
	name string
	args json.RawMessage // as the client sent them; nil when absent
	caps json.RawMessage // the client's capabilities as go-sdk reports them
	meta json.RawMessage // params._meta, raw; nil when absent
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
	c, ok := parseFast(r, body, u)
	if !ok {
		return false
	}
	ent := u.table.Load().byName[c.name]
	if ent == nil || ent.paramHeaders {
		return false
	}
	// From here on the request is answered here: r.Body is not read again.
	e.fastCalls.Add(1)
	if e.log.Enabled(ctx, slog.LevelDebug) { // the arguments would cost even then
		e.log.Debug("mcp: a stateless tools/call took the fast path", "user", u.user, "tool", ent.original)
	}
	var (
		result *ext.CallToolResult
		rerr   *rpcError
	)
	if refused := ent.refusal(); refused != nil {
		result, _ = statelessFields(&ext.CallToolResult{Raw: refused})
	} else {
		sess := &sdkSession{ctx: ctx, caps: c.caps}
		var meta json.RawMessage
		if e.tel != nil {
			meta = c.meta
		}
		result, rerr = e.callStateless(ctx, u, ent, c.args, nil, meta, sess)
		sess.end()
	}
	// One event, as go-sdk writes it: with no deadline (a big result to a
	// slow client takes its time, and holds up no one else), and with the
	// headers in one write (lastEvent).
	sseHeaders(w)
	if rerr != nil {
		lastEvent(w, rerr.message(c.id))
		return true
	}
	lastEvent(w, mcpwire.ResultMsg(c.id, e.statelessResult(fieldsResult(result))))
	return true
}

// fastHeaders reports whether r's headers are those of a plain
// tools/call that go-sdk's handler would take: POST (route sent it) of
// JSON, accepting JSON and SSE, with the revision's headers, and a Host
// that go-sdk's own DNS rebinding check passes.
func (e *Endpoint) fastHeaders(r *http.Request) bool {
	h := r.Header
	if h.Get("Mcp-Protocol-Version") != mcpwire.V20260728 || h.Get("Mcp-Method") != "tools/call" ||
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
// passed fastHeaders, when it is plain: exactly jsonrpc "2.0", an id
// plainID takes, method tools/call and params of only _meta, name
// (the Mcp-Name header's) and arguments, its _meta as parseMeta takes
// it. Keys are matched as bytes (go-sdk's decoder is case-sensitive); a
// key with an escape, or twice, is not plain.
func parseFast(r *http.Request, body []byte, u *userState) (fastCall, bool) {
	var c fastCall
	if !json.Valid(body) || !plainJSON(body) {
		return c, false
	}
	var version, method, params, meta, name []byte
	if !mcpwire.ObjectFields(body, func(k, v []byte) bool {
		switch string(k) {
		case "jsonrpc":
			return mcpwire.Once(&version, v)
		case "method":
			return mcpwire.Once(&method, v)
		case "id":
			return mcpwire.Once((*[]byte)(&c.id), v)
		case "params":
			return mcpwire.Once(&params, v)
		}
		return false
	}) || string(version) != `"2.0"` || string(method) != `"tools/call"` || !plainID(c.id) || params == nil {
		return c, false
	}
	if !mcpwire.ObjectFields(params, func(k, v []byte) bool {
		switch string(k) {
		case "_meta":
			return mcpwire.Once(&meta, v)
		case "name":
			return mcpwire.Once(&name, v)
		case "arguments":
			return mcpwire.Once((*[]byte)(&c.args), v)
		}
		return false
	}) || len(name) < 2 || name[0] != '"' {
		return c, false
	}
	if bytes.IndexByte(name, '\\') < 0 {
		c.name = string(name[1 : len(name)-1])
	} else if json.Unmarshal(name, &c.name) != nil {
		return c, false
	}
	if c.name != r.Header.Get("Mcp-Name") {
		return c, false
	}
	var ok bool
	c.caps, ok = u.checkMeta(meta)
	c.meta = meta
	return c, ok
}

// fastMeta is a request's _meta that the fast path took, and the client's
// capabilities it gives: a client sends the same bytes with every request.
type fastMeta struct {
	raw  string
	caps json.RawMessage
}

// maxFastMeta bounds the _meta a user's state remembers (fastMeta).
const maxFastMeta = 1 << 10

// checkMeta checks a stateless request's _meta (parseMeta), remembering
// the last one u's requests passed.
func (u *userState) checkMeta(raw json.RawMessage) (json.RawMessage, bool) {
	if m := u.fastMeta.Load(); m != nil && m.raw == string(raw) {
		return m.caps, true
	}
	caps, ok := parseMeta(raw)
	if ok && len(raw) <= maxFastMeta {
		u.fastMeta.Store(&fastMeta{raw: string(raw), caps: caps})
	}
	return caps, ok
}

// parseMeta checks that a stateless request's _meta is exactly the
// revision's triple (2026-07-28, the client's capabilities, optionally
// its info), each valid as go-sdk reads it, and returns the client's
// capabilities as go-sdk reports them.
func parseMeta(raw json.RawMessage) (json.RawMessage, bool) {
	var version, capsRaw, info []byte
	if !mcpwire.ObjectFields(raw, func(k, v []byte) bool {
		switch string(k) {
		case mcp.MetaKeyProtocolVersion:
			return mcpwire.Once(&version, v)
		case mcp.MetaKeyClientCapabilities:
			return mcpwire.Once(&capsRaw, v)
		case mcp.MetaKeyClientInfo:
			return mcpwire.Once(&info, v)
		}
		return false
	}) || string(version) != `"`+mcpwire.V20260728+`"` {
		return nil, false
	}
	var meta mcp.Meta
	if json.Unmarshal(raw, &meta) != nil {
		return nil, false
	}
	// go-sdk's own readers of the triple, on the same map it would read.
	req := &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Meta: meta}}
	caps := req.ClientCapabilities()
	if caps == nil {
		return nil, false
	}
	if info != nil && req.ClientInfo() == nil {
		return nil, false
	}
	b, err := json.Marshal(caps)
	return b, err == nil
}

// plainID reports whether a request ID reads the same in go-sdk, which
// decodes numbers as float64 and sends them back as integers, and
// strings as Go strings, sent back re-encoded: a string without escapes
// (an escaped lone surrogate such as \ud800 comes back as U+FFFD, which
// is another ID to a client that keeps UTF-16, as JavaScript does), or an
// integer of at most 15 digits.
func plainID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		return bytes.IndexByte(id, '\\') < 0
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
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			i = mcpwire.StringEnd(b, i) - 1
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
