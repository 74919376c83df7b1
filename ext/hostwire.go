package ext

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// The ways a service's stdio travels between host and extension.
const (
	transportFD     = "fd"
	transportStream = "stream"
)

// hostServer serves the host's services to one extension connection, in the
// host process.
type hostServer struct {
	extpb.UnimplementedHostServer
	impl Host
	fds  *fdSender // nil when descriptors cannot pass
}

func (s *hostServer) SetUserTools(ctx context.Context, req *extpb.SetUserToolsRequest) (*extpb.SetUserToolsResponse, error) {
	return &extpb.SetUserToolsResponse{}, s.impl.SetUserTools(ctx, req.GetUserId(), toolsFromProto(req.GetTools()))
}

func (s *hostServer) SetSystemTools(ctx context.Context, req *extpb.SetSystemToolsRequest) (*extpb.SetSystemToolsResponse, error) {
	return &extpb.SetSystemToolsResponse{}, s.impl.SetSystemTools(ctx, toolsFromProto(req.GetTools()))
}

func (s *hostServer) SetUserCatalog(ctx context.Context, req *extpb.SetUserCatalogRequest) (*extpb.SetUserCatalogResponse, error) {
	return &extpb.SetUserCatalogResponse{}, s.impl.SetUserCatalog(ctx, req.GetUserId(), catalogFromProto(req))
}

func (s *hostServer) Notify(ctx context.Context, req *extpb.NotifyRequest) (*extpb.NotifyResponse, error) {
	return &extpb.NotifyResponse{}, s.impl.Notify(ctx, req.GetUserId(), req.GetMethod(), raw(req.GetParams()))
}

func (s *hostServer) RequestUser(ctx context.Context, req *extpb.RequestUserRequest) (*extpb.RequestUserResponse, error) {
	res, err := s.impl.RequestUser(ctx, req.GetUserId(), req.GetMethod(), raw(req.GetParams()))
	var re *RPCError
	if errors.As(err, &re) {
		return &extpb.RequestUserResponse{RpcError: rpcErrorToProto(re)}, nil
	}
	if err != nil {
		return nil, err
	}
	return &extpb.RequestUserResponse{Result: res}, nil
}

func (s *hostServer) ActingUser(ctx context.Context, req *extpb.ActingUserRequest) (*extpb.ActingUserResponse, error) {
	u, err := s.impl.ActingUser(ctx, req.GetConversationId())
	if err != nil {
		return nil, err
	}
	return &extpb.ActingUserResponse{UserId: u}, nil
}

