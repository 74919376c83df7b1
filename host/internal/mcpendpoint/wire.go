package mcpendpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext/mcpwire"
)

// rpcMsg is one JSON-RPC message of a POST body: a request (method and
// id), a notification (method, no id) or a response (id, result or
// error). Params, results and IDs stay raw.
type rpcMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

func hasID(id json.RawMessage) bool { return len(id) > 0 && string(id) != "null" }

// check reports what is wrong with the message, if anything.
func (m *rpcMsg) check() error {
	if m.JSONRPC != "2.0" {
		return errors.New(`"jsonrpc" must be "2.0"`)
	}
	if hasID(m.ID) && m.ID[0] != '"' && m.ID[0] != '-' && (m.ID[0] < '0' || m.ID[0] > '9') {
		return errors.New(`"id" must be a string or a number`)
	}
	if m.Method == "" && !hasID(m.ID) {
		return errors.New("a message needs a method or an id")
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return errors.New("a response needs a result or an error")
	}
	return nil
}

// idKey is the key of a request ID in the maps of requests in flight.
func idKey(id json.RawMessage) string {
	if !hasID(id) {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// replyID is the id an error answer to m carries: m's when m is a
// request (it has a method) with a string or number id, else none (null).
// A would-be response's id names a request of ours, not the client's: an
// error under it could fail another of the client's requests that has the
// same id.
func (m *rpcMsg) replyID() json.RawMessage {
	if m.Method == "" || !hasID(m.ID) || m.ID[0] != '"' && m.ID[0] != '-' && (m.ID[0] < '0' || m.ID[0] > '9') {
		return nil
	}
	return m.ID
}

// parsedBody is what a POST body holds: one message, or a batch (a JSON
// array) of them.
type parsedBody struct {
	msgs  []rpcMsg
	batch bool
	// bad says, for each message of a batch, why its element is no
	// JSON-RPC message at all ("" when it decoded; check it then).
	bad []string
}

// parseBody reads a POST body. A body that is not JSON is a Parse error;
// an empty batch, one of more than maxBatch elements, and a single message
// that is JSON but no object of a message's fields are an Invalid Request.
// A batch's elements are decoded one by one, so that each one that is no
// message (a number, a string, an array, an object whose fields have the
// wrong types) is marked in bad and answered on its own.
func parseBody(body []byte) (parsedBody, *rpcError) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return parsedBody{}, &rpcError{code: mcpwire.CodeParseError, msg: "the body is empty"}
	}
	if trimmed[0] == '[' {
		return parseBatch(trimmed)
	}
	msgs := make([]rpcMsg, 1)
	valid := json.Valid(trimmed)
	if valid && fastMsg(trimmed, &msgs[0]) {
		return parsedBody{msgs: msgs}, nil
	}
	msgs[0] = rpcMsg{}
	if err := json.Unmarshal(trimmed, &msgs[0]); err != nil {
		if valid {
			return parsedBody{}, &rpcError{code: mcpwire.CodeInvalidRequest, msg: notMessage(trimmed, err)}
		}
		return parsedBody{}, &rpcError{code: mcpwire.CodeParseError, msg: "malformed message: " + err.Error()}
	}
	return parsedBody{msgs: msgs}, nil
}

// parseBatch reads a body that is a JSON array (see parseBody).
func parseBatch(b []byte) (parsedBody, *rpcError) {
	out := parsedBody{batch: true}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return out, &rpcError{code: mcpwire.CodeParseError, msg: "malformed batch: " + err.Error()}
	}
	switch {
	case len(raws) == 0:
		return out, &rpcError{code: mcpwire.CodeInvalidRequest, msg: "the batch is empty"}
	case len(raws) > maxBatch:
		// Each request of a batch runs at once: bound them before they start.
		return out, &rpcError{code: mcpwire.CodeInvalidRequest, msg: fmt.Sprintf("a JSON-RPC batch may hold at most %d messages", maxBatch)}
	}
	out.msgs = make([]rpcMsg, len(raws))
	out.bad = make([]string, len(raws))
	for i, raw := range raws {
		m := &out.msgs[i]
		switch {
		case raw[0] != '{':
			out.bad[i] = notMessage(raw, nil)
		case fastMsg(raw, m):
		default:
			*m = rpcMsg{}
			if err := json.Unmarshal(raw, m); err != nil {
				out.bad[i] = notMessage(raw, err)
			}
		}
	}
	return out, nil
}

// notMessage says why v, one valid JSON value, is no JSON-RPC message:
// it is no object, or err, json.Unmarshal's into an rpcMsg, names the
// field of the wrong type (jsonrpc or method: the others stay raw).
func notMessage(v []byte, err error) string {
	if te := (*json.UnmarshalTypeError)(nil); errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%q must be a string, not a JSON %s", te.Field, te.Value)
	}
	if v[0] != '{' {
		return "a JSON-RPC message must be an object, not " + jsonKind(v[0])
	}
	return "not a JSON-RPC message: " + err.Error()
}

