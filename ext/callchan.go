package ext

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agenthost/agenthost/ext/internal/extpb"
	"github.com/agenthost/agenthost/ext/mcpwire"
)

// The call channel carries every request that has a client session behind
// it: the host opens a call with a CallOpen frame, the extension may send
// notifications and requests to the client while it runs (answered with
// reply frames), and ends it with one CallEnd frame; a cancel frame cancels
// the call's context in the extension. Many calls share the channel.
//
// Its bytes travel on a stream socketpair handed to the extension at launch
// (length-prefixed protobuf frames: one write and one wake-up per frame, no
// HTTP/2 or TLS on the way, which is what makes it the fast path), or, where
// no socketpair could be passed, on one gRPC Calls stream. Both carry the
// same frames and share the code below.

// EnvCallChannel names the environment variable that tells an extension
// process which descriptor holds the call channel.
const EnvCallChannel = "AGENTHOST_CALL_CHANNEL"

// maxCallFrame bounds one frame on the socket (a tool result included).
const maxCallFrame = 64 << 20

// The kinds of calls (CallOpen.method) besides the tasks/* methods.
const (
	methodCallTool     = "tools/call"
	methodGetPrompt    = "prompts/get"
	methodReadResource = "resources/read"
	methodComplete     = "completion/complete"
)

// frameConn moves call frames. send may be called concurrently; recv is
// called by one goroutine.
type frameConn interface {
	send(*extpb.CallFrame) error
	recv() (*extpb.CallFrame, error)
	close() error
}

// sockFrames carries frames on a stream socket, each a 4-byte big-endian
// length and a protobuf message.
type sockFrames struct {
	conn net.Conn
	r    *bufio.Reader

	wmu  sync.Mutex
	wbuf []byte
}

