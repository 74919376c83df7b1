package exttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// FakeHost is an in-memory [ext.Host] for tests: it records published
// tools, keeps secrets and settings in maps, and runs service processes
// itself (one per ConnectService, stopped on Release or at the end of the
// test). It counts the round trips a real host would serve
// ([FakeHost.RoundTrips]). It is safe for concurrent use.
type FakeHost struct {
	// Services answers ConnectService. Set it to the extension under test
	// (its [ext.ServiceProvider]) before calling Configure.
	Services ext.ServiceProvider
	// UserSession answers RequestUser for every user (nil: no session, so
	// RequestUser fails with [ext.ErrUnavailable]). Set it before Configure.
	UserSession ext.Session

	t   testing.TB
	dir string

	mu            sync.Mutex
	changed       chan struct{} // closed and replaced on every tools change
	userTools     map[string][]ext.Tool
	catalogs      map[string]*ext.Catalog // prompts, resources, templates, instructions
	notes         []Notification
	systemTools   []ext.Tool
	secrets       map[string]map[string]string
	settings      map[string]map[string]json.RawMessage
	conversations map[string]string
	procs         map[*fakeService]struct{}
	started       int
	trips         atomic.Int64
}

// RoundTrips returns how many round trips between the extension and the
// host this FakeHost has served: every call of an [ext.Host] method that
// crosses the wire (publishing tools or a catalog, connecting a service,
// reading or writing a secret or a setting, Paths, ActingUser, Notify,
// RequestUser; UserStore itself does not), and every [ext.ServiceProvider.StartService] the host makes to
// describe a service. Take the difference of two readings to count one
// operation.
func (h *FakeHost) RoundTrips() int64 { return h.trips.Load() }

// trip counts one round trip.
func (h *FakeHost) trip() { h.trips.Add(1) }

var _ ext.Host = (*FakeHost)(nil)

// NewFakeHost returns a FakeHost whose user folders live in a temporary
// directory and whose processes are stopped when the test ends.
func NewFakeHost(t testing.TB) *FakeHost {
	h := &FakeHost{
		t: t, dir: t.TempDir(), changed: make(chan struct{}),
		userTools: map[string][]ext.Tool{}, catalogs: map[string]*ext.Catalog{}, secrets: map[string]map[string]string{},
		settings: map[string]map[string]json.RawMessage{}, conversations: map[string]string{},
		procs: map[*fakeService]struct{}{},
	}
	t.Cleanup(h.stopAll)
	return h
}

// SetUserTools implements [ext.Host].
func (h *FakeHost) SetUserTools(_ context.Context, user string, tools []ext.Tool) error {
	h.trip()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.userTools[user] = slices.Clone(tools)
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

// SetUserCatalog implements [ext.Host].
func (h *FakeHost) SetUserCatalog(_ context.Context, user string, c *ext.Catalog) error {
	h.trip()
	h.mu.Lock()
	defer h.mu.Unlock()
	if c == nil {
		c = &ext.Catalog{}
	}
	cp := &ext.Catalog{
		Prompts: slices.Clone(c.Prompts), Resources: slices.Clone(c.Resources),
		ResourceTemplates: slices.Clone(c.ResourceTemplates), Instructions: slices.Clone(c.Instructions),
	}
	h.userTools[user] = slices.Clone(c.Tools)
	h.catalogs[user] = cp
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

// UserCatalog returns everything last published for user.
func (h *FakeHost) UserCatalog(user string) ext.Catalog {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := ext.Catalog{Tools: slices.Clone(h.userTools[user])}
	if c := h.catalogs[user]; c != nil {
		out.Prompts, out.Resources = slices.Clone(c.Prompts), slices.Clone(c.Resources)
		out.ResourceTemplates, out.Instructions = slices.Clone(c.ResourceTemplates), slices.Clone(c.Instructions)
	}
	return out
}

// WaitUserCatalog waits until cond holds for the user's catalog, or ctx
// ends.
func (h *FakeHost) WaitUserCatalog(ctx context.Context, user string, cond func(ext.Catalog) bool) (ext.Catalog, error) {
	for {
		c := h.UserCatalog(user)
		h.mu.Lock()
		ch := h.changed
		h.mu.Unlock()
		if cond(c) {
			return c, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return c, fmt.Errorf("waiting for the catalog of %q: %w", user, ctx.Err())
		}
	}
}

// Notification is one [ext.Host.Notify] the FakeHost received.
type Notification struct {
	User, Method string
	Params       json.RawMessage
}

// Notify implements [ext.Host]: it records the notification.
func (h *FakeHost) Notify(_ context.Context, user, method string, params json.RawMessage) error {
	h.trip()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, Notification{User: user, Method: method, Params: slices.Clone(params)})
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

// Notifications returns the notifications received so far for user ("" for
// every user).
func (h *FakeHost) Notifications(user string) []Notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Notification
	for _, n := range h.notes {
		if user == "" || n.User == user {
			out = append(out, n)
		}
	}
	return out
}

// WaitNotification waits for a notification of user with method, or ctx's
// end.
func (h *FakeHost) WaitNotification(ctx context.Context, user, method string) (Notification, error) {
	for {
		h.mu.Lock()
		ch := h.changed
		for _, n := range h.notes {
			if n.User == user && n.Method == method {
				h.mu.Unlock()
				return n, nil
			}
		}
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Notification{}, fmt.Errorf("waiting for %s to %q: %w", method, user, ctx.Err())
		}
	}
}

