package extmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buger/jsonparser"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// rawPrefix starts the IDs of the requests ext-mcp sends itself, and the
// progress tokens it hands servers, so its reader can tell them from
// go-sdk's (which numbers its requests).
const rawPrefix = "ah-"

// stdioConn is the connection to a stdio server: newline-delimited
// JSON-RPC on the process's pipes. go-sdk's client session speaks through
// it (Read and Write) for the handshake, lists and everything else, while
// ext-mcp sends its own requests on the same pipes ([stdioConn.call]) —
// tools/call, prompts/get, resources/read, tasks/* — and takes their
// answers back as raw bytes, never decoded into Go values and re-encoded:
// the hot path of a tool call is one envelope decode here.
//
// One reader goroutine reads the server's stdout for the connection's
// life; [stdioConn.wait] joins it. It is safe for concurrent use.
type stdioConn struct {
	r      *msgReader
	w      io.Writer
	server string // for errors and logs
	log    *slog.Logger

	wmu sync.Mutex // one line at a time

	in     chan jsonrpc.Message // for go-sdk's Read
	done   chan struct{}        // closed when the reader ends
	closed chan struct{}        // closed by Close
	once   sync.Once
	err    error // why the reader ended (set before done closes)

	next  atomic.Int64
	mu    sync.Mutex
	calls map[string]*rawWaiter

	// envelope is the stateless revision's _meta envelope (revision,
	// client info, capabilities) of go-sdk's last request, which its
	// handshake sent (server/discover); nil when that request had none
	// (an older revision's). ext-mcp's own requests carry it too, as
	// SEP-2575 has every request of the revision do.
	envelope atomic.Pointer[json.RawMessage]
}

// rawWaiter is one raw request waiting for its answer.
type rawWaiter struct {
	reply chan rawReply
	sess  ext.Session // progress of the request goes here
}

type rawReply struct {
	result json.RawMessage
	err    error // a *jsonrpc.Error, or a *tooLargeError
}

var _ mcp.Connection = (*stdioConn)(nil)

// newStdioConn reads server's messages from r, each of at most limit
// bytes (see limits.go), and writes to w.
func newStdioConn(r io.Reader, w io.Writer, server string, limit int64, log *slog.Logger) *stdioConn {
	c := &stdioConn{
		r: newMsgReader(r, limit), w: w, server: server, log: log,
		in: make(chan jsonrpc.Message, 16), done: make(chan struct{}), closed: make(chan struct{}),
		calls: map[string]*rawWaiter{},
	}
	go c.read()
	return c
}

// stdioTransport hands go-sdk the already open connection.
type stdioTransport struct{ c *stdioConn }

func (t stdioTransport) Connect(context.Context) (mcp.Connection, error) { return t.c, nil }

