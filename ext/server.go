package ext

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/agenthost/agenthost/ext/internal/extpb"
)

// extensionServer serves an Extension over gRPC inside the extension
// process. Handlers only convert, call and convert; errors are mapped by
// the interceptor in [newGRPCServer].
type extensionServer struct {
	extpb.UnimplementedExtensionServer
	impl   Extension
	broker *plugin.GRPCBroker
	fds    *fdReceiver // nil when the host passes no descriptor channel
	// callers finds the in-flight calls by caller handle (shared with the
	// socket's call channel).
	callers *callerCalls

	mu   sync.Mutex
	host *hostClient // the host's services, dialled on Configure
}

func (s *extensionServer) Describe(ctx context.Context, _ *extpb.DescribeRequest) (*extpb.DescribeResponse, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, fmt.Errorf("ext: Describe returned a nil descriptor")
	}
	d2 := *d
	d2.ProtocolVersion = ProtocolVersion
	return &extpb.DescribeResponse{Descriptor_: descriptorToProto(&d2), CallParams: true}, nil
}

func (s *extensionServer) Configure(ctx context.Context, req *extpb.ConfigureRequest) (*extpb.ConfigureResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != nil {
		return nil, fmt.Errorf("ext: Configure called twice on one connection: %w", ErrInvalidArgument)
	}
	conn, err := s.broker.Dial(req.GetHostBrokerId())
	if err != nil {
		return nil, fmt.Errorf("dialling the host's services: %w", Mark(err, ErrUnavailable))
	}
	h := &hostClient{
		conn:       conn,
		client:     extpb.NewHostClient(conn),
		transports: req.GetServiceTransports(),
		fds:        s.fds,
		callers:    s.callers,
		// An older host does not answer caller_call frames.
		callerFrames: req.GetCallerFrames(),
	}
	if err := s.impl.Configure(ctx, &ConfigureRequest{Name: req.GetName(), Config: raw(req.GetConfig()), Host: h, BaseDir: req.GetBaseDir(),
		PublicURL: req.GetPublicUrl(), ListenAddr: req.GetListenAddr()}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	s.host = h
	return &extpb.ConfigureResponse{}, nil
}

func (s *extensionServer) Reconfigure(ctx context.Context, req *extpb.ReconfigureRequest) (*extpb.ReconfigureResponse, error) {
	rc, ok := s.impl.(Reconfigurer)
	if !ok {
		return nil, fmt.Errorf("extension cannot take a new config in place: %w", ErrUnimplemented)
	}
	s.mu.Lock()
	configured := s.host != nil
	s.mu.Unlock()
	if !configured {
		return nil, fmt.Errorf("ext: Reconfigure before Configure: %w", ErrInvalidArgument)
	}
	if err := rc.Reconfigure(ctx, &ReconfigureRequest{Config: raw(req.GetConfig()), DryRun: req.GetDryRun()}); err != nil {
		return nil, err
	}
	return &extpb.ReconfigureResponse{}, nil
}

func (s *extensionServer) Shutdown(ctx context.Context, _ *extpb.ShutdownRequest) (*extpb.ShutdownResponse, error) {
	err := s.impl.Shutdown(ctx)
	s.mu.Lock()
	h := s.host
	s.mu.Unlock()
	if h != nil {
		h.close()
	}
	return &extpb.ShutdownResponse{}, err
}

func (s *extensionServer) SubscribeResource(ctx context.Context, req *extpb.SubscribeResourceRequest) (*extpb.SubscribeResourceResponse, error) {
	rp, ok := s.impl.(ResourceProvider)
	if !ok {
		return nil, fmt.Errorf("extension has no resources: %w", ErrUnimplemented)
	}
	return &extpb.SubscribeResourceResponse{}, rp.SubscribeResource(ctx, &SubscribeRequest{
		User: req.GetUserId(), URI: req.GetUri(), Unsubscribe: req.GetUnsubscribe(),
	})
}

func (s *extensionServer) SessionNotify(ctx context.Context, req *extpb.SessionNotifyRequest) (*extpb.SessionNotifyResponse, error) {
	sl, ok := s.impl.(SessionListener)
	if !ok {
		return nil, fmt.Errorf("extension hears no sessions: %w", ErrUnimplemented)
	}
	return &extpb.SessionNotifyResponse{}, sl.SessionNotify(ctx, req.GetUserId(), req.GetMethod(), raw(req.GetParams()))
}

func (s *extensionServer) UserToolsChanged(ctx context.Context, req *extpb.UserToolsChangedRequest) (*extpb.UserToolsChangedResponse, error) {
	w, ok := s.impl.(UserToolsWatcher)
	if !ok {
		return nil, fmt.Errorf("extension watches no user tools: %w", ErrUnimplemented)
	}
	return &extpb.UserToolsChangedResponse{}, w.UserToolsChanged(ctx, req.GetUserId(), toolsFromProto(req.GetTools()))
}

func (s *extensionServer) ValidateSettings(ctx context.Context, req *extpb.ValidateSettingsRequest) (*extpb.ValidateSettingsResponse, error) {
	v, ok := s.impl.(SettingsValidator)
	if !ok {
		return nil, fmt.Errorf("extension validates no settings: %w", ErrUnimplemented)
	}
	return &extpb.ValidateSettingsResponse{}, v.ValidateSettings(WithUserGroups(ctx, req.GetGroups()), &ValidateSettingsRequest{
		User: req.GetUserId(), Section: req.GetSection(), Values: raw(req.GetValues()),
	})
}

func (s *extensionServer) authorizer() (Authorizer, error) {
	a, ok := s.impl.(Authorizer)
	if !ok {
		return nil, fmt.Errorf("extension signs nobody in: %w", ErrUnimplemented)
	}
	return a, nil
}

func (s *extensionServer) BeginAuth(ctx context.Context, req *extpb.BeginAuthRequest) (*extpb.BeginAuthResponse, error) {
	a, err := s.authorizer()
	if err != nil {
		return nil, err
	}
	res, err := a.BeginAuth(ctx, beginAuthRequestFromProto(req))
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, fmt.Errorf("ext: BeginAuth returned a nil result")
	}
	return beginAuthResultToProto(res), nil
}

