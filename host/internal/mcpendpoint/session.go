package mcpendpoint

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// session is one stateful MCP session (2025-03-26 to 2025-11-25). It
// holds no goroutine: requests run on their POST's goroutine, the
// standalone stream on its GET's, and the sweeper closes it when idle. It
// is also the [ext.Session] the host reaches the session's client through
// outside any request (Host.AttachSession).
type session struct {
	e       *Endpoint
	u       *userState // the session holds one reference to it
	p       Principal
	id      string // the Mcp-Session-Id, from crypto/rand
	conv    string // the conversation the host records for calls
	version string
	caps    json.RawMessage // the client's capabilities, raw

	touch, detach func() // the host's registration; set before the session is admitted

	busy     atomic.Int32  // requests in flight
	events   atomic.Uint64 // the last event ID of its standalone streams
	lastUsed atomic.Int64  // unix nanoseconds of the last request's start or end

	mu       sync.Mutex
	closed   bool
	level    int                           // minimum log level (index in logLevels); -1: none set
	subs     map[string]subState           // resources subscribed, by URI
	inflight map[string]context.CancelFunc // by request ID
	pending  map[string]chan *rpcMsg       // our requests to the client, by ID
	nextID   uint64
	stream   *stream     // the standalone SSE stream (GET), if open
	expiry   *time.Timer // closes the session when its token expires; nil: never

	// Guarded by u.mu.
	found map[string]bool // originals of the deferred tools it found
	view  []*entry        // its tool list when it found any (else the user's)
}

// subState is where a session's subscription of a resource stands.
type subState uint8

const (
	subOn       subState = iota + 1 // the host holds it
	subChanging                     // a subscribe or unsubscribe of it is at the host
)

// Per-session bounds: what a client can make the endpoint hold.
const (
	maxSubscriptions = 256 // resources subscribed
	maxInflight      = 256 // requests in flight
	maxPending       = 256 // requests to the client awaiting its answer
	maxBatch         = 256 // messages in one JSON-RPC batch (2025-03-26)
)