// read reads the server's messages until EOF or a broken line.
func (c *stdioConn) read() {
	defer close(c.done)
	var err error
	for {
		line, big, rerr := c.r.next()
		switch {
		case rerr != nil:
			err = rerr
		case big != nil:
			err = c.tooLarge(big)
		case len(bytes.TrimSpace(line)) > 0:
			err = c.dispatch(line)
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		err = io.EOF
	}
	c.err = err
	// Fail every raw request still waiting.
	c.mu.Lock()
	for id, w := range c.calls {
		close(w.reply)
		delete(c.calls, id)
	}
	c.mu.Unlock()
}

// envelope is the top level of a JSON-RPC message, its parts raw.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

// dispatch routes one message: answers and progress of ext-mcp's own
// requests to their waiters, everything else to go-sdk. The top level is
// scanned in place (mcpwire.ObjectFields: nothing decoded below it),
// which is all the hot path of a call costs here; what the scanner does
// not take (not an object, an escaped key) is decoded by encoding/json.
func (c *stdioConn) dispatch(line []byte) error {
	var id, method, params, result, werr []byte
	if !mcpwire.ObjectFields(line, func(k, v []byte) bool {
		switch string(k) {
		case "id":
			id = v
		case "method":
			method = v
		case "params":
			params = v
		case "result":
			result = v
		case "error":
			werr = v
		}
		return true
	}) {
		var env struct {
			ID     json.RawMessage `json:"id"`
			Method json.RawMessage `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &env); err != nil {
			return newNotMCPError(line, err)
		}
		id, method, params, result, werr = env.ID, env.Method, env.Params, env.Result, env.Error
	}
	switch {
	case method == nil && rawID(id) != nil:
		c.mu.Lock()
		w := c.calls[string(rawID(id))]
		delete(c.calls, string(rawID(id)))
		c.mu.Unlock()
		if w == nil {
			return nil
		}
		r := rawReply{result: result}
		if werr != nil {
			we := &jsonrpc.Error{}
			if err := json.Unmarshal(werr, we); err != nil {
				we = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server answered with a malformed error"}
			}
			r.err = we
		} else if result == nil {
			r.err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the server answered without a result"}
		}
		w.reply <- r
		return nil
	case id == nil && string(method) == `"`+mcpwire.MethodProgress+`"`:
		var tok []byte
		mcpwire.ObjectFields(params, func(k, v []byte) bool {
			if string(k) == "progressToken" {
				tok = v
			}
			return true
		})
		if rawID(tok) != nil {
			c.mu.Lock()
			w := c.calls[string(rawID(tok))]
			c.mu.Unlock()
			if w != nil && w.sess != nil {
				// Notify must not block the reader for long: sessions
				// queue or write at once.
				_ = w.sess.Notify(context.Background(), ext.MethodProgress, params)
			}
			return nil
		}
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return newNotMCPError(line, fmt.Errorf("a malformed JSON-RPC message: %w", err))
	}
	select {
	case c.in <- msg:
	case <-c.closed:
	}
	return nil
}

// tooLarge handles a message over the limit, which was not kept: the
// request it answers fails with a [tooLargeError] (ext-mcp's own through
// its waiter, go-sdk's through an error answer in its place), a request of
// the server's is refused, and anything else is dropped. The connection
// goes on, unless the message had no end in sight.
func (c *stdioConn) tooLarge(o *oversized) error {
	tle := &tooLargeError{server: c.server, limit: c.r.limit, size: o.size, atLeast: o.endless}
	id, idType, method := o.envelopeOf()
	switch {
	case method == nil && idType == jsonparser.String && bytes.HasPrefix(id, []byte(rawPrefix)):
		c.mu.Lock()
		w := c.calls[string(id)]
		delete(c.calls, string(id))
		c.mu.Unlock()
		if w != nil {
			w.reply <- rawReply{err: tle}
		}
	case method == nil && id != nil:
		if msg, err := jsonrpc.DecodeMessage(errorAnswer(id, idType, jsonrpc.CodeInternalError, tle.Error())); err == nil {
			select {
			case c.in <- msg:
			case <-c.closed:
			}
		}
	case id != nil:
		_ = c.writeLine(errorAnswer(id, idType, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("the request is over this client's limit of %s", formatBytes(c.r.limit))))
	default:
		c.log.Warn("an MCP server sent a message over the limit; dropped", "server", c.server,
			"bytes", o.size, "limit", c.r.limit)
	}
	if o.endless {
		return fmt.Errorf("MCP server %q wrote a message of more than %s without end (the limit is %s, maxResultBytes); the connection is closed",
			c.server, formatBytes(o.size), formatBytes(c.r.limit))
	}
	return nil
}

// errorAnswer is a JSON-RPC error response to id, as envelopeOf found it:
// a string id is its raw JSON content (escapes as the server wrote them),
// so it goes back between quotes as it is.
func errorAnswer(id []byte, idType jsonparser.ValueType, code int64, message string) []byte {
	if idType == jsonparser.String {
		id = append(append(append(make([]byte, 0, len(id)+2), '"'), id...), '"')
	}
	return mcpwire.ErrorMsg(id, int(code), message, nil)
}

// rawID returns the content of v, a JSON string, when it is one of
// ext-mcp's own request ids or progress tokens (rawPrefix), else nil.
func rawID(v []byte) []byte {
	if len(v) < 2+len(rawPrefix) || v[0] != '"' || v[len(v)-1] != '"' || !bytes.HasPrefix(v[1:], []byte(rawPrefix)) {
		return nil
	}
	return v[1 : len(v)-1]
}

// Read implements [mcp.Connection] for go-sdk.
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case m := <-c.in:
		return m, nil
	default:
	}
	select {
	case m := <-c.in:
		return m, nil
	case <-c.done:
		select {
		case m := <-c.in:
			return m, nil
		default:
		}
		if c.err != nil && !errors.Is(c.err, io.EOF) {
			return nil, c.err
		}
		return nil, io.EOF
	case <-c.closed:
		return nil, mcp.ErrConnectionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Write implements [mcp.Connection] for go-sdk.
func (c *stdioConn) Write(_ context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		if env := mcpwire.Envelope(req.Params); env != nil {
			c.envelope.Store(&env)
		} else if c.envelope.Load() != nil {
			c.envelope.Store(nil)
		}
	}
	return c.writeLine(b)
}

func (c *stdioConn) writeLine(b []byte) error {
	// One write per message: the line and its newline together.
	return c.writeEnded(append(append(make([]byte, 0, len(b)+1), b...), '\n'))
}

// writeEnded writes one message that already ends with its newline.
func (c *stdioConn) writeEnded(line []byte) error {
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(line); err != nil {
		return fmt.Errorf("writing to the server: %w", err)
	}
	return nil
}

// Close implements [mcp.Connection]: it stops handing messages to go-sdk.
// The process and its pipes belong to the host's service handle; the
// reader ends when that is released.
func (c *stdioConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// SessionID implements [mcp.Connection]: stdio has no session ID.
func (c *stdioConn) SessionID() string { return "" }

// wait blocks until the reader has ended.
func (c *stdioConn) wait() { <-c.done }

// cancelTimeout bounds sending a cancellation.
const cancelTimeout = 5 * time.Second

// errClosedConn is returned by requests on an ended connection.
var errClosedConn = fmt.Errorf("the connection to the server has ended: %w", mcp.ErrConnectionClosed)

// call sends one request of ext-mcp's own and returns the raw result.
// withProgress asks the server for progress, which goes to sess. When ctx
// ends first, the server is told to cancel (notifications/cancelled).
func (c *stdioConn) call(ctx context.Context, method string, params func(token string) ([]byte, error), sess ext.Session) (json.RawMessage, error) {
	id := rawPrefix + strconv.FormatInt(c.next.Add(1), 10)
	p, err := params(id)
	if err != nil {
		return nil, err
	}
	if env := c.envelope.Load(); env != nil {
		if p, err = mcpwire.WithEnvelope(p, *env); err != nil {
			return nil, fmt.Errorf("%s params: %w", method, err)
		}
	}
	w := &rawWaiter{reply: make(chan rawReply, 1), sess: sess}
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return nil, errClosedConn
	default:
	}
	c.calls[id] = w
	c.mu.Unlock()
	msg := append(mcpwire.RequestMsg(id, method, p), '\n')
	if err := c.writeEnded(msg); err != nil {
		c.forget(id)
		return nil, err
	}
	select {
	case r, ok := <-w.reply:
		if !ok {
			return nil, errClosedConn
		}
		if r.err != nil {
			return nil, r.err
		}
		return r.result, nil
	case <-ctx.Done():
		c.forget(id)
		_ = c.notify(mcpwire.MethodCancelled, mcpwire.CancelledParams(id, context.Cause(ctx).Error()))
		return nil, ctx.Err()
	}
}

func (c *stdioConn) forget(id string) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// notify sends a notification of ext-mcp's own.
func (c *stdioConn) notify(method string, params json.RawMessage) error {
	return c.writeLine(mcpwire.NotificationMsg(method, params))
}