func newSockFrames(f *os.File) (*sockFrames, error) {
	c, err := net.FileConn(f)
	_ = f.Close() // FileConn dup'd it
	if err != nil {
		return nil, fmt.Errorf("opening the call channel: %w", err)
	}
	return &sockFrames{conn: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (s *sockFrames) send(f *extpb.CallFrame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b, err := appendFrame(append(s.wbuf[:0], 0, 0, 0, 0), f)
	if err != nil {
		return fmt.Errorf("encoding a call frame: %w", err)
	}
	if len(b)-4 > maxCallFrame {
		return fmt.Errorf("a call frame of %d bytes is over the limit of %d: %w", len(b)-4, maxCallFrame, ErrInvalidArgument)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	_, err = s.conn.Write(b)
	if cap(b) <= 64<<10 {
		s.wbuf = b[:0]
	}
	return err
}

func (s *sockFrames) recv() (*extpb.CallFrame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxCallFrame {
		return nil, fmt.Errorf("a call frame of %d bytes is over the limit of %d", n, maxCallFrame)
	}
	// A buffer of its own per frame: the decoded frame's bytes fields
	// alias it (one allocation, where proto copied each field).
	buf := make([]byte, n)
	if _, err := io.ReadFull(s.r, buf); err != nil {
		return nil, err
	}
	f, err := decodeFrame(buf)
	if err != nil {
		return nil, fmt.Errorf("decoding a call frame: %w", err)
	}
	return f, nil
}

func (s *sockFrames) close() error { return s.conn.Close() }

// streamFrames carries frames on a gRPC Calls stream (either side).
type streamFrames struct {
	stream interface {
		Send(*extpb.CallFrame) error
		Recv() (*extpb.CallFrame, error)
	}
	cancel context.CancelFunc // ends the stream (host side)
	smu    sync.Mutex
}

func (s *streamFrames) send(f *extpb.CallFrame) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.stream.Send(f)
}

func (s *streamFrames) recv() (*extpb.CallFrame, error) { return s.stream.Recv() }

func (s *streamFrames) close() error {
	if s.cancel != nil {
		s.cancel()
	}
	return nil
}

// statusOf splits err into a gRPC code and message for a frame, using the
// one sentinel table ([toStatus]).
func statusOf(err error) (uint32, string) {
	st := status.Convert(toStatus(err))
	code := st.Code()
	if code == codes.OK {
		code = codes.Unknown
	}
	return uint32(code), st.Message()
}

// errorOf is the inverse of statusOf.
func errorOf(code uint32, msg string) error {
	return fromStatus(status.Error(codes.Code(code), msg))
}

// ---- host side ----

// callClient is the host's end of the call channel: it numbers calls,
// routes the extension's frames to them, and fails every call when the
// channel dies. Its reader goroutine ends when the channel is closed.
type callClient struct {
	fc   frameConn
	done chan struct{} // closed when the reader exits
	// host returns the host's services the extension was configured with
	// (nil before Configure): caller_call frames are answered through its
	// [CallerTools].
	host func() Host

	mu    sync.Mutex
	next  uint64
	calls map[uint64]*pendingCall
	err   error // why the channel died
}

// pendingCall queues the frames of one call for its caller. The reader
// never blocks on a caller: frames queue, and the caller drains them.
type pendingCall struct {
	mu     sync.Mutex
	queue  []*extpb.CallFrame
	first  [1]*extpb.CallFrame // the queue's first slot: most calls get one frame, the end
	signal chan struct{}       // capacity 1
}

// maxQueuedNotifications bounds the notifications queued for one call; more
// are dropped (requests and the end frame never are).
const maxQueuedNotifications = 1024

func (p *pendingCall) push(f *extpb.CallFrame) {
	p.mu.Lock()
	if f.GetNotify() != nil && len(p.queue) >= maxQueuedNotifications {
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, f)
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

func (p *pendingCall) take() []*extpb.CallFrame {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

func newCallClient(fc frameConn, host func() Host) *callClient {
	c := &callClient{fc: fc, host: host, done: make(chan struct{}), calls: map[uint64]*pendingCall{}}
	go c.read()
	return c
}

func (c *callClient) read() {
	defer close(c.done)
	for {
		f, err := c.fc.recv()
		if err != nil {
			c.mu.Lock()
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				c.err = errors.New("the extension's call channel closed")
			} else {
				c.err = fmt.Errorf("the extension's call channel failed: %w", err)
			}
			c.mu.Unlock()
			_ = c.fc.close()
			return
		}
		c.mu.Lock()
		p := c.calls[f.GetCall()]
		c.mu.Unlock()
		if p != nil {
			p.push(f)
		}
	}
}

// close ends the channel and waits for the reader.
func (c *callClient) close() {
	_ = c.fc.close()
	<-c.done
}

func (c *callClient) register() (uint64, *pendingCall, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, nil, &notDelivered{msg: c.err.Error()}
	}
	c.next++
	p := &pendingCall{signal: make(chan struct{}, 1)}
	p.queue = p.first[:0] // take hands it out once and starts the queue anew
	c.calls[c.next] = p
	return c.next, p, nil
}

func (c *callClient) unregister(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *callClient) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Errorf("%v: %w", c.err, ErrUnavailable)
}

// do runs one call: it sends open, relays the extension's notifications and
// requests to sess, answers its caller calls, and returns the end frame.
// When ctx ends first it tells the extension to cancel and returns at once.
// Either way the goroutines the call started end before do returns.
func (c *callClient) do(ctx context.Context, open *extpb.CallOpen, sess Session) (*extpb.CallEnd, error) {
	id, p, err := c.register()
	if err != nil {
		return nil, err
	}
	defer c.unregister(id)
	if err := c.fc.send(&extpb.CallFrame{Call: id, Body: &extpb.CallFrame_Open{Open: open}}); err != nil {
		select {
		case <-c.done:
			// The channel was already dead: nothing reached the extension.
			return nil, &notDelivered{msg: "the extension's call channel is closed"}
		default:
		}
		return nil, fmt.Errorf("sending the call: %w", Mark(err, ErrUnavailable))
	}
	st := &callState{id: id, caller: open.GetCaller(), sess: sess}
	defer st.stop()
	for {
		select {
		case <-p.signal:
		case <-ctx.Done():
			_ = c.fc.send(&extpb.CallFrame{Call: id, Body: &extpb.CallFrame_Cancel{Cancel: true}})
			return nil, ctx.Err()
		case <-c.done:
			// Frames may have arrived just before the channel died.
			if end := c.drain(ctx, p, st); end != nil {
				return end, nil
			}
			return nil, c.deadErr()
		}
		if end := c.drain(ctx, p, st); end != nil {
			return end, nil
		}
	}
}

// callState is what one call started on the host's side: the goroutines
// answering its requests and caller calls (owned by do, which waits for
// them), and the caller calls' cancel functions. Only do's goroutine
// touches it, but for inner, which the answering goroutines also update.
type callState struct {
	id     uint64
	caller string // the call's caller handle (CallOpen.caller)
	sess   Session

	wg   sync.WaitGroup
	ctx  context.Context // made by the first request or caller call
	halt func()          // ends ctx and waits for wg (set with ctx)

	mu    sync.Mutex
	inner map[uint64]context.CancelFunc // caller calls running
}

// started returns the context the call's goroutines run under.
func (st *callState) started(ctx context.Context) context.Context {
	if st.ctx == nil {
		var cancel context.CancelFunc
		st.ctx, cancel = context.WithCancel(ctx)
		st.halt = func() {
			cancel()
			st.wg.Wait()
		}
	}
	return st.ctx
}

// stop ends the call's goroutines and waits for them.
func (st *callState) stop() {
	if st.halt != nil {
		st.halt()
	}
}

// drain handles the queued frames of a call and returns its end frame, if
// it came.
func (c *callClient) drain(ctx context.Context, p *pendingCall, st *callState) *extpb.CallEnd {
	for _, f := range p.take() {
		switch b := f.GetBody().(type) {
		case *extpb.CallFrame_End:
			return b.End
		case *extpb.CallFrame_Notify:
			// A client that cannot take a notification loses it; the call
			// goes on.
			_ = st.sess.Notify(ctx, b.Notify.GetMethod(), raw(b.Notify.GetParams()))
		case *extpb.CallFrame_Request:
			m := b.Request
			rctx := st.started(ctx)
			st.wg.Add(1)
			go func() {
				defer st.wg.Done()
				res, err := st.sess.Request(rctx, m.GetMethod(), raw(m.GetParams()))
				_ = c.fc.send(&extpb.CallFrame{Call: st.id, Body: &extpb.CallFrame_Reply{Reply: replyOf(m.GetId(), res, err)}})
			}()
		case *extpb.CallFrame_CallerCall:
			c.callerCall(st.started(ctx), st, b.CallerCall)
		}
	}
	return nil
}

// callerCall answers a caller_call frame: the tool call goes through the
// host's [CallerTools] as the caller of the call the frame came in (its
// handle, never one the frame names), on a goroutine the call's state
// owns; a cancel frame cancels a running one.
func (c *callClient) callerCall(ctx context.Context, st *callState, m *extpb.CallerCall) {
	id := m.GetId()
	if m.GetCancel() {
		st.mu.Lock()
		cancel := st.inner[id]
		st.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return
	}
	ictx, cancel := context.WithCancel(ctx)
	st.mu.Lock()
	if st.inner == nil {
		st.inner = map[uint64]context.CancelFunc{}
	}
	st.inner[id] = cancel
	st.mu.Unlock()
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer func() {
			st.mu.Lock()
			delete(st.inner, id)
			st.mu.Unlock()
			cancel()
		}()
		r := &extpb.CallerResult{Id: id}
		res, err := c.callAsCaller(ictx, st.caller, m)
		if err == nil {
			r.Result, err = res.JSON()
			r.IsError = res.IsError
		}
		if err != nil {
			r.Code, r.Error = statusOf(err)
		}
		_ = c.fc.send(&extpb.CallFrame{Call: st.id, Body: &extpb.CallFrame_CallerResult{CallerResult: r}})
	}()
}