// RequestUser implements [ext.Host] with UserSession.
func (h *FakeHost) RequestUser(ctx context.Context, user, method string, params json.RawMessage) (json.RawMessage, error) {
	h.trip()
	if h.UserSession == nil {
		return nil, fmt.Errorf("user %q has no client session: %w", user, ext.ErrUnavailable)
	}
	return h.UserSession.Request(ctx, method, params)
}

// SetSystemTools implements [ext.Host].
func (h *FakeHost) SetSystemTools(_ context.Context, tools []ext.Tool) error {
	h.trip()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.systemTools = slices.Clone(tools)
	close(h.changed)
	h.changed = make(chan struct{})
	return nil
}

// UserTools returns the user's last published tools.
func (h *FakeHost) UserTools(user string) []ext.Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.userTools[user])
}

// SystemTools returns the last published system tools.
func (h *FakeHost) SystemTools() []ext.Tool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.systemTools)
}

// WaitUserTools waits until cond holds for the user's tools, or ctx ends.
func (h *FakeHost) WaitUserTools(ctx context.Context, user string, cond func([]ext.Tool) bool) ([]ext.Tool, error) {
	for {
		h.mu.Lock()
		tools := slices.Clone(h.userTools[user])
		ch := h.changed
		h.mu.Unlock()
		if cond(tools) {
			return tools, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return tools, fmt.Errorf("waiting for the tools of %q: %w", user, ctx.Err())
		}
	}
}

// SetConversation records that conversation belongs to user.
func (h *FakeHost) SetConversation(conversation, user string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.conversations[conversation] = user
}

// ActingUser implements [ext.Host].
func (h *FakeHost) ActingUser(_ context.Context, conversation string) (string, error) {
	h.trip()
	h.mu.Lock()
	defer h.mu.Unlock()
	u, ok := h.conversations[conversation]
	if !ok {
		return "", fmt.Errorf("conversation %q: %w", conversation, ext.ErrNotFound)
	}
	return u, nil
}

// ServicesStarted returns how many service processes were started.
func (h *FakeHost) ServicesStarted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}

// ServicesRunning returns how many service processes run now.
func (h *FakeHost) ServicesRunning() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.procs)
}

// ConnectService implements [ext.Host]: it starts a fresh process from the
// spec that Services returns.
func (h *FakeHost) ConnectService(ctx context.Context, name, user string) (ext.ServiceConn, error) {
	h.trip()
	if h.Services == nil {
		return nil, fmt.Errorf("exttest: FakeHost.Services is nil: %w", ext.ErrUnimplemented)
	}
	h.trip() // the host asks the extension for the spec
	spec, err := h.Services.StartService(ctx, name, user)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, fmt.Errorf("service %q for user %q: %w", name, user, ext.ErrNotFound)
	}
	return h.start(name, user, spec)
}

// ConnectServiceSpec implements [ext.Host]: it starts a fresh process from
// spec.
func (h *FakeHost) ConnectServiceSpec(_ context.Context, name, user string, spec *ext.ProcessSpec) (ext.ServiceConn, error) {
	h.trip()
	if spec == nil {
		return nil, fmt.Errorf("service %q: nil spec: %w", name, ext.ErrInvalidArgument)
	}
	return h.start(name, user, spec)
}

// start runs spec for user.
func (h *FakeHost) start(name, user string, spec *ext.ProcessSpec) (ext.ServiceConn, error) {
	home := filepath.Join(h.dir, "users", user)
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.Command, spec.Args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, spec.Env...)
	cmd.Dir = spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = home
	}
	tail := &ext.StderrTail{}
	cmd.Stderr = tail
	cmd.WaitDelay = 250 * time.Millisecond // a grandchild holding stderr is not waited for
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		_ = stdinR.Close()
		_ = stdinW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = stdinR, stdoutW
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{stdinR, stdinW, stdoutR, stdoutW} {
			_ = f.Close()
		}
		return nil, ext.Mark(fmt.Errorf("starting service %q (%s): %w", name, spec.Command, err), ext.ErrCannotStart)
	}
	_ = stdinR.Close()
	_ = stdoutW.Close()
	s := &fakeService{h: h, cmd: cmd, stdin: stdinW, stdout: stdoutR, tail: tail, waited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		s.exit = &ext.ServiceExit{Code: cmd.ProcessState.ExitCode(), Stderr: tail.Lines()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.exit.Signal = ws.Signal().String()
		}
		close(s.waited)
	}()
	h.mu.Lock()
	h.procs[s] = struct{}{}
	h.started++
	h.mu.Unlock()
	return s, nil
}

