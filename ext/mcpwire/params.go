package mcpwire

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The params edits: what the endpoint takes out of a client's tools/call
// params and what ext-mcp puts back for the server, each the one place
// that does it.

// ErrMetaNotObject is returned for a _meta that is not a JSON object.
var ErrMetaNotObject = errors.New("_meta must be an object")

// SplitProgressToken takes the progress token out of a request's _meta:
// token is its raw value (nil when absent or null), rest the other fields
// (nil when none).
func SplitProgressToken(meta json.RawMessage) (token, rest json.RawMessage, err error) {
	if len(meta) == 0 || string(meta) == "null" {
		return nil, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, nil, ErrMetaNotObject
	}
	token = m["progressToken"]
	if string(token) == "null" {
		token = nil
	}
	delete(m, "progressToken")
	if len(m) == 0 {
		return token, nil, nil
	}
	rest, err = json.Marshal(m)
	return token, rest, err
}

// WithProgressToken returns the _meta object meta with progressToken set
// to the string token; meta as it is (nil when empty or null) when token
// is "".
func WithProgressToken(meta json.RawMessage, token string) (json.RawMessage, error) {
	t := bytes.TrimSpace(meta)
	empty := len(t) == 0 || string(t) == "null"
	if token == "" {
		if empty {
			return nil, nil
		}
		return meta, nil
	}
	m := map[string]json.RawMessage{}
	if !empty {
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, ErrMetaNotObject
		}
	}
	m["progressToken"], _ = json.Marshal(token) // a string always encodes
	return json.Marshal(m)
}

// CallParams builds tools/call params: the tool's name (encoded as
// encoding/json does), the raw arguments, meta with the progress token
// token (see WithProgressToken) and the raw task params (nil: none).
func CallParams(name string, args, meta json.RawMessage, token string, task json.RawMessage) ([]byte, error) {
	m, err := WithProgressToken(meta, token)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 64+len(name)+len(args)+len(m)+len(task))
	b = append(b, `{"name":`...)
	b = appendString(b, name)
	b = append(b, `,"arguments":`...)
	b = append(b, args...)
	if len(m) > 0 {
		b = append(b, `,"_meta":`...)
		b = append(b, m...)
	}
	if len(task) > 0 {
		b = append(b, `,"task":`...)
		b = append(b, task...)
	}
	return append(b, '}'), nil
}

// TraceContext is the W3C Trace Context a request's _meta carries,
// where the MCP semantic conventions put it (traceparent, tracestate);
// "" when meta carries none or is not an object.
func TraceContext(meta json.RawMessage) (traceparent, tracestate string) {
	if !bytes.Contains(meta, []byte(`"traceparent"`)) {
		return "", ""
	}
	var m struct {
		TraceParent string `json:"traceparent"`
		TraceState  string `json:"tracestate"`
	}
	if json.Unmarshal(meta, &m) != nil || m.TraceParent == "" {
		return "", ""
	}
	return m.TraceParent, m.TraceState
}