func (c *callClient) callAsCaller(ctx context.Context, caller string, m *extpb.CallerCall) (*CallToolResult, error) {
	var h Host
	if c.host != nil {
		h = c.host()
	}
	ct, ok := h.(CallerTools)
	if !ok {
		return nil, fmt.Errorf("this host cannot call tools as a caller: %w", ErrUnimplemented)
	}
	if caller == "" {
		return nil, fmt.Errorf("this call has no caller handle (the extension did not list the %q capability): %w", CapabilityCallerTools, ErrPermission)
	}
	res, err := ct.CallCallerTool(ctx, &CallerCallRequest{Caller: caller, Name: m.GetName(), Arguments: raw(m.GetArguments())})
	if err == nil && res == nil {
		err = fmt.Errorf("calling %q as the caller: the host returned no result: %w", m.GetName(), ErrUnavailable)
	}
	return res, err
}

func replyOf(id uint64, res json.RawMessage, err error) *extpb.SessionReply {
	r := &extpb.SessionReply{Id: id, Result: res}
	var re *RPCError
	switch {
	case err == nil:
	case errors.As(err, &re):
		r.RpcError = rpcErrorToProto(re)
	default:
		r.Code, r.Error = statusOf(err)
	}
	return r
}

func replyResult(r *extpb.SessionReply) (json.RawMessage, error) {
	switch {
	case r.GetRpcError() != nil:
		return nil, rpcErrorFromProto(r.GetRpcError())
	case r.GetCode() != 0:
		return nil, errorOf(r.GetCode(), r.GetError())
	}
	return raw(r.GetResult()), nil
}