// jsonKind names the kind of the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// fastMsg fills m from b, one valid JSON value, when json.Unmarshal would
// decode it the same way but is not needed: an object of rpcMsg's fields
// only, each once and spelled exactly, its strings plain (see
// plainString). The raw parts alias b. Anything else is Unmarshal's,
// which a tools/call's body scanned some five times over (a check of the
// whole and a decode, for the message and again for its params).
func fastMsg(b []byte, m *rpcMsg) bool {
	var version, method []byte
	return mcpwire.ObjectFields(b, func(k, v []byte) bool {
		switch string(k) {
		case "jsonrpc":
			return mcpwire.Once(&version, v)
		case "id":
			return mcpwire.Once((*[]byte)(&m.ID), v)
		case "method":
			return mcpwire.Once(&method, v)
		case "params":
			return mcpwire.Once((*[]byte)(&m.Params), v)
		case "result":
			return mcpwire.Once((*[]byte)(&m.Result), v)
		case "error":
			return mcpwire.Once((*[]byte)(&m.Error), v)
		}
		return false
	}) && mcpwire.PlainString(version, &m.JSONRPC) && mcpwire.PlainString(method, &m.Method)
}

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	code int
	msg  string
	data json.RawMessage
}

func (e *rpcError) Error() string { return fmt.Sprintf("%s (code %d)", e.msg, e.code) }

func errParams(format string, args ...any) *rpcError {
	return &rpcError{code: mcpwire.CodeInvalidParams, msg: fmt.Sprintf(format, args...)}
}

// message is e as an error response to id (nil: null).
func (e *rpcError) message(id []byte) []byte { return mcpwire.ErrorMsg(id, e.code, e.msg, e.data) }

// writeRPCError answers with a JSON-RPC error and an HTTP status.
func writeRPCError(w http.ResponseWriter, status int, id []byte, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mcpwire.ErrorMsg(id, code, msg, nil))
}

// sseWriteTimeout bounds one write of an event: a client that stops
// reading loses its stream instead of stalling the writer.
const sseWriteTimeout = 10 * time.Second

// writeEvent writes one SSE event carrying msg, compacted to one line, and
// flushes it, within sseWriteTimeout. id, when not empty, is the event's
// ID.
func writeEvent(w http.ResponseWriter, id string, msg []byte) error {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	err := sendEvent(w, id, msg)
	_ = rc.SetWriteDeadline(time.Time{})
	return err
}

// sendEvent is writeEvent without a deadline, for a response that carries
// only its own request's answer (a slow client holds up no one else).
func sendEvent(w http.ResponseWriter, id string, msg []byte) error {
	buf, err := mcpwire.AppendEvent(make([]byte, 0, mcpwire.EventSize(id, msg)), id, msg)
	if err != nil {
		return err
	}
	if _, err := w.Write(buf); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

// lastEvent writes the one event of a response that ends with it, without
// flushing: net/http sends it, with the headers, in one write when the
// handler returns (a flush here cost a second write, of the chunked
// body's end, per call).
func lastEvent(w http.ResponseWriter, msg []byte) {
	buf, err := mcpwire.AppendEvent(make([]byte, 0, mcpwire.EventSize("", msg)), "", msg)
	if err == nil {
		_, _ = w.Write(buf)
	}
}

// startSSE sends the headers of an event stream.
func startSSE(w http.ResponseWriter) {
	sseHeaders(w)
	_ = http.NewResponseController(w).Flush()
}

// sseHeaders writes the headers of an event stream (go-sdk's too), to go
// out with the first event.
func sseHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
}

// errEnded is returned by a request's session after its request ended.
var errEnded = errors.New("the request has ended")

// responder answers one POST. A single request is answered with one
// application/json body, unless something tied to the request (progress,
// a log message, a request to the client) must go out first: then the
// response becomes an SSE stream that carries those messages and, last,
// the answer. A batch's answers are collected into one JSON array, or
// sent as events once the response is a stream.
type responder struct {
	w     http.ResponseWriter
	batch bool

	mu      sync.Mutex
	sse     bool
	done    bool     // answered: nothing more may be written
	pending [][]byte // a batch's answers (JSON mode)
	left    int      // answers still due
	err     error    // of the first failed write
}

func newResponder(w http.ResponseWriter, batch bool, requests int) *responder {
	return &responder{w: w, batch: batch, left: requests}
}

// event sends a message tied to the request, switching to SSE.
func (r *responder) event(msg []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return errEnded
	}
	if r.err != nil {
		return r.err
	}
	if !r.sse {
		r.sse = true
		startSSE(r.w)
		for _, p := range r.pending {
			if err := writeEvent(r.w, "", p); err != nil {
				r.err = err
				return err
			}
		}
		r.pending = nil
	}
	if err := writeEvent(r.w, "", msg); err != nil {
		r.err = err
		return err
	}
	return nil
}

// reply sends one answer.
func (r *responder) reply(msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.left--
	switch {
	case r.sse:
		if r.err == nil {
			r.err = writeEvent(r.w, "", msg)
		}
	case r.batch:
		r.pending = append(r.pending, msg)
		if r.left > 0 {
			return
		}
		r.w.Header().Set("Content-Type", "application/json")
		r.w.WriteHeader(http.StatusOK)
		_, _ = r.w.Write([]byte("[" + string(bytes.Join(r.pending, []byte(","))) + "]"))
		r.pending = nil
	default:
		r.w.Header().Set("Content-Type", "application/json")
		r.w.WriteHeader(http.StatusOK)
		_, _ = r.w.Write(msg)
	}
	if r.left <= 0 {
		r.done = true
	}
}

// finish ends the response: later events fail.
func (r *responder) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
}

// acceptsStreamable reports whether an Accept header allows both JSON and
// SSE answers, as Streamable HTTP requires of a POST.
func acceptsStreamable(values []string) (jsonOK, sseOK bool) {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				sseOK = true
			case "*/*":
				jsonOK, sseOK = true, true
			}
		}
	}
	return jsonOK, sseOK
}
