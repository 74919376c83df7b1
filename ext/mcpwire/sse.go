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