func rpcErrorToProto(e *RPCError) *extpb.RPCError {
	if e == nil {
		return nil
	}
	return &extpb.RPCError{Code: e.Code, Message: e.Message, Data: e.Data}
}

func rpcErrorFromProto(e *extpb.RPCError) *RPCError {
	if e == nil {
		return nil
	}
	return &RPCError{Code: e.GetCode(), Message: e.GetMessage(), Data: raw(e.GetData())}
}

// ---- extension side ----

// callServer is the extension's end of the call channel: it runs each call
// on its own goroutine with a session that sends frames back, and cancels
// and waits for every call when the channel ends.
type callServer struct {
	fc      frameConn
	impl    Extension
	callers *callerCalls // where the calls with a caller handle are found

	mu    sync.Mutex
	calls map[uint64]*servedCall
	wg    sync.WaitGroup // the workers

	jobs chan *servedCall // unbuffered: taken only by an idle worker
}

// workerIdle is how long a worker waits for the next call before it ends.
const workerIdle = 30 * time.Second

// spawn runs sc on an idle worker, or on a new one when none is idle.
// Workers are kept because a call's goroutine grows its stack to the depth
// a call needs: a fresh goroutine per call copied its stack on every call
// (measured: about 12% of ext-mcp's CPU per tool call).
func (s *callServer) spawn(ctx context.Context, sc *servedCall) {
	select {
	case s.jobs <- sc:
		return
	default:
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(workerIdle)
		defer t.Stop()
		for {
			s.run(sc)
			t.Reset(workerIdle)
			select {
			case sc = <-s.jobs:
			case <-t.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// servedCall is one call the extension runs: its context (cancelled by a
// cancel frame, its end, or the channel's) and its session, in one
// allocation.
type servedCall struct {
	id     uint64
	open   *extpb.CallOpen
	ctx    context.Context
	cancel context.CancelFunc
	sess   frameSession
}

// serveCalls runs the extension side of a call channel until it ends, then
// cancels every call still running and waits for them.
func serveCalls(ctx context.Context, fc frameConn, impl Extension, callers *callerCalls) error {
	s := &callServer{fc: fc, impl: impl, callers: callers, calls: map[uint64]*servedCall{}, jobs: make(chan *servedCall)}
	// A call's context is not a child of ctx (a child registers with its
	// parent, under the parent's lock, and leaves it when it ends, on
	// every call): the calls still running are cancelled here instead.
	base := context.WithoutCancel(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		s.mu.Lock()
		for _, sc := range s.calls {
			sc.cancel()
		}
		s.mu.Unlock()
		s.wg.Wait()
	}()
	for {
		f, err := fc.recv()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		}
		id := f.GetCall()
		switch b := f.GetBody().(type) {
		case *extpb.CallFrame_Open:
			sc := &servedCall{id: id, open: b.Open, sess: frameSession{fc: fc, call: id, caps: raw(b.Open.GetCapabilities())}}
			sc.ctx, sc.cancel = context.WithCancel(base)
			s.mu.Lock()
			s.calls[id] = sc
			s.mu.Unlock()
			s.callers.add(b.Open.GetCaller(), &sc.sess)
			s.spawn(ctx, sc)
		case *extpb.CallFrame_Cancel:
			s.mu.Lock()
			sc := s.calls[id]
			s.mu.Unlock()
			if sc != nil {
				sc.cancel()
			}
		case *extpb.CallFrame_Reply:
			s.mu.Lock()
			sc := s.calls[id]
			s.mu.Unlock()
			if sc != nil {
				sc.sess.deliver(b.Reply.GetId(), f)
			}
		case *extpb.CallFrame_CallerResult:
			s.mu.Lock()
			sc := s.calls[id]
			s.mu.Unlock()
			if sc != nil {
				sc.sess.deliver(b.CallerResult.GetId(), f)
			}
		}
	}
}

func (s *callServer) run(sc *servedCall) {
	end := dispatchCall(sc.ctx, s.impl, sc.open, &sc.sess)
	s.callers.remove(sc.open.GetCaller(), &sc.sess)
	sc.sess.end()
	s.mu.Lock()
	delete(s.calls, sc.id)
	s.mu.Unlock()
	sc.cancel()
	_ = s.fc.send(&extpb.CallFrame{Call: sc.id, Body: &extpb.CallFrame_End{End: end}})
}

// dispatchCall runs one call on impl's capability and turns the outcome
// into an end frame.
func dispatchCall(ctx context.Context, impl Extension, open *extpb.CallOpen, sess Session) *extpb.CallEnd {
	result, details, isError, err := runCall(ctx, impl, open, sess)
	if err != nil {
		code, msg := statusOf(err)
		end := &extpb.CallEnd{Code: code, Error: msg}
		if re := (*RPCError)(nil); errors.As(err, &re) {
			end.RpcError = rpcErrorToProto(re)
		}
		return end
	}
	return &extpb.CallEnd{Result: result, Details: details, IsError: isError}
}

func runCall(ctx context.Context, impl Extension, open *extpb.CallOpen, sess Session) (result, details json.RawMessage, isError bool, err error) {
	result, details, err = runCallRaw(ctx, impl, open, sess, &isError)
	return result, details, isError, err
}

func runCallRaw(ctx context.Context, impl Extension, open *extpb.CallOpen, sess Session, isError *bool) (json.RawMessage, json.RawMessage, error) {
	user, conv := open.GetUserId(), open.GetConversationId()
	switch m := open.GetMethod(); m {
	case methodCallTool:
		tc, ok := impl.(ToolCaller)
		if !ok {
			return nil, nil, fmt.Errorf("extension has no tools: %w", ErrUnimplemented)
		}
		req, err := callToolRequest(open)
		if err != nil {
			return nil, nil, err
		}
		req.User, req.Conversation, req.Session, req.Caller = user, conv, sess, open.GetCaller()
		res, err := tc.CallTool(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		if res == nil {
			return nil, nil, fmt.Errorf("ext: CallTool returned a nil result and no error")
		}
		b, err := res.JSON()
		*isError = res.IsError
		return b, res.Details, err
	case methodGetPrompt:
		pp, ok := impl.(PromptProvider)
		if !ok {
			return nil, nil, fmt.Errorf("extension has no prompts: %w", ErrUnimplemented)
		}
		b, err := pp.GetPrompt(ctx, &GetPromptRequest{User: user, Conversation: conv, Name: open.GetName(), Arguments: raw(open.GetParams()), Session: sess})
		return b, nil, err
	case methodReadResource:
		rp, ok := impl.(ResourceProvider)
		if !ok {
			return nil, nil, fmt.Errorf("extension has no resources: %w", ErrUnimplemented)
		}
		b, err := rp.ReadResource(ctx, &ReadResourceRequest{User: user, Conversation: conv, URI: open.GetName(), Session: sess})
		return b, nil, err
	case methodComplete:
		cp, ok := impl.(Completer)
		if !ok {
			return nil, nil, fmt.Errorf("extension has no completions: %w", ErrUnimplemented)
		}
		b, err := cp.Complete(ctx, &CompleteRequest{User: user, Params: raw(open.GetParams()), Session: sess})
		return b, nil, err
	case MethodTaskGet, MethodTaskResult, MethodTaskCancel, MethodTaskList:
		th, ok := impl.(TaskHandler)
		if !ok {
			return nil, nil, fmt.Errorf("extension has no tasks: %w", ErrUnimplemented)
		}
		b, err := th.HandleTask(ctx, &TaskRequest{User: user, Method: m, Params: raw(open.GetParams()), Session: sess})
		return b, nil, err
	default:
		return nil, nil, fmt.Errorf("unknown call %q: %w", m, ErrUnimplemented)
	}
}

// frameSession is the calling client's session inside the extension
// process: notifications and requests become frames of the call.
type frameSession struct {
	fc   frameConn
	call uint64
	caps json.RawMessage

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]chan *extpb.CallFrame // requests and caller calls awaiting their answer; made by the first
	ended   bool
}

var _ Session = (*frameSession)(nil)

func (s *frameSession) Capabilities() json.RawMessage {
	if len(s.caps) == 0 {
		return json.RawMessage("{}")
	}
	return s.caps
}

func (s *frameSession) Notify(_ context.Context, method string, params json.RawMessage) error {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return fmt.Errorf("notifying %s: %w", method, Mark(errSessionEnded, ErrUnavailable))
	}
	return s.fc.send(&extpb.CallFrame{Call: s.call, Body: &extpb.CallFrame_Notify{Notify: &extpb.SessionMessage{Method: method, Params: params}}})
}

func (s *frameSession) Request(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if c := SessionCapability(method); c != "" && !HasCapability(s.caps, c) {
		return nil, fmt.Errorf("the client did not declare the %q capability for %s: %w", c, method, ErrUnimplemented)
	}
	id, ch, release, ok := s.await()
	if !ok {
		return nil, fmt.Errorf("asking %s: %w", method, Mark(errSessionEnded, ErrUnavailable))
	}
	defer release()
	if err := s.fc.send(&extpb.CallFrame{Call: s.call, Body: &extpb.CallFrame_Request{Request: &extpb.SessionMessage{Id: id, Method: method, Params: params}}}); err != nil {
		return nil, fmt.Errorf("asking %s: %w", method, Mark(err, ErrUnavailable))
	}
	select {
	case f, ok := <-ch:
		switch {
		case !ok:
			return nil, fmt.Errorf("asking %s: %w", method, Mark(errSessionEnded, ErrUnavailable))
		case f.GetReply() == nil:
			return nil, fmt.Errorf("asking %s: the host answered with another kind of frame: %w", method, ErrUnavailable)
		}
		return replyResult(f.GetReply())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// await numbers a request or caller call of the session and registers
// the channel its answer comes on; release forgets it. ok is false once
// the session has ended.
func (s *frameSession) await() (id uint64, ch chan *extpb.CallFrame, release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, nil, nil, false
	}
	s.next++
	id = s.next
	ch = make(chan *extpb.CallFrame, 1)
	if s.waiters == nil {
		s.waiters = map[uint64]chan *extpb.CallFrame{}
	}
	s.waiters[id] = ch
	return id, ch, func() {
		s.mu.Lock()
		delete(s.waiters, id)
		s.mu.Unlock()
	}, true
}

// deliver hands f, the answer to request or caller call id, to its waiter.
func (s *frameSession) deliver(id uint64, f *extpb.CallFrame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.waiters[id]; ok {
		ch <- f
		delete(s.waiters, id)
	}
}

// end fails the session's waiting requests and caller calls, and every
// later use.
func (s *frameSession) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for id, ch := range s.waiters {
		close(ch)
		delete(s.waiters, id)
	}
}

// errCallerEnded is a caller call made after its call returned.
var errCallerEnded = errors.New("no call in flight for this caller handle (it ended)")

// callCaller calls a tool as the call's caller ([CallerTools]) on the
// call's own frames: the host answers with the caller of this call, and
// ctx ending cancels the call on the host's side too.
func (s *frameSession) callCaller(ctx context.Context, name string, args json.RawMessage) (*CallToolResult, error) {
	id, ch, release, ok := s.await()
	if !ok {
		return nil, fmt.Errorf("calling %q as the caller: %w", name, Mark(errCallerEnded, ErrNotFound))
	}
	defer release()
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if err := s.fc.send(&extpb.CallFrame{Call: s.call, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{Id: id, Name: name, Arguments: args}}}); err != nil {
		return nil, fmt.Errorf("calling %q as the caller: %w", name, Mark(err, ErrUnavailable))
	}
	select {
	case f, ok := <-ch:
		r := f.GetCallerResult()
		switch {
		case !ok:
			return nil, fmt.Errorf("calling %q as the caller: %w", name, Mark(errCallerEnded, ErrNotFound))
		case r == nil:
			return nil, fmt.Errorf("calling %q as the caller: the host answered with another kind of frame: %w", name, ErrUnavailable)
		case r.GetCode() != 0:
			return nil, errorOf(r.GetCode(), r.GetError())
		}
		return &CallToolResult{Raw: raw(r.GetResult()), IsError: r.GetIsError()}, nil
	case <-ctx.Done():
		_ = s.fc.send(&extpb.CallFrame{Call: s.call, Body: &extpb.CallFrame_CallerCall{CallerCall: &extpb.CallerCall{Id: id, Cancel: true}}})
		return nil, ctx.Err()
	}
}

// callerCalls finds, in the extension process, the in-flight call behind a
// caller handle, so that [CallerTools] calls travel on that call's frames.
// Safe for concurrent use; a nil *callerCalls holds nothing.
type callerCalls struct {
	mu sync.Mutex
	m  map[string]*frameSession
}

func (r *callerCalls) add(handle string, s *frameSession) {
	if r == nil || handle == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*frameSession{}
	}
	r.m[handle] = s
}