var logLevels = []string{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

func levelIndex(l string) int { return slices.Index(logLevels, l) }

// errSessionGone is what requests of the host meet on a closed session.
var errSessionGone = fmt.Errorf("the client's session is closed: %w", ext.ErrUnavailable)

// serveSession serves a request on an open session.
func (e *Endpoint) serveSession(w http.ResponseWriter, r *http.Request, p Principal, sid string) {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && !slices.Contains(sessionVersions, v) {
		http.Error(w, "Bad Request: Unsupported protocol version (supported versions: "+
			fmt.Sprint(sessionVersions)+"; "+mcpwire.V20260728+" has no sessions)", http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	s := e.byID[sid]
	e.mu.Unlock()
	if s == nil {
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	if bindingKey(s.p) != bindingKey(p) {
		e.log.Warn("mcp: refused a session to another token", "user", p.User, "tokenID", p.TokenID)
		http.Error(w, "forbidden: the session belongs to another token", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.servePOST(w, r)
	case http.MethodGet:
		s.serveGET(w, r)
	case http.MethodDelete:
		s.close("the client ended it")
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}
}

// checkPOST checks a POST's headers as Streamable HTTP asks.
func checkPOST(w http.ResponseWriter, r *http.Request) bool {
	if ct := r.Header.Get("Content-Type"); baseType(ct) != "application/json" {
		http.Error(w, "Content-Type must be 'application/json'", http.StatusUnsupportedMediaType)
		return false
	}
	if jsonOK, sseOK := acceptsStreamable(r.Header.Values("Accept")); !jsonOK || !sseOK {
		http.Error(w, "Accept must contain both 'application/json' and 'text/event-stream'", http.StatusBadRequest)
		return false
	}
	return true
}

func baseType(ct string) string {
	for i := 0; i < len(ct); i++ {
		if ct[i] == ';' {
			ct = ct[:i]
			break
		}
	}
	for len(ct) > 0 && ct[len(ct)-1] == ' ' {
		ct = ct[:len(ct)-1]
	}
	return ct
}

// begin and end bracket a request: the session is busy in between, and
// its idle clock restarts at both ends.
func (s *session) begin() {
	s.busy.Add(1)
	s.lastUsed.Store(time.Now().UnixNano())
}

func (s *session) end() {
	s.lastUsed.Store(time.Now().UnixNano())
	s.busy.Add(-1)
}

// servePOST reads the messages of a POST and answers them.
func (s *session) servePOST(w http.ResponseWriter, r *http.Request) {
	if !checkPOST(w, r) {
		return
	}
	s.begin()
	defer s.end()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.e.bodyError(w, err)
		return
	}
	in, perr := parseBody(body)
	if in.batch && s.version != mcpwire.V20250326 {
		writeRPCError(w, http.StatusBadRequest, nil, mcpwire.CodeInvalidRequest,
			"JSON-RPC batches are not supported: only protocol revision 2025-03-26 has them")
		return
	}
	if perr != nil {
		writeRPCError(w, http.StatusBadRequest, nil, perr.code, perr.msg)
		return
	}
	// A single message that is no valid request, notification or response
	// is refused whole; in a batch (JSON-RPC 2.0 §6) it gets an error answer
	// of its own and the others go on.
	var calls []*rpcMsg
	var refused [][]byte
	var ids map[string]int // of a batch's requests: the message that has each id
	for i := range in.msgs {
		m := &in.msgs[i]
		why, replyID := in.refusal(i), m.replyID()
		if why == "" && in.batch && m.Method != "" && hasID(m.ID) {
			// A second request with an id is refused under none: two
			// answers with one id would leave the client guessing.
			if ids == nil {
				ids = make(map[string]int, len(in.msgs))
			}
			key := idKey(m.ID)
			if first, ok := ids[key]; ok {
				why, replyID = fmt.Sprintf("message %d of the batch has the same id", first+1), nil
			} else {
				ids[key] = i
			}
		}
		switch {
		case why != "" && !in.batch:
			writeRPCError(w, http.StatusBadRequest, replyID, mcpwire.CodeInvalidRequest, why)
			return
		case why != "":
			refused = append(refused, mcpwire.ErrorMsg(replyID, mcpwire.CodeInvalidRequest,
				fmt.Sprintf("message %d of the batch: %s", i+1, why), nil))
		case m.Method == "":
			s.deliver(m)
		case !hasID(m.ID):
			s.notification(r.Context(), m)
		default:
			calls = append(calls, m)
		}
	}
	if len(calls) == 0 && len(refused) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if len(calls) > 0 {
		s.touch()
	}
	rsp := newResponder(w, in.batch, len(calls)+len(refused))
	defer rsp.finish()
	for _, b := range refused {
		rsp.reply(b)
	}
	if len(calls) == 0 {
		return
	}
	if len(calls) == 1 {
		rsp.reply(s.handle(r.Context(), rsp, calls[0]))
		return
	}
	var wg sync.WaitGroup
	for _, m := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rsp.reply(s.handle(r.Context(), rsp, m))
		}()
	}
	wg.Wait()
}

// refusal says why message i of a session's POST is refused, "" when it
// is not: it is no message, no valid one, or an initialize (which opens a
// session, and never travels in a batch).
func (in *parsedBody) refusal(i int) string {
	if in.batch && in.bad[i] != "" {
		return in.bad[i]
	}
	m := &in.msgs[i]
	if err := m.check(); err != nil {
		return err.Error()
	}
	if m.Method == "initialize" && hasID(m.ID) {
		if in.batch {
			return "initialize must not be part of a JSON-RPC batch"
		}
		return "the session is already initialized"
	}
	return ""
}

// handle answers one request: the result or error message.
func (s *session) handle(ctx context.Context, rsp *responder, m *rpcMsg) []byte {
	ctx, done, terr := s.track(ctx, m.ID)
	if terr != nil {
		return terr.message(m.ID)
	}
	defer done()
	rs := &reqSession{s: s, rsp: rsp}
	defer rs.end()
	res, err := s.dispatch(ctx, rs, m)
	if err != nil {
		var re *rpcError
		if !errors.As(err, &re) {
			s.e.log.Warn("mcp: a request failed", "user", s.p.User, "method", m.Method, "err", err)
			re = &rpcError{code: mcpwire.CodeInternalError, msg: "internal error"}
		}
		return re.message(m.ID)
	}
	return mcpwire.ResultMsg(m.ID, res)
}

// track registers a request in flight, cancellable by the client
// (notifications/cancelled) and by the session's end.
func (s *session) track(ctx context.Context, id json.RawMessage) (context.Context, func(), *rpcError) {
	key := idKey(id)
	ctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		cancel()
		return nil, nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: "the session is closed"}
	case s.inflight[key] != nil:
		s.mu.Unlock()
		cancel()
		return nil, nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: "a request with this id is already in flight"}
	case len(s.inflight) >= maxInflight:
		s.mu.Unlock()
		cancel()
		return nil, nil, &rpcError{code: mcpwire.CodeInvalidRequest, msg: fmt.Sprintf("too many requests in flight on this session (%d)", maxInflight)}
	}
	if s.inflight == nil {
		s.inflight = map[string]context.CancelFunc{}
	}
	s.inflight[key] = cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.inflight, key)
		s.mu.Unlock()
		cancel()
	}, nil
}