func (h *FakeHost) stopAll() {
	h.mu.Lock()
	procs := make([]*fakeService, 0, len(h.procs))
	for p := range h.procs {
		procs = append(procs, p)
	}
	h.mu.Unlock()
	for _, p := range procs {
		_ = p.Release()
	}
}

type fakeService struct {
	h      *FakeHost
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	tail   *ext.StderrTail
	waited chan struct{}
	exit   *ext.ServiceExit // set before waited closes
	once   sync.Once
}

// Exit implements [ext.ServiceExiter].
func (s *fakeService) Exit(ctx context.Context) (*ext.ServiceExit, error) {
	select {
	case <-s.waited:
		return s.exit, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *fakeService) Stdin() io.WriteCloser           { return s.stdin }
func (s *fakeService) Stdout() io.ReadCloser           { return s.stdout }
func (s *fakeService) PID() int                        { return s.cmd.Process.Pid }
func (s *fakeService) Files() (stdin, stdout *os.File) { return s.stdin, s.stdout }

// Release stops the process: close stdin, then SIGTERM, then SIGKILL.
func (s *fakeService) Release() error {
	s.once.Do(func() {
		_ = s.stdin.Close()
		select {
		case <-s.waited:
		case <-time.After(2 * time.Second):
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.waited:
			case <-time.After(2 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.waited
			}
		}
		_ = s.stdout.Close()
		s.h.mu.Lock()
		delete(s.h.procs, s)
		s.h.mu.Unlock()
	})
	return nil
}

// UserStore implements [ext.Host].
func (h *FakeHost) UserStore(user string) ext.UserStore { return &fakeStore{h: h, user: user} }

type fakeStore struct {
	h    *FakeHost
	user string
}

func (s *fakeStore) Secrets() ext.Secrets   { return (*fakeSecrets)(s) }
func (s *fakeStore) Settings() ext.Settings { return (*fakeSettings)(s) }
func (s *fakeStore) Paths(context.Context) (ext.Paths, error) {
	s.h.trip()
	base := filepath.Join(s.h.dir, "users", s.user)
	p := ext.Paths{Data: filepath.Join(base, "data"), State: filepath.Join(base, "state"), Cache: filepath.Join(base, "cache")}
	for _, d := range []string{p.Data, p.State, p.Cache} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return ext.Paths{}, err
		}
	}
	return p, nil
}

type fakeSecrets fakeStore

func (s *fakeSecrets) Get(_ context.Context, name string) (string, error) {
	s.h.trip()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	v, ok := s.h.secrets[s.user][name]
	if !ok {
		return "", fmt.Errorf("secret %q: %w", name, ext.ErrNotFound)
	}
	return v, nil
}

func (s *fakeSecrets) Set(_ context.Context, name, value string) error {
	s.h.trip()
	if name == "" {
		return fmt.Errorf("empty secret name: %w", ext.ErrInvalidArgument)
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.secrets[s.user] == nil {
		s.h.secrets[s.user] = map[string]string{}
	}
	s.h.secrets[s.user][name] = value
	return nil
}

func (s *fakeSecrets) Delete(_ context.Context, name string) error {
	s.h.trip()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	delete(s.h.secrets[s.user], name)
	return nil
}

func (s *fakeSecrets) List(context.Context) ([]string, error) {
	s.h.trip()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	var names []string
	for n := range s.h.secrets[s.user] {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

type fakeSettings fakeStore

func (s *fakeSettings) Get(_ context.Context, section string) (json.RawMessage, error) {
	s.h.trip()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	v, ok := s.h.settings[s.user][section]
	if !ok {
		return json.RawMessage("{}"), nil
	}
	return slices.Clone(v), nil
}

func (s *fakeSettings) Set(_ context.Context, section string, values json.RawMessage) error {
	s.h.trip()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(values, &obj); err != nil || obj == nil {
		return ext.Errorf(ext.ErrInvalidArgument, "settings of section %q are not a JSON object", section)
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.settings[s.user] == nil {
		s.h.settings[s.user] = map[string]json.RawMessage{}
	}
	s.h.settings[s.user][section] = slices.Clone(values)
	return nil
}