func (s *extensionServer) CompleteAuth(ctx context.Context, req *extpb.CompleteAuthRequest) (*extpb.CompleteAuthResponse, error) {
	a, err := s.authorizer()
	if err != nil {
		return nil, err
	}
	res, err := a.CompleteAuth(ctx, completeAuthRequestFromProto(req))
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = &CompleteAuthResult{}
	}
	return completeAuthResultToProto(res), nil
}

func (s *extensionServer) lifecycle() (UserLifecycle, error) {
	ul, ok := s.impl.(UserLifecycle)
	if !ok {
		return nil, fmt.Errorf("extension has no user lifecycle: %w", ErrUnimplemented)
	}
	return ul, nil
}

func (s *extensionServer) Activate(ctx context.Context, req *extpb.ActivateRequest) (*extpb.ActivateResponse, error) {
	ul, err := s.lifecycle()
	if err != nil {
		return nil, err
	}
	return &extpb.ActivateResponse{}, ul.Activate(WithUserSnapshot(WithUserGroups(ctx, req.GetGroups()), snapshotFromPB(req.GetSnapshot())), req.GetUserId())
}

func (s *extensionServer) Retire(ctx context.Context, req *extpb.RetireRequest) (*extpb.RetireResponse, error) {
	ul, err := s.lifecycle()
	if err != nil {
		return nil, err
	}
	return &extpb.RetireResponse{}, ul.Retire(ctx, req.GetUserId(), req.GetName())
}

func (s *extensionServer) ReconcileAll(ctx context.Context, _ *extpb.ReconcileAllRequest) (*extpb.ReconcileAllResponse, error) {
	ul, err := s.lifecycle()
	if err != nil {
		return nil, err
	}
	return &extpb.ReconcileAllResponse{}, ul.ReconcileAll(ctx)
}

func (s *extensionServer) StartService(ctx context.Context, req *extpb.StartServiceRequest) (*extpb.StartServiceResponse, error) {
	sp, ok := s.impl.(ServiceProvider)
	if !ok {
		return nil, fmt.Errorf("extension has no services: %w", ErrUnimplemented)
	}
	spec, err := sp.StartService(ctx, req.GetName(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	return &extpb.StartServiceResponse{Spec: processSpecToProto(spec)}, nil
}

func (s *extensionServer) Status(ctx context.Context, req *extpb.StatusRequest) (*extpb.StatusResponse, error) {
	sr, ok := s.impl.(StatusReporter)
	if !ok {
		return nil, fmt.Errorf("extension has no status: %w", ErrUnimplemented)
	}
	entries, err := sr.Status(ctx, req.GetUserId())
	if err != nil {
		return nil, err
	}
	out := &extpb.StatusResponse{}
	for i := range entries {
		out.Entries = append(out.Entries, statusEntryToProto(&entries[i]))
	}
	return out, nil
}

func (s *extensionServer) RunAction(ctx context.Context, req *extpb.RunActionRequest) (*extpb.RunActionResponse, error) {
	ar, ok := s.impl.(ActionRunner)
	if !ok {
		return nil, fmt.Errorf("extension has no actions: %w", ErrUnimplemented)
	}
	msg, err := ar.RunAction(ctx, &ActionRequest{Caller: req.GetCaller(), User: req.GetUserId(), Name: req.GetName(), Action: req.GetAction()})
	if err != nil {
		return nil, err
	}
	return &extpb.RunActionResponse{Message: msg}, nil
}

// errorInterceptors map every handler error to a gRPC status in one place.
func errorInterceptors() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			return resp, toStatus(err)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			return toStatus(h(srv, ss))
		}),
	}
}