// notification handles a client's notification.
func (s *session) notification(ctx context.Context, m *rpcMsg) {
	switch m.Method {
	case "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			return
		}
		s.mu.Lock()
		cancel := s.inflight[idKey(p.RequestID)]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case ext.MethodRootsChanged:
		if err := s.e.host.SessionNotify(ctx, s.p.User, m.Method, m.Params); err != nil {
			s.e.log.Warn("mcp: passing on a client's notification", "user", s.p.User, "method", m.Method, "err", err)
		}
	}
	// notifications/initialized, progress and others need nothing.
}

// deliver hands a client's response to the request of ours it answers.
func (s *session) deliver(m *rpcMsg) {
	key := idKey(m.ID)
	s.mu.Lock()
	ch := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if ch != nil {
		ch <- m // buffered: never blocks
	}
}

// ask sends a request of ours to the client with send and waits for its
// answer.
func (s *session) ask(ctx context.Context, method string, params json.RawMessage, send func([]byte) error) (json.RawMessage, error) {
	need := ext.SessionCapability(method)
	// s.caps, not s.Capabilities(): the request may travel on a POST.
	if need == "" {
		return nil, fmt.Errorf("clients are not asked %q: %w", method, ext.ErrInvalidArgument)
	}
	if !ext.HasCapability(s.caps, need) {
		return nil, fmt.Errorf("the client did not declare %q: %w", need, ext.ErrUnimplemented)
	}
	ch := make(chan *rpcMsg, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSessionGone
	}
	if len(s.pending) >= maxPending {
		s.mu.Unlock()
		return nil, fmt.Errorf("too many requests to the client await its answer (%d): %w", maxPending, ext.ErrUnavailable)
	}
	s.nextID++
	id := "ah-" + strconv.FormatUint(s.nextID, 10)
	if s.pending == nil {
		s.pending = map[string]chan *rpcMsg{}
	}
	key := `"` + id + `"`
	s.pending[key] = ch
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		delete(s.pending, key)
		s.mu.Unlock()
	}
	if err := send(mcpwire.RequestMsg(id, method, params)); err != nil {
		forget()
		return nil, fmt.Errorf("asking the client %s: %v: %w", method, err, ext.ErrUnavailable)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return nil, errSessionGone
		}
		if m.Error != nil {
			var re struct {
				Code    int64           `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(m.Error, &re); err != nil {
				return nil, fmt.Errorf("the client's error answer does not parse: %w", ext.ErrUnavailable)
			}
			return nil, &ext.RPCError{Code: re.Code, Message: re.Message, Data: re.Data}
		}
		return m.Result, nil
	case <-ctx.Done():
		forget()
		// Tell the client to stop; on the same path if it is still open.
		cancel := mcpwire.NotificationMsg("notifications/cancelled", json.RawMessage(`{"requestId":"`+id+`","reason":"the request was cancelled"}`))
		if send(cancel) != nil {
			_ = s.push(cancel)
		}
		return nil, ctx.Err()
	}
}

// Capabilities implements [ext.Session] for the host's requests outside
// any request: the client's declared capabilities while its standalone
// stream is open, none otherwise (such a request could not reach it, so
// the host asks another of the user's sessions).
func (s *session) Capabilities() json.RawMessage {
	if s.u.scope != nil {
		// A scoped session answers no server's request outside its
		// calls: the asker may be a server outside its scope.
		return json.RawMessage("{}")
	}
	s.mu.Lock()
	open := s.stream != nil
	s.mu.Unlock()
	if !open {
		return json.RawMessage("{}")
	}
	return s.caps
}

// Notify implements [ext.Session] for messages outside any request: log
// messages at or above the session's level, updates of resources it
// subscribed to and, when it declared URL elicitation, the completions of
// URL elicitations go to its standalone stream; anything else is dropped.
func (s *session) Notify(_ context.Context, method string, params json.RawMessage) error {
	switch method {
	case ext.MethodLogMessage:
		if s.u.scope != nil || !s.wantsLog(params) {
			// A scoped session hears no log message outside its calls:
			// any server of the user may have sent it.
			return nil
		}
	case ext.MethodResourceUpdated:
		var p struct {
			URI string `json:"uri"`
		}
		if json.Unmarshal(params, &p) != nil {
			return nil
		}
		s.mu.Lock()
		_, ok := s.subs[p.URI]
		s.mu.Unlock()
		if !ok {
			return nil
		}
	case ext.MethodElicitationComplete:
		if s.u.scope != nil || !ext.URLElicitation(s.caps) {
			return nil
		}
	default:
		return fmt.Errorf("notification %q is not sent outside a request: %w", method, ext.ErrInvalidArgument)
	}
	return s.push(mcpwire.NotificationMsg(method, params))
}

// Request implements [ext.Session] outside any request: it asks the
// client on its standalone stream.
func (s *session) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return s.ask(ctx, method, params, s.push)
}

// wantsLog reports whether a log message passes the session's level; none
// passes before the client set one (logging/setLevel).
func (s *session) wantsLog(params json.RawMessage) bool {
	var p struct {
		Level string `json:"level"`
	}
	if json.Unmarshal(params, &p) != nil {
		return false
	}
	s.mu.Lock()
	min := s.level
	s.mu.Unlock()
	l := levelIndex(p.Level)
	return min >= 0 && l >= min
}

// reqSession is the [ext.Session] of one request: what the host sends
// through it travels on the request's own response (which becomes an SSE
// stream), progress under the client's progress token. It is valid until
// the request returns.
type reqSession struct {
	s     *session
	rsp   *responder
	token json.RawMessage // the client's progress token; nil: none
	ended atomic.Bool
}

func (rs *reqSession) end() { rs.ended.Store(true) }

// Capabilities implements [ext.Session].
func (rs *reqSession) Capabilities() json.RawMessage { return rs.s.caps }

// Notify implements [ext.Session].
func (rs *reqSession) Notify(_ context.Context, method string, params json.RawMessage) error {
	if rs.ended.Load() {
		return fmt.Errorf("%w: %w", errEnded, ext.ErrUnavailable)
	}
	switch method {
	case ext.MethodProgress:
		if rs.token == nil {
			return nil // the client asked for no progress
		}
		p := map[string]json.RawMessage{}
		if len(params) > 0 {
			if err := json.Unmarshal(params, &p); err != nil {
				return fmt.Errorf("progress params: %w", ext.Mark(err, ext.ErrInvalidArgument))
			}
		}
		p["progressToken"] = rs.token
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("encoding progress: %w", err)
		}
		params = b
	case ext.MethodLogMessage:
		if !rs.s.wantsLog(params) {
			return nil
		}
	default:
		return fmt.Errorf("notification %q is not sent in a request: %w", method, ext.ErrInvalidArgument)
	}
	if err := rs.rsp.event(mcpwire.NotificationMsg(method, params)); err != nil {
		return fmt.Errorf("sending %s: %v: %w", method, err, ext.ErrUnavailable)
	}
	return nil
}

// Request implements [ext.Session]: the request to the client travels on
// the request's response; the client POSTs its answer.
func (rs *reqSession) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if rs.ended.Load() {
		return nil, fmt.Errorf("%w: %w", errEnded, ext.ErrUnavailable)
	}
	return rs.s.ask(ctx, method, params, rs.rsp.event)
}

var (
	_ ext.Session = (*session)(nil)
	_ ext.Session = (*reqSession)(nil)
)

// stream is a session's standalone SSE stream (a hanging GET). Messages
// are queued to the GET's goroutine, so a sender never waits on a slow
// client: when the queue is full the stream ends (the client reconnects).
type stream struct {
	ch   chan []byte
	done chan struct{}
	once sync.Once
}

const streamQueue = 64

func (st *stream) stop() { st.once.Do(func() { close(st.done) }) }

var errNoStream = errors.New("the client has no stream open")

// push sends a message on the session's standalone stream.
func (s *session) push(msg []byte) error {
	s.mu.Lock()
	st := s.stream
	s.mu.Unlock()
	if st == nil {
		return errNoStream
	}
	select {
	case st.ch <- msg:
		return nil
	case <-st.done:
		return errNoStream
	default:
		st.stop()
		return errors.New("the client's stream is not read: closed it")
	}
}

// serveGET serves the standalone stream until the client leaves or the
// session ends. A new GET replaces an open one. Its events carry IDs,
// unique in the session, so that a client counts a reconnect after some
// as progress (go-sdk fails a session whose stream ends MaxRetries times
// without); they are not replayed, so Last-Event-ID is not looked at.
func (s *session) serveGET(w http.ResponseWriter, r *http.Request) {
	if _, sseOK := acceptsStreamable(r.Header.Values("Accept")); !sseOK {
		http.Error(w, "Accept must contain 'text/event-stream' for GET requests", http.StatusBadRequest)
		return
	}
	st := &stream{ch: make(chan []byte, streamQueue), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "session not found", http.StatusNotFound)
		return
	}
	old := s.stream
	s.stream = st
	s.mu.Unlock()
	if old != nil {
		old.stop()
	}
	defer func() {
		s.mu.Lock()
		if s.stream == st {
			s.stream = nil
		}
		s.mu.Unlock()
		st.stop()
	}()
	startSSE(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-st.done:
			return
		case msg := <-st.ch:
			id := strconv.FormatUint(s.events.Add(1), 10)
			if err := writeEvent(w, id, msg); err != nil {
				return
			}
		}
	}
}

// close ends the session (once): it leaves the tables at once (further
// requests get 404), cancels its requests in flight and its requests to
// the client, ends its stream and detaches it from the host; its resource
// subscriptions are dropped in the background. [Endpoint.Close] waits for
// every close under way: the one that marks the session closed joins
// e.wg before anyone else can see it closed (Close's own close of it
// included), and a victim of admit joined it there.
func (s *session) close(why string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.e.wg.Add(1) // done at the end, or by the cleanup goroutine
	if s.expiry != nil {
		s.expiry.Stop()
	}
	inflight, pending, st, subs := s.inflight, s.pending, s.stream, s.subs
	s.inflight, s.pending, s.stream, s.subs = nil, nil, nil, nil
	s.mu.Unlock()
	for _, cancel := range inflight {
		cancel()
	}
	for _, ch := range pending {
		close(ch)
	}
	if st != nil {
		st.stop()
	}
	e := s.e
	e.mu.Lock()
	if e.byID[s.id] == s {
		delete(e.byID, s.id)
		e.open.Add(-1)
	}
	delete(s.u.sessions, s)
	e.mu.Unlock()
	s.detach()
	e.log.Debug("mcp: session closed", "user", s.p.User, "why", why)
	// A subscription being changed is left to the request changing it.
	var drop []string
	for uri, state := range subs {
		if state == subOn {
			drop = append(drop, uri)
		}
	}
	if len(drop) > 0 {
		go func() {
			defer e.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, uri := range drop {
				if err := e.host.SubscribeResource(ctx, s.p.User, uri, true); err != nil {
					e.log.Warn("mcp: unsubscribing a closed session", "user", s.p.User, "err", err)
				}
			}
			e.release(s.u)
		}()
		return
	}
	e.release(s.u)
	e.wg.Done()
}

// initialize opens a session: it negotiates the revision, admits the
// session under the caps and answers with the server's capabilities and
// instructions.
func (e *Endpoint) initialize(w http.ResponseWriter, r *http.Request, p Principal, body []byte) {
	if !checkPOST(w, r) {
		return
	}
	var m rpcMsg
	if err := json.Unmarshal(body, &m); err != nil || m.check() != nil || !hasID(m.ID) {
		writeRPCError(w, http.StatusBadRequest, nil, mcpwire.CodeInvalidRequest, "initialize must be a single JSON-RPC request")
		return
	}
	var params struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(m.Params, &params); err != nil {
		writeRPCError(w, http.StatusBadRequest, m.ID, mcpwire.CodeInvalidParams, "initialize params: "+err.Error())
		return
	}
	version := params.ProtocolVersion
	if !slices.Contains(sessionVersions, version) {
		// The spec's answer to an unknown version: the newest we speak; the
		// client disconnects if it cannot.
		version = sessionVersions[0]
	}
	caps := params.Capabilities
	if len(caps) == 0 || string(caps) == "null" || !json.Valid(caps) {
		caps = json.RawMessage("{}")
	}
	u, err := e.acquire(r.Context(), p.User, p.Scope)
	if err != nil {
		if errors.Is(err, errClosed) {
			http.Error(w, "the MCP endpoint is shutting down", http.StatusServiceUnavailable)
			return
		}
		e.log.Error("mcp: loading a user's tools", "user", p.User, "err", err)
		writeRPCError(w, http.StatusServiceUnavailable, m.ID, mcpwire.CodeInternalError, "could not load your tools: try again later")
		return
	}
	s := &session{e: e, u: u, p: p, id: rand.Text(), version: version, caps: caps, level: -1}
	s.conv = "mcp:" + s.id
	s.lastUsed.Store(time.Now().UnixNano())
	// Attached before it is admitted: whoever closes it once admitted
	// (CloseToken, Close, the sweeper, a newer session) finds its detach.
	s.touch, s.detach = e.host.AttachSession(p.User, s)
	victim, status, msg := e.admit(s)
	if status != 0 {
		s.detach()
		e.release(u)
		e.log.Warn("mcp: refused a session", "user", p.User, "reason", msg)
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "30")
		}
		writeRPCError(w, status, m.ID, mcpwire.CodeInternalError, msg)
		return
	}
	if victim != nil {
		victim.close("the user opened more sessions than the cap allows; it was the least recently used")
		e.wg.Done() // admit's
	}
	if !p.Ends.IsZero() {
		// The session ends with its token: a timer per session of an
		// expiring token (no sweep over tokens); its next request would
		// be refused anyway, since every request is verified.
		s.mu.Lock()
		if !s.closed {
			s.expiry = time.AfterFunc(time.Until(p.Ends), func() { s.close("its token expired") })
		}
		s.mu.Unlock()
	}
	w.Header().Set("Mcp-Session-Id", s.id)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(mcpwire.ResultMsg(m.ID, e.initializeResult(u, version)))
}

// admit registers a new session under the caps. When the user is at the
// per-user cap, the user's least recently used session without a request
// in flight makes room (victim, to close); when none can, or the endpoint
// is full, status and msg say why.
func (e *Endpoint) admit(s *session) (victim *session, status int, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing.Load() {
		return nil, http.StatusServiceUnavailable, "the MCP endpoint is shutting down"
	}
	u := s.u
	// The cap counts the user's sessions of every view (scoped tokens'
	// too), so that many scopes do not multiply it.
	n := 0
	for v := range e.views[u.user] {
		n += len(v.sessions)
	}
	if e.maxPerUser > 0 && n >= e.maxPerUser {
		for v := range e.views[u.user] {
			for o := range v.sessions {
				if o.busy.Load() == 0 && (victim == nil || o.lastUsed.Load() < victim.lastUsed.Load()) {
					victim = o
				}
			}
		}
		if victim == nil {
			return nil, http.StatusTooManyRequests, fmt.Sprintf(
				"user %q has %d open sessions, each with a request in flight: close one first", u.user, n)
		}
	}
	if e.maxAll > 0 && victim == nil && len(e.byID) >= e.maxAll {
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("the MCP endpoint holds its most sessions (%d): try again later", e.maxAll)
	}
	if victim != nil {
		// Out of the tables now, so that the count stays within the cap;
		// closed by the caller. Close no longer sees it: e.wg holds it
		// until then.
		e.wg.Add(1)
		delete(e.byID, victim.id)
		delete(victim.u.sessions, victim)
		e.open.Add(-1)
	}
	e.byID[s.id] = s
	u.sessions[s] = struct{}{}
	e.open.Add(1)
	return victim, 0, ""
}
