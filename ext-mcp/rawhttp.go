package extmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// httpRaw sends ext-mcp's own requests to a Streamable HTTP server beside
// go-sdk's session (which keeps the handshake, lists and the standalone
// stream): each request is one POST in that session (its Mcp-Session-Id and
// protocol version), answered with JSON or an SSE stream. On that stream
// the server's progress and log messages for the request, and its requests
// to the client (sampling, elicitation, roots), belong to this request
// alone: they go to its session, and answers are POSTed back. A stream that
// ends before the answer (the connection broke, or the server closed it
// with a retry field) is resumed with a GET and Last-Event-ID (resume).
// Results stay raw. It is safe for concurrent use.
type httpRaw struct {
	url      string
	server   string // for errors
	limit    int64  // bounds each message from the server (limits.go)
	hc       *http.Client
	session  string // Mcp-Session-Id, "" when the server issued none
	protocol string
	next     atomic.Int64
	// lost is called when the server says the session is gone (404).
	lost func()
	// auth, when set, is the connection's OAuth handler, as go-sdk's
	// transport uses it: its token on every request, and on a 401 (or
	// 403) one renewal and one more try.
	auth auth.OAuthHandler
	wg   sync.WaitGroup // answers being POSTed back
}

func (h *httpRaw) post(ctx context.Context, body []byte) (*http.Response, error) {
	return h.send(ctx, http.MethodPost, body, nil)
}

// send sends one request in the session: a POST of body, or a GET that
// resumes a stream after the event lastID.
func (h *httpRaw) send(ctx context.Context, method string, body, lastID []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, h.url, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
		} else {
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Last-Event-ID", string(lastID))
		}
		if h.session != "" {
			req.Header.Set("Mcp-Session-Id", h.session)
		}
		if h.protocol != "" {
			req.Header.Set("Mcp-Protocol-Version", h.protocol)
		}
		if h.auth != nil {
			ts, err := h.auth.TokenSource(ctx)
			if err != nil {
				return nil, err
			}
			if ts != nil {
				tok, err := ts.Token()
				if err != nil {
					return nil, err
				}
				req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
			}
		}
		resp, err := h.hc.Do(req)
		if err != nil || h.auth == nil || attempt > 0 ||
			(resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
			return resp, err
		}
		if err := h.auth.Authorize(ctx, req, resp); err != nil {
			return nil, err
		}
	}
}

