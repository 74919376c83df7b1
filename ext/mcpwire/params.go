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
