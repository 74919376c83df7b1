package mcpwire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// AppendEvent appends one Server-Sent Event carrying msg as MCP's
// Streamable HTTP sends a message: "event: message", the message on one
// data line (compacted when it has line breaks), and id, when not empty,
// as the event's ID.
func AppendEvent(dst []byte, id string, msg []byte) ([]byte, error) {
	if bytes.ContainsAny(msg, "\r\n") {
		var b bytes.Buffer
		if err := json.Compact(&b, msg); err != nil {
			return dst, fmt.Errorf("compacting an event: %w", err)
		}
		msg = b.Bytes()
	}
	if id != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, id...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "event: message\ndata: "...)
	dst = append(dst, msg...)
	return append(dst, "\n\n"...), nil
}

// EventSize is how many bytes AppendEvent adds for msg and id, at most
// (msg as it is).
func EventSize(id string, msg []byte) int { return len(msg) + len(id) + 28 }

// EventField splits one line of an event stream (its line break removed)
// as the SSE standard reads it: the field's name up to the first colon
// and its value after it, less one leading space; colon reports whether
// there was one (a line without is a name with an empty value). A comment
// line (": …") has an empty name.
func EventField(line []byte) (name string, value []byte, colon bool) {
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return string(line), nil, false
	}
	v := line[i+1:]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return string(line[:i]), v, true
}