func (s *hostServer) GetSecret(ctx context.Context, req *extpb.GetSecretRequest) (*extpb.GetSecretResponse, error) {
	v, err := s.impl.UserStore(req.GetUserId()).Secrets().Get(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &extpb.GetSecretResponse{Value: v}, nil
}

func (s *hostServer) SetSecret(ctx context.Context, req *extpb.SetSecretRequest) (*extpb.SetSecretResponse, error) {
	return &extpb.SetSecretResponse{}, s.impl.UserStore(req.GetUserId()).Secrets().Set(ctx, req.GetName(), req.GetValue())
}

func (s *hostServer) DeleteSecret(ctx context.Context, req *extpb.DeleteSecretRequest) (*extpb.DeleteSecretResponse, error) {
	return &extpb.DeleteSecretResponse{}, s.impl.UserStore(req.GetUserId()).Secrets().Delete(ctx, req.GetName())
}

func (s *hostServer) ListSecrets(ctx context.Context, req *extpb.ListSecretsRequest) (*extpb.ListSecretsResponse, error) {
	names, err := s.impl.UserStore(req.GetUserId()).Secrets().List(ctx)
	if err != nil {
		return nil, err
	}
	return &extpb.ListSecretsResponse{Names: names}, nil
}

func (s *hostServer) GetSettings(ctx context.Context, req *extpb.GetSettingsRequest) (*extpb.GetSettingsResponse, error) {
	v, err := s.impl.UserStore(req.GetUserId()).Settings().Get(ctx, req.GetSection())
	if err != nil {
		return nil, err
	}
	return &extpb.GetSettingsResponse{Values: v}, nil
}

func (s *hostServer) SetSettings(ctx context.Context, req *extpb.SetSettingsRequest) (*extpb.SetSettingsResponse, error) {
	return &extpb.SetSettingsResponse{}, s.impl.UserStore(req.GetUserId()).Settings().Set(ctx, req.GetSection(), req.GetValues())
}

func (s *hostServer) GetPaths(ctx context.Context, req *extpb.GetPathsRequest) (*extpb.GetPathsResponse, error) {
	p, err := s.impl.UserStore(req.GetUserId()).Paths(ctx)
	if err != nil {
		return nil, err
	}
	return &extpb.GetPathsResponse{Data: p.Data, State: p.State, Cache: p.Cache}, nil
}

// ConnectService serves one service handle. It returns when the extension
// releases the handle (closes its send side) or the connection ends; the
// handle is released on return either way.
func (s *hostServer) ConnectService(stream grpc.BidiStreamingServer[extpb.ServiceFrame, extpb.ServiceFrame]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return fmt.Errorf("first service frame is not open: %w", ErrInvalidArgument)
	}
	var conn ServiceConn
	if spec := open.GetSpec(); spec != nil {
		conn, err = s.impl.ConnectServiceSpec(ctx, open.GetName(), open.GetUserId(), processSpecFromProto(spec))
	} else {
		conn, err = s.impl.ConnectService(ctx, open.GetName(), open.GetUserId())
	}
	if err != nil {
		return err
	}
	defer conn.Release()

	// One goroutine at a time sends; every goroutine started here is
	// joined before return (and before the handle is released).
	var (
		sendMu sync.Mutex
		wg     sync.WaitGroup
	)
	relayCtx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
	}()
	send := func(f *extpb.ServiceFrame) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(f)
	}
	// How the process ended goes to the extension once it has.
	sendExit := func() {
		ex, ok := conn.(ServiceExiter)
		if !ok {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e, err := ex.Exit(relayCtx); err == nil {
				_ = send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Exited{Exited: serviceExitToProto(e)}})
			}
		}()
	}

	if open.GetTransport() == transportFD && s.fds != nil {
		if fc, ok := conn.(FileServiceConn); ok {
			stdin, stdout := fc.Files()
			token, err := s.fds.send(stdin, stdout)
			if err != nil {
				return fmt.Errorf("passing the service's descriptors: %w", err)
			}
			if err := send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Opened{Opened: &extpb.ServiceOpened{
				Transport: transportFD, FdToken: token, Pid: int32(conn.PID()),
			}}}); err != nil {
				return err
			}
			sendExit()
			// The stream now only holds the handle: wait for the release.
			for {
				if _, err := stream.Recv(); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
			}
		}
	}
	if err := send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Opened{Opened: &extpb.ServiceOpened{
		Transport: transportStream, Pid: int32(conn.PID()),
	}}}); err != nil {
		return err
	}
	sendExit()

	// Relay: stdout to frames on one goroutine, frames to stdin on this one.
	stdout := conn.Stdout()
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, rerr := stdout.Read(buf)
			if n > 0 {
				if serr := send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Data{Data: append([]byte(nil), buf[:n]...)}}); serr != nil {
					return
				}
			}
			if rerr != nil {
				if relayCtx.Err() == nil {
					_ = send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_StdoutClosed{StdoutClosed: true}})
				}
				return
			}
		}
	}()
	stdin := conn.Stdin()
	var rerr error
	for {
		f, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = err
			}
			break
		}
		switch {
		case f.GetData() != nil:
			if _, err := stdin.Write(f.GetData()); err != nil {
				// The process went away; its stdout EOF tells the extension.
				continue
			}
		case f.GetCloseStdin():
			_ = stdin.Close()
		}
	}
	cancel()
	// Unblock the stdout reader: releasing the handle closes this handle's
	// view of stdout.
	_ = conn.Release()
	_ = stdout.Close()
	wg.Wait()
	return rerr
}