func (r *callerCalls) remove(handle string, s *frameSession) {
	if r == nil || handle == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[handle] == s {
		delete(r.m, handle)
	}
}

func (r *callerCalls) get(handle string) *frameSession {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[handle]
}

// ---- opening the channel ----

// callsOverStream opens the gRPC fallback of the call channel on the
// host's side; the stream lives until the connection ends.
func callsOverStream(done context.Context, client extpb.ExtensionClient) (frameConn, error) {
	ctx, cancel := context.WithCancel(done)
	stream, err := client.Calls(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opening the calls stream: %w", fromStatus(err))
	}
	return &streamFrames{stream: stream, cancel: cancel}, nil
}

// Calls serves the gRPC fallback of the call channel (extension side).
func (s *extensionServer) Calls(stream grpc.BidiStreamingServer[extpb.CallFrame, extpb.CallFrame]) error {
	return serveCalls(stream.Context(), &streamFrames{stream: stream}, s.impl, s.callers)
}

// callToolRequest is the request of a tools/call's open frame: with the
// client's params (call_params), its fields are read from them.
func callToolRequest(open *extpb.CallOpen) (*CallToolRequest, error) {
	req := &CallToolRequest{Name: open.GetName(), Scope: scopeFromProto(open.GetScope())}
	p := raw(open.GetCallParams())
	if p == nil {
		req.Arguments, req.ProgressToken, req.Meta, req.Task = raw(open.GetParams()), raw(open.GetProgressToken()), raw(open.GetMeta()), raw(open.GetTask())
		return req, nil
	}
	c, err := mcpwire.ParseCall(p)
	if err != nil {
		return nil, fmt.Errorf("tool %q: the client's params: %v: %w", req.Name, err, ErrInvalidArgument)
	}
	tok, err := mcpwire.ProgressToken(c.Meta)
	if err != nil {
		return nil, fmt.Errorf("tool %q: the client's _meta: %w", req.Name, err)
	}
	req.Params, req.Arguments, req.ProgressToken, req.Meta, req.Task = p, c.Arguments, tok, c.Meta, c.Task
	if len(req.Arguments) == 0 {
		req.Arguments = json.RawMessage("{}")
	}
	if string(req.Task) == "null" {
		req.Task = nil
	}
	return req, nil
}