// WithTraceContext returns the _meta object meta with its traceparent
// and tracestate replaced by the given ones (an empty traceparent removes
// both; an empty tracestate removes it), its other fields kept: meta as it
// is when there is nothing to change, nil when no field is left.
func WithTraceContext(meta json.RawMessage, traceparent, tracestate string) (json.RawMessage, error) {
	t := bytes.TrimSpace(meta)
	empty := len(t) == 0 || string(t) == "null"
	if traceparent == "" && (empty || !bytes.Contains(t, []byte(`"trace`))) {
		return meta, nil
	}
	m := map[string]json.RawMessage{}
	if !empty {
		if err := json.Unmarshal(t, &m); err != nil {
			return meta, ErrMetaNotObject
		}
	}
	delete(m, "traceparent")
	delete(m, "tracestate")
	if traceparent != "" {
		m["traceparent"], _ = json.Marshal(traceparent) // a string always encodes
		if tracestate != "" {
			m["tracestate"], _ = json.Marshal(tracestate)
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return json.Marshal(m)
}

// The keys of the per-request envelope of the stateless revision
// (2026-07-28, SEP-2575): every request carries its revision, the
// client's identity and its capabilities in _meta. They describe one hop,
// client to server.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Envelope returns the stateless revision's envelope members of the
// request params p — its _meta's protocol version (2026-07-28 or later),
// client info and client capabilities — as a JSON object; nil when p
// carries no such revision (an older revision's request, or none).
func Envelope(p json.RawMessage) json.RawMessage {
	if !bytes.Contains(p, []byte(MetaProtocolVersion)) {
		return nil
	}
	var v struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(p, &v) != nil {
		return nil
	}
	var rev string
	if json.Unmarshal(v.Meta[MetaProtocolVersion], &rev) != nil || !Stateless(rev) {
		return nil
	}
	env := map[string]json.RawMessage{}
	for _, k := range []string{MetaProtocolVersion, MetaClientInfo, MetaClientCapabilities} {
		if m, ok := v.Meta[k]; ok {
			env[k] = m
		}
	}
	b, _ := json.Marshal(env) // raw values decoded from JSON always encode
	return b
}

// WithEnvelope returns the request params p (a JSON object, raw and
// valid, as EditCall takes them) with the members of env (a JSON object,
// as [Envelope] returns it) set in its _meta, over any of the same keys;
// its other members, and _meta's, keep their bytes. p as it is when env
// is empty. One pass over p in the common case (no _meta, or one without
// those keys: a progress token, a trace context).
func WithEnvelope(p, env json.RawMessage) ([]byte, error) {
	if len(env) == 0 {
		return p, nil
	}
	env = bytes.TrimSpace(env)
	envIn, ok := objectInside(env)
	if !ok {
		return nil, ErrMetaNotObject
	}
	b, meta, ok := objectWithout(p, "_meta", len(env)+16)
	if !ok {
		return withEnvelopeDecoded(p, env)
	}
	t := bytes.TrimSpace(meta)
	in, isObject := objectInside(t)
	switch {
	case len(t) == 0 || string(t) == "null" || (isObject && len(bytes.TrimSpace(in)) == 0):
		meta = env
	case isObject && !bytes.Contains(in, []byte(`"io.modelcontextprotocol/`)):
		// The envelope's members, then _meta's, as they are.
		meta = append(append(append(append(append(make([]byte, 0, len(envIn)+len(in)+3), '{'), envIn...), ','), in...), '}')
	default:
		return withEnvelopeDecoded(p, env)
	}
	return append(appendMember(b, []byte("_meta"), meta), '}'), nil
}

// withEnvelopeDecoded is WithEnvelope through encoding/json: for params
// the scanner does not take (an escaped key) and a _meta that already
// holds envelope keys (the envelope's win) or is not an object (refused).
func withEnvelopeDecoded(p, env json.RawMessage) ([]byte, error) {
	var params map[string]json.RawMessage
	if err := json.Unmarshal(p, &params); err != nil || params == nil {
		return nil, ErrParamsNotObject
	}
	m, add := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	if t := bytes.TrimSpace(params["_meta"]); len(t) > 0 && string(t) != "null" {
		if err := json.Unmarshal(t, &m); err != nil {
			return nil, ErrMetaNotObject
		}
	}
	if err := json.Unmarshal(env, &add); err != nil {
		return nil, ErrMetaNotObject
	}
	for k, v := range add {
		m[k] = v
	}
	merged, _ := json.Marshal(m) // raw values decoded from JSON always encode
	return editMember(p, "_meta", merged)
}

// objectInside returns what is between the braces of o, a JSON object
// (trimmed, and valid: it is not checked beyond its braces); false when o
// is not one.
func objectInside(o []byte) ([]byte, bool) {
	if len(o) < 2 || o[0] != '{' || o[len(o)-1] != '}' {
		return nil, false
	}
	return o[1 : len(o)-1], true
}

// editMember returns the object p with member key set to v (raw), its
// other members' bytes kept.
func editMember(p json.RawMessage, key string, v []byte) ([]byte, error) {
	if b, _, ok := objectWithout(p, key, len(key)+len(v)+8); ok {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendString(b, key)
		b = append(b, ':')
		b = append(b, v...)
		return append(b, '}'), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil || m == nil {
		return nil, ErrParamsNotObject
	}
	m[key] = v
	return json.Marshal(m)
}

// objectWithout copies the members of the object p but key into a new
// object left open (no closing brace; extra bytes spare), and returns it
// with key's value (nil when absent); ok is false when the scanner does
// not take p (an escaped key: encoding/json must).
func objectWithout(p []byte, key string, extra int) (b, val []byte, ok bool) {
	b = append(make([]byte, 0, len(p)+extra), '{')
	ok = ObjectFields(p, func(k, v []byte) bool {
		if string(k) == key {
			val = v
			return true
		}
		b = appendMember(b, k, v)
		return true
	})
	return b, val, ok
}

// appendMember appends the member k (a key as the scanner gives it, its
// bytes between the quotes) with the raw value v to b, an open object.
func appendMember(b, k, v []byte) []byte {
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, k...)
	b = append(b, `":`...)
	return append(b, v...)
}