// hostClient is the host's services as the extension process sees them.
type hostClient struct {
	conn       *grpc.ClientConn
	client     extpb.HostClient
	transports []string
	fds        *fdReceiver
	// callers and callerFrames: a CallerTools call of an in-flight call
	// travels on that call's frames when the host answers them.
	callers      *callerCalls
	callerFrames bool
}

var _ Host = (*hostClient)(nil)

func (h *hostClient) close() { _ = h.conn.Close() }

func (h *hostClient) SetUserTools(ctx context.Context, user string, tools []Tool) error {
	_, err := h.client.SetUserTools(ctx, &extpb.SetUserToolsRequest{UserId: user, Tools: toolsToProto(tools)})
	return fromStatus(err)
}

func (h *hostClient) SetSystemTools(ctx context.Context, tools []Tool) error {
	_, err := h.client.SetSystemTools(ctx, &extpb.SetSystemToolsRequest{Tools: toolsToProto(tools)})
	return fromStatus(err)
}

func (h *hostClient) SetUserCatalog(ctx context.Context, user string, c *Catalog) error {
	_, err := h.client.SetUserCatalog(ctx, catalogToProto(user, c))
	return fromStatus(err)
}

func (h *hostClient) Notify(ctx context.Context, user, method string, params json.RawMessage) error {
	_, err := h.client.Notify(ctx, &extpb.NotifyRequest{UserId: user, Method: method, Params: params})
	return fromStatus(err)
}

func (h *hostClient) RequestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error) {
	resp, err := h.client.RequestUser(ctx, &extpb.RequestUserRequest{UserId: user, Method: method, Params: params})
	if err != nil {
		return nil, fromStatus(err)
	}
	if e := resp.GetRpcError(); e != nil {
		return nil, rpcErrorFromProto(e)
	}
	return raw(resp.GetResult()), nil
}

func (h *hostClient) ActingUser(ctx context.Context, conversation string) (string, error) {
	resp, err := h.client.ActingUser(ctx, &extpb.ActingUserRequest{ConversationId: conversation})
	if err != nil {
		return "", fromStatus(err)
	}
	return resp.GetUserId(), nil
}

func (h *hostClient) UserStore(user string) UserStore { return &remoteUserStore{h: h, user: user} }

func (h *hostClient) canFD() bool {
	if h.fds == nil {
		return false
	}
	for _, t := range h.transports {
		if t == transportFD {
			return true
		}
	}
	return false
}

// ConnectService opens a handle. ctx bounds the opening only; the handle
// lives until Release.
func (h *hostClient) ConnectService(ctx context.Context, name, user string) (ServiceConn, error) {
	return h.connectService(ctx, name, user, nil)
}

// ConnectServiceSpec opens a handle, handing the host the spec.
func (h *hostClient) ConnectServiceSpec(ctx context.Context, name, user string, spec *ProcessSpec) (ServiceConn, error) {
	if spec == nil {
		return nil, fmt.Errorf("ConnectServiceSpec of %q: nil spec: %w", name, ErrInvalidArgument)
	}
	return h.connectService(ctx, name, user, spec)
}

