package mcpwire

import (
	"encoding/json"
	"strconv"
)

// The MCP protocol revisions agenthost speaks, oldest first. The first
// three have sessions (initialize, Mcp-Session-Id); 2026-07-28 is
// stateless (server/discover, every request carrying its revision).
const (
	V20250326 = "2025-03-26"
	V20250618 = "2025-06-18"
	V20251125 = "2025-11-25"
	V20260728 = "2026-07-28"
)

// LatestSessionRevision is the newest revision with sessions; a newer one
// is stateless.
const LatestSessionRevision = V20251125

// Stateless reports whether revision v is stateless (2026-07-28 or later).
func Stateless(v string) bool { return v >= V20260728 }

// JSON-RPC 2.0 error codes (§5.1), and MCP's resource not found.
const (
	CodeParseError       = -32700
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternalError    = -32603
	CodeResourceNotFound = -32002
)

// Method names the wire code itself sends or reads.
const (
	MethodInitialize  = "initialize"
	MethodInitialized = "notifications/initialized"
	MethodToolsCall   = "tools/call"
	MethodToolsList   = "tools/list"
	MethodCancelled   = "notifications/cancelled"
	MethodProgress    = "notifications/progress"
	MethodDiscover    = "server/discover"
)

// AppendResult appends a response to id (raw JSON: a number or a quoted
// string) carrying result, raw.
func AppendResult(dst, id, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// ResultMsg is AppendResult to a new slice of the right size.
func ResultMsg(id, result []byte) []byte {
	return AppendResult(make([]byte, 0, len(result)+len(id)+40), id, result)
}

// AppendError appends an error response to id (raw JSON; empty is null)
// with code, message and data (raw; nil: none). The message is encoded as
// encoding/json does.
func AppendError(dst, id []byte, code int, message string, data json.RawMessage) []byte {
	if len(id) == 0 {
		id = []byte("null")
	}
	msg, _ := json.Marshal(message) // a string always encodes
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":{"code":`...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, `,"message":`...)
	dst = append(dst, msg...)
	if len(data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, data...)
	}
	return append(dst, "}}"...)
}

// ErrorMsg is AppendError to a new slice of the right size.
func ErrorMsg(id []byte, code int, message string, data json.RawMessage) []byte {
	return AppendError(make([]byte, 0, len(message)+len(id)+len(data)+60), id, code, message, data)
}

// AppendRequest appends a request with the string id (written between
// quotes as it is: it must need no escaping, as the ids agenthost makes),
// method and params (raw; nil: none).
func AppendRequest(dst []byte, id, method string, params json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":"`...)
	dst = append(dst, id...)
	dst = append(dst, '"')
	return appendRequestRest(dst, method, params)
}

// AppendRequestRawID is AppendRequest with id as raw JSON (a number, or a
// string with its quotes).
func AppendRequestRawID(dst []byte, id json.RawMessage, method string, params json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	return appendRequestRest(dst, method, params)
}

func appendRequestRest(dst []byte, method string, params json.RawMessage) []byte {
	dst = append(dst, `,"method":`...)
	dst = appendString(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// RequestMsg is AppendRequest to a new slice with room for a newline.
func RequestMsg(id, method string, params json.RawMessage) []byte {
	return AppendRequest(make([]byte, 0, len(params)+len(method)+len(id)+51), id, method, params)
}

// AppendNotification appends a notification of method with params (raw;
// nil: none).
func AppendNotification(dst []byte, method string, params json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":`...)
	dst = appendString(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// NotificationMsg is AppendNotification to a new slice with room for a
// newline.
func NotificationMsg(method string, params json.RawMessage) []byte {
	return AppendNotification(make([]byte, 0, len(params)+len(method)+41), method, params)
}

// CancelledParams are the params of notifications/cancelled for the
// request id (a string) and why.
func CancelledParams(id, reason string) json.RawMessage {
	b, _ := json.Marshal(struct {
		Reason    string `json:"reason"`
		RequestID string `json:"requestId"`
	}{reason, id}) // strings always encode
	return b
}

// appendString appends s as a JSON string: as it is between quotes when
// it needs no escaping (every method name), else as encoding/json writes
// it.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
