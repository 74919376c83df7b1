package mcpwire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// A tools/call's params travel as the client sent them: the endpoint
// reads them (ParseCall, ProgressToken) without rebuilding them, the call
// frame carries them raw, and a pass-through (ext-mcp) makes its one edit
// (EditCall: the server's tool name, its own progress token, its trace
// context in _meta) on the way to the server, every other member's bytes
// as they came.

// Call is a tools/call's params, read in place: the members' raw bytes
// (nil when absent).
type Call struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      json.RawMessage `json:"_meta"`
	Task      json.RawMessage `json:"task"`
}

// ParseCall reads the tools/call params p, valid JSON: a plain object of
// the four members (ScanCall) by the scanner, anything else by
// encoding/json, whose error it returns.
func ParseCall(p json.RawMessage) (Call, error) {
	if c, ok := ScanCall(p); ok {
		return c, nil
	}
	var c Call
	err := json.Unmarshal(p, &c)
	return c, err
}

// ScanCall is ParseCall's plain path: ok when p is an object of Call's
// members only, each once and spelled exactly, the name printable ASCII
// with no escape.
func ScanCall(p json.RawMessage) (c Call, ok bool) {
	var name []byte
	ok = ObjectFields(p, func(k, v []byte) bool {
		switch string(k) {
		case "name":
			return Once(&name, v)
		case "arguments":
			return Once((*[]byte)(&c.Arguments), v)
		case "_meta":
			return Once((*[]byte)(&c.Meta), v)
		case "task":
			return Once((*[]byte)(&c.Task), v)
		}
		return false
	}) && PlainString(name, &c.Name)
	return c, ok
}

// ProgressToken reads the progress token of meta, a request's _meta (raw
// valid JSON, nil or null when none): its raw value, nil when absent or
// null. A meta that is not an object is ErrMetaNotObject.
func ProgressToken(meta json.RawMessage) (json.RawMessage, error) {
	if len(meta) == 0 || string(meta) == "null" {
		return nil, nil
	}
	var tok []byte
	if !ObjectFields(meta, func(k, v []byte) bool {
		if string(k) == "progressToken" {
			tok = v
		}
		return true
	}) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(meta, &m); err != nil {
			return nil, ErrMetaNotObject
		}
		tok = m["progressToken"]
	}
	if string(tok) == "null" {
		return nil, nil
	}
	return tok, nil
}

// EditCall returns the tools/call params p (raw valid JSON, as a client
// sent them) with its name set to name ("" keeps it) and its _meta set to
// meta (nil removes it); its other members (arguments, task, any other)
// keep their bytes. It is the one edit of a client's params on their way:
// the endpoint puts its trace context in _meta, a pass-through the
// server's tool name and its own progress token (WithProgressToken).
func EditCall(p json.RawMessage, name string, meta json.RawMessage) ([]byte, error) {
	b := make([]byte, 0, len(p)+len(name)+len(meta)+16)
	b = append(b, '{')
	if ObjectFields(p, func(k, v []byte) bool {
		switch string(k) {
		case "name":
			if name != "" {
				return true
			}
		case "_meta":
			return true
		}
		b = appendMember(b, k, v)
		return true
	}) {
		if name != "" {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(b, `"name":`...)
			b = appendString(b, name)
		}
		if len(meta) > 0 {
			b = appendMember(b, []byte("_meta"), meta)
		}
		return append(b, '}'), nil
	}
	// Not a plain object of the scanner's (an escaped key): encoding/json
	// edits it.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil || m == nil {
		return nil, fmt.Errorf("tools/call params are not an object: %w", ErrParamsNotObject)
	}
	if name != "" {
		m["name"], _ = json.Marshal(name) // a string always encodes
	}
	delete(m, "_meta")
	if len(meta) > 0 {
		m["_meta"] = meta
	}
	return json.Marshal(m)
}

// ErrParamsNotObject is returned for params that are not a JSON object.
var ErrParamsNotObject = errors.New("params must be an object")