func (h *hostClient) connectService(ctx context.Context, name, user string, spec *ProcessSpec) (ServiceConn, error) {
	transport := transportStream
	if h.canFD() {
		transport = transportFD
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := h.client.ConnectService(sctx)
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	if err := stream.Send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Open{Open: &extpb.ServiceOpen{
		Name: name, UserId: user, Transport: transport, Spec: processSpecToProto(spec),
	}}}); err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	type result struct {
		f   *extpb.ServiceFrame
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := stream.Recv()
		ch <- result{f, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		cancel()
		<-ch
		return nil, ctx.Err()
	}
	if r.err != nil {
		cancel()
		return nil, fromStatus(r.err)
	}
	opened := r.f.GetOpened()
	if opened == nil {
		cancel()
		return nil, fmt.Errorf("host answered a service open without opened: %w", ErrUnavailable)
	}
	if opened.GetTransport() == transportFD {
		stdin, stdout, err := h.fds.receive(ctx, opened.GetFdToken())
		if err != nil {
			cancel()
			return nil, fmt.Errorf("receiving the service's descriptors: %w", err)
		}
		c := &fdServiceConn{stream: stream, cancel: cancel, stdin: stdin, stdout: stdout, pid: int(opened.GetPid()),
			exit: newExitBox(), recvDone: make(chan struct{})}
		go c.recv()
		return c, nil
	}
	c := &streamServiceConn{stream: stream, cancel: cancel, pid: int(opened.GetPid()), exit: newExitBox()}
	c.pr, c.pw = io.Pipe()
	c.wg.Add(1)
	go c.pump()
	return c, nil
}

// fdServiceConn is a handle whose pipes were passed as descriptors: reads
// and writes go straight to the process. The stream holds the handle and
// brings how the process ended; its one reader, recv, is joined by
// Release.
type fdServiceConn struct {
	stream      grpc.BidiStreamingClient[extpb.ServiceFrame, extpb.ServiceFrame]
	cancel      context.CancelFunc
	stdin       *os.File
	stdout      *os.File
	pid         int
	exit        *exitBox
	recvDone    chan struct{}
	releaseOnce sync.Once
}

// recv reads the stream until the host ends it, keeping the exit it tells.
func (c *fdServiceConn) recv() {
	defer close(c.recvDone)
	defer c.exit.set(nil)
	for {
		f, err := c.stream.Recv()
		if err != nil {
			return
		}
		if e := f.GetExited(); e != nil {
			c.exit.set(serviceExitFromProto(e))
		}
	}
}

// Exit implements [ServiceExiter].
func (c *fdServiceConn) Exit(ctx context.Context) (*ServiceExit, error) { return c.exit.wait(ctx) }

func (c *fdServiceConn) Stdin() io.WriteCloser { return c.stdin }
func (c *fdServiceConn) Stdout() io.ReadCloser { return c.stdout }
func (c *fdServiceConn) PID() int              { return c.pid }
func (c *fdServiceConn) Release() error {
	c.releaseOnce.Do(func() {
		_ = c.stdin.Close()
		_ = c.stdout.Close()
		_ = c.stream.CloseSend()
		// Wait for the host to end the stream so the release is ordered
		// before Release returns.
		<-c.recvDone
		c.cancel()
	})
	return nil
}

// streamServiceConn is a handle whose bytes travel in gRPC frames.
type streamServiceConn struct {
	stream grpc.BidiStreamingClient[extpb.ServiceFrame, extpb.ServiceFrame]
	cancel context.CancelFunc
	pid    int
	pr     *io.PipeReader
	pw     *io.PipeWriter
	wg     sync.WaitGroup
	exit   *exitBox

	sendMu      sync.Mutex
	stdinClosed bool
	releaseOnce sync.Once
}

// pump moves stdout frames into the pipe until the stream ends.
func (c *streamServiceConn) pump() {
	defer c.wg.Done()
	defer c.exit.set(nil)
	for {
		f, err := c.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = c.pw.Close()
			} else {
				_ = c.pw.CloseWithError(fromStatus(err))
			}
			return
		}
		switch {
		case f.GetStdoutClosed():
			_ = c.pw.Close()
		case f.GetExited() != nil:
			c.exit.set(serviceExitFromProto(f.GetExited()))
		case f.GetData() != nil:
			if _, err := c.pw.Write(f.GetData()); err != nil {
				// The reader closed: drain the stream until it ends.
				continue
			}
		}
	}
}

func (c *streamServiceConn) Stdin() io.WriteCloser { return (*streamStdin)(c) }
func (c *streamServiceConn) Stdout() io.ReadCloser { return c.pr }
func (c *streamServiceConn) PID() int              { return c.pid }

// Exit implements [ServiceExiter].
func (c *streamServiceConn) Exit(ctx context.Context) (*ServiceExit, error) { return c.exit.wait(ctx) }