// call sends one request and returns its raw result.
func (h *httpRaw) call(ctx context.Context, method string, params func(token string) ([]byte, error), sess ext.Session) (json.RawMessage, error) {
	id := rawPrefix + strconv.FormatInt(h.next.Add(1), 10)
	p, err := params(id)
	if err != nil {
		return nil, err
	}
	body := mcpwire.RequestMsg(id, method, p)
	resp, err := h.post(ctx, body)
	if err != nil {
		if ctx.Err() != nil {
			h.cancel(id, ctx)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sending %s: %w", method, err)
	}
	defer resp.Body.Close()
	if err := h.status(resp); err != nil {
		return nil, fmt.Errorf("sending %s: %w", method, err)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var (
		result json.RawMessage
		rerr   error
	)
	if ct == "text/event-stream" {
		result, rerr = h.stream(ctx, id, resp.Body, sess)
	} else {
		// hc's transport bounds the body and measures what is over
		// (capBodies); the limit here is a backstop.
		b, err := io.ReadAll(io.LimitReader(resp.Body, h.limit+1))
		switch {
		case err != nil:
			rerr = err
		case int64(len(b)) > h.limit:
			rerr = &tooLargeError{server: h.server, limit: h.limit}
		default:
			result, rerr = answer(b)
		}
	}
	if rerr != nil && ctx.Err() != nil {
		h.cancel(id, ctx)
		return nil, ctx.Err()
	}
	return result, rerr
}

// status turns an HTTP failure into an error; a 404 means the server
// forgot the session.
func (h *httpRaw) status(resp *http.Response) error {
	switch {
	case resp.StatusCode == http.StatusNotFound && h.session != "":
		if h.lost != nil {
			h.lost()
		}
		return fmt.Errorf("the server ended the session (404); it will be reconnected")
	case resp.StatusCode/100 != 2:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// answer decodes a JSON-RPC response to its result or error.
func answer(b []byte) (json.RawMessage, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("the server answered something that is not JSON-RPC: %w", err)
	}
	if env.Error != nil {
		return nil, env.Error
	}
	if env.Result == nil {
		return nil, fmt.Errorf("the server answered without a result")
	}
	return env.Result, nil
}

// stream reads an SSE response until the answer to id. When the stream
// ends before the answer, it is resumed (resume).
func (h *httpRaw) stream(ctx context.Context, id string, body io.Reader, sess ext.Session) (json.RawMessage, error) {
	var cur sseCursor
	res, done, err := h.read(ctx, id, body, sess, &cur)
	if done {
		return res, err
	}
	return h.resume(ctx, id, sess, &cur, err)
}

// sseCursor is where a request's stream stands, as the SSE standard keeps
// it: the id of the last event dispatched, and the reconnection time the
// server asked for.
type sseCursor struct {
	id     []byte        // the last id field read: the event's, once it is dispatched
	lastID []byte        // the last event ID: what a resumption sends
	retry  time.Duration // 0 when the server gave none
}

// read reads one SSE response: done with the answer to id or a failure
// that ends the request; not done when the stream ended first (err says
// how: io.EOF, or the connection's error).
func (h *httpRaw) read(ctx context.Context, id string, body io.Reader, sess ext.Session, cur *sseCursor) (res json.RawMessage, done bool, err error) {
	r := newMsgReader(body, h.limit)
	var data []byte
	for {
		line, big, err := r.next()
		switch {
		case err != nil:
			return nil, false, err
		case big != nil:
			// The request fails; its stream is abandoned (the caller
			// closes the body), the session goes on.
			return nil, true, &tooLargeError{server: h.server, limit: h.limit, size: big.size, atLeast: big.endless}
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			// Dispatch: the event's id is the last event ID, even when
			// it carries no data (a priming event).
			cur.lastID = cur.id
			if len(data) == 0 {
				continue
			}
			msg := data
			data = nil
			res, done, err := h.event(ctx, id, msg, sess)
			if done {
				return res, true, err
			}
			continue
		}
		switch name, v, colon := mcpwire.EventField(line); {
		case name == "data" && colon:
			if int64(len(data)+len(v)) > h.limit {
				return nil, true, &tooLargeError{server: h.server, limit: h.limit, size: int64(len(data) + len(v)), atLeast: true}
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		case name == "id":
			// The line is the reader's copy: keeping a slice of it is safe.
			if bytes.IndexByte(v, 0) < 0 {
				cur.id = v
			}
		case name == "retry" && colon:
			if ms, ok := sseDigits(v); ok {
				cur.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// sseDigits parses a retry field: ASCII digits only, as the SSE standard
// says, bounded (resumeMaxDelay bounds the wait anyway).
func sseDigits(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int64(c-'0'), int64(resumeMaxDelay/time.Millisecond))
	}
	return n, true
}

// Resuming a request's stream, as go-sdk's client does (its MaxRetries,
// its backoff): MCP 2025-03-26 to 2025-11-25 let a server end a POST's
// event stream before the answer (a dropped connection, or on purpose
// with a retry field, 2025-11-25) and the client GET it again with
// Last-Event-ID; 2026-07-28 removed this (SEP-2575), and its stateless
// requests go through go-sdk anyway.
const (
	// resumeTries bounds the resumptions in a row that bring no new event.
	resumeTries = 5
	// resumeDelay is the first wait when the server gave no retry field;
	// each failed try waits resumeGrow times more, up to resumeMaxDelay,
	// plus a random part as long (full jitter).
	resumeDelay    = time.Second
	resumeGrow     = 1.5
	resumeMaxDelay = 30 * time.Second
)

// resume GETs the stream of request id again from the last event, after
// the server's retry time, until the answer, the call's end, or
// resumeTries tries in a row that bring no new event. ended is how the
// stream ended.
func (h *httpRaw) resume(ctx context.Context, id string, sess ext.Session, cur *sseCursor, ended error) (json.RawMessage, error) {
	prev := string(cur.lastID)
	tries := 0
	wait := cur.wait(1)
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var big *tooLargeError
		switch {
		case errors.As(ended, &big):
			return nil, ended
		case len(cur.lastID) == 0:
			// Nothing to resume from.
			if errors.Is(ended, io.EOF) {
				return nil, fmt.Errorf("the server ended the stream before answering (it gave no event id to resume it from)")
			}
			return nil, fmt.Errorf("the stream broke before the answer (the server gave no event id to resume it from): %w", ended)
		case tries == resumeTries:
			return nil, fmt.Errorf("the server ended the stream before answering, and %d resumptions from event %q brought nothing new: %w", resumeTries, clip(prev, 64), ended)
		}
		tries++
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		resp, err := h.send(ctx, http.MethodGet, nil, cur.lastID)
		if err != nil {
			ended, wait = fmt.Errorf("resuming the stream: %w", err), cur.backoff(tries+1)
			continue
		}
		switch resp.StatusCode {
		case http.StatusConflict, // the server still holds the stream for the broken request
			http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			_ = resp.Body.Close()
			ended, wait = fmt.Errorf("resuming the stream: %s", resp.Status), cur.backoff(tries+1)
			continue
		}
		if err := h.status(resp); err != nil {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("resuming the stream from event %q: %w", clip(string(cur.lastID), 64), err)
		}
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("resuming the stream from event %q: the server answered %q, not an event stream", clip(string(cur.lastID), 64), clip(ct, 64))
		}
		res, done, err := h.read(ctx, id, resp.Body, sess, cur)
		_ = resp.Body.Close()
		if done {
			return res, err
		}
		ended = err
		if string(cur.lastID) != prev {
			prev, tries = string(cur.lastID), 0
		}
		wait = cur.wait(tries + 1)
	}
}

// wait is how long to wait after a stream ended, before the nth try in
// a row: the server's retry, else the backoff.
func (c *sseCursor) wait(n int) time.Duration {
	if c.retry > 0 {
		return min(c.retry, resumeMaxDelay)
	}
	return c.backoff(n)
}

// backoff is how long to wait after a failed try, before the nth: it grows
// from resumeDelay, with jitter, and is at least the server's retry.
func (c *sseCursor) backoff(n int) time.Duration {
	d := min(time.Duration(float64(resumeDelay)*math.Pow(resumeGrow, float64(n-1))), resumeMaxDelay)
	return max(d+rand.N(d), min(c.retry, resumeMaxDelay))
}

// event handles one message on a request's stream; done when it is the
// answer.
func (h *httpRaw) event(ctx context.Context, id string, msg []byte, sess ext.Session) (json.RawMessage, bool, error) {
	var env envelope
	if err := json.Unmarshal(msg, &env); err != nil {
		return nil, true, fmt.Errorf("the server sent an event that is not JSON-RPC: %w", err)
	}
	switch {
	case env.Method == "":
		var got string
		if json.Unmarshal(env.ID, &got) != nil || got != id {
			return nil, false, nil // not ours
		}
		if env.Error != nil {
			return nil, true, env.Error
		}
		return env.Result, true, nil
	case len(env.ID) == 0:
		// A notification tied to the request: progress or a log message.
		switch env.Method {
		case ext.MethodProgress, ext.MethodLogMessage:
			_ = sess.Notify(ctx, env.Method, env.Params)
		}
		return nil, false, nil
	}
	// A request to the client, tied to ours: ask the session and POST the
	// answer back.
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		res, err := sess.Request(ctx, env.Method, env.Params)
		b, merr := responseFor(env.ID, res, err)
		if merr != nil {
			return
		}
		resp, err := h.post(context.WithoutCancel(ctx), b)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
			_ = resp.Body.Close()
		}
	}()
	return nil, false, nil
}

// responseFor builds the JSON-RPC response to a server's request.
func responseFor(id json.RawMessage, res json.RawMessage, err error) ([]byte, error) {
	type response struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result,omitempty"`
		Error   *jsonrpc.Error  `json:"error,omitempty"`
	}
	r := response{JSONRPC: "2.0", ID: id, Result: res}
	if err != nil {
		r.Result = nil
		r.Error = toWireError(err)
	}
	return json.Marshal(r)
}

// toWireError turns a session's refusal into a JSON-RPC error for the
// server: the client's own error whole, else an internal error naming why.
func toWireError(err error) *jsonrpc.Error {
	var re *ext.RPCError
	if errors.As(err, &re) {
		return &jsonrpc.Error{Code: re.Code, Message: re.Message, Data: re.Data}
	}
	if errors.Is(err, ext.ErrUnimplemented) {
		return &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: err.Error()}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// cancel tells the server, in the background, that the request id was
// given up.
func (h *httpRaw) cancel(id string, ctx context.Context) {
	b := mcpwire.NotificationMsg(mcpwire.MethodCancelled, mcpwire.CancelledParams(id, context.Cause(ctx).Error()))
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		defer stop()
		if resp, err := h.post(cctx, b); err == nil {
			_ = resp.Body.Close()
		}
	}()
}

// notify sends a notification of ext-mcp's own.
func (h *httpRaw) notify(ctx context.Context, method string, params json.RawMessage) error {
	m := map[string]any{"jsonrpc": "2.0", "method": method}
	if len(params) > 0 {
		m["params"] = params
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	resp, err := h.post(ctx, b)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return h.status(resp)
}

// close waits for answers and cancellations still being sent.
func (h *httpRaw) close() { h.wg.Wait() }
