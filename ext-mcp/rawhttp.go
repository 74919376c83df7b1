package extmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/agenthost/agenthost/ext"
)

// httpRaw sends ext-mcp's own requests to a Streamable HTTP server beside
// go-sdk's session (which keeps the handshake, lists and the standalone
// stream): each request is one POST in that session (its Mcp-Session-Id and
// protocol version), answered with JSON or an SSE stream. On that stream
// the server's progress and log messages for the request, and its requests
// to the client (sampling, elicitation, roots), belong to this request
// alone: they go to its session, and answers are POSTed back. Results stay
// raw. It is safe for concurrent use.
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
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
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
	body := make([]byte, 0, 64+len(method)+len(p))
	body = append(body, `{"jsonrpc":"2.0","id":"`...)
	body = append(body, id...)
	body = append(body, `","method":`...)
	body = strconv.AppendQuote(body, method)
	if len(p) > 0 {
		body = append(body, `,"params":`...)
		body = append(body, p...)
	}
	body = append(body, '}')
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

// stream reads an SSE response until the answer to id.
func (h *httpRaw) stream(ctx context.Context, id string, body io.Reader, sess ext.Session) (json.RawMessage, error) {
	r := newMsgReader(body, h.limit)
	var data []byte
	for {
		line, big, err := r.next()
		switch {
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("the server ended the stream before answering")
		case err != nil:
			return nil, err
		case big != nil:
			// The request fails; its stream is abandoned (the caller
			// closes the body), the session goes on.
			return nil, &tooLargeError{server: h.server, limit: h.limit, size: big.size, atLeast: big.endless}
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if len(data) == 0 {
				continue
			}
			msg := data
			data = nil
			res, done, err := h.event(ctx, id, msg, sess)
			if done {
				return res, err
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if int64(len(data)+len(v)) > h.limit {
				return nil, &tooLargeError{server: h.server, limit: h.limit, size: int64(len(data) + len(v)), atLeast: true}
			}
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
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
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": methodCancelled,
		"params": map[string]string{"requestId": id, "reason": context.Cause(ctx).Error()}})
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