func (c *streamServiceConn) Release() error {
	c.releaseOnce.Do(func() {
		c.sendMu.Lock()
		c.stdinClosed = true
		_ = c.stream.CloseSend()
		c.sendMu.Unlock()
		_ = c.pr.Close()
		c.wg.Wait()
		c.cancel()
	})
	return nil
}

// streamStdin writes stdin frames.
type streamStdin streamServiceConn

// maxFrame bounds one data frame, well under gRPC's 4 MiB message limit.
const maxFrame = 1 << 20

func (w *streamStdin) Write(p []byte) (int, error) {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.stdinClosed {
		return 0, fmt.Errorf("writing to service stdin: %w", os.ErrClosed)
	}
	n := 0
	for len(p) > 0 {
		chunk := p
		if len(chunk) > maxFrame {
			chunk = chunk[:maxFrame]
		}
		if err := w.stream.Send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_Data{Data: chunk}}); err != nil {
			return n, fmt.Errorf("writing to service stdin: %w", fromStatus(err))
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

func (w *streamStdin) Close() error {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.stdinClosed {
		return nil
	}
	w.stdinClosed = true
	if err := w.stream.Send(&extpb.ServiceFrame{Frame: &extpb.ServiceFrame_CloseStdin{CloseStdin: true}}); err != nil {
		return fromStatus(err)
	}
	return nil
}

// remoteUserStore is a user's store reached over the wire.
type remoteUserStore struct {
	h    *hostClient
	user string
}

func (s *remoteUserStore) Secrets() Secrets   { return (*remoteSecrets)(s) }
func (s *remoteUserStore) Settings() Settings { return (*remoteSettings)(s) }
func (s *remoteUserStore) Paths(ctx context.Context) (Paths, error) {
	resp, err := s.h.client.GetPaths(ctx, &extpb.GetPathsRequest{UserId: s.user})
	if err != nil {
		return Paths{}, fromStatus(err)
	}
	return Paths{Data: resp.GetData(), State: resp.GetState(), Cache: resp.GetCache()}, nil
}

type remoteSecrets remoteUserStore

func (s *remoteSecrets) Get(ctx context.Context, name string) (string, error) {
	resp, err := s.h.client.GetSecret(ctx, &extpb.GetSecretRequest{UserId: s.user, Name: name})
	if err != nil {
		return "", fromStatus(err)
	}
	return resp.GetValue(), nil
}

func (s *remoteSecrets) Set(ctx context.Context, name, value string) error {
	_, err := s.h.client.SetSecret(ctx, &extpb.SetSecretRequest{UserId: s.user, Name: name, Value: value})
	return fromStatus(err)
}

func (s *remoteSecrets) Delete(ctx context.Context, name string) error {
	_, err := s.h.client.DeleteSecret(ctx, &extpb.DeleteSecretRequest{UserId: s.user, Name: name})
	return fromStatus(err)
}

func (s *remoteSecrets) List(ctx context.Context) ([]string, error) {
	resp, err := s.h.client.ListSecrets(ctx, &extpb.ListSecretsRequest{UserId: s.user})
	if err != nil {
		return nil, fromStatus(err)
	}
	return resp.GetNames(), nil
}

type remoteSettings remoteUserStore

func (s *remoteSettings) Get(ctx context.Context, section string) (json.RawMessage, error) {
	resp, err := s.h.client.GetSettings(ctx, &extpb.GetSettingsRequest{UserId: s.user, Section: section})
	if err != nil {
		return nil, fromStatus(err)
	}
	if len(resp.GetValues()) == 0 {
		return json.RawMessage("{}"), nil
	}
	return resp.GetValues(), nil
}

func (s *remoteSettings) Set(ctx context.Context, section string, values json.RawMessage) error {
	_, err := s.h.client.SetSettings(ctx, &extpb.SetSettingsRequest{UserId: s.user, Section: section, Values: values})
	return fromStatus(err)
}
