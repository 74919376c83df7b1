package exttest

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// RunOptions configures [Run].
type RunOptions struct {
	// Config is the extension's config block ({} when nil).
	Config json.RawMessage
	// User is the user the suite activates ("conformance-user" when empty).
	User string
	// Prepare, when set, runs on each fresh FakeHost before Configure (to
	// store settings or secrets the extension needs).
	Prepare func(t testing.TB, h *FakeHost)
	_       struct{}
}

// Carriers lists the carriers Run exercises: the Go value in process; real
// gRPC through go-plugin with calls on the gRPC Calls stream ("grpc"); and
// the same with calls on a socketpair call channel and service descriptors
// passed over a socketpair, as the host's supervisor launches extensions
// ("grpc-socket").
var Carriers = []string{"inprocess", "grpc", "grpc-socket"}

var capabilityName = regexp.MustCompile(`^[a-z]+$`)

// Run is the conformance suite every extension passes, on both carriers.
// newImpl must return a fresh extension each call.
func Run(t *testing.T, newImpl func() ext.Extension, opts *RunOptions) {
	t.Helper()
	var o RunOptions
	if opts != nil {
		o = *opts
	}
	if o.Config == nil {
		o.Config = json.RawMessage("{}")
	}
	if o.User == "" {
		o.User = "conformance-user"
	}
	for _, carrier := range Carriers {
		t.Run(carrier, func(t *testing.T) {
			connect := func(t *testing.T) (ext.Extension, ext.Extension, *FakeHost) {
				impl := newImpl()
				switch carrier {
				case "grpc":
					return Connect(t, impl, nil), impl, NewFakeHost(t)
				case "grpc-socket":
					return Connect(t, impl, &ConnectOptions{FDPassing: true, CallChannel: true}), impl, NewFakeHost(t)
				}
				return impl, impl, NewFakeHost(t)
			}
			t.Run("describe", func(t *testing.T) {
				e, impl, _ := connect(t)
				ctx := testCtx(t)
				d, err := e.Describe(ctx)
				if err != nil {
					t.Fatalf("Describe: %v", err)
				}
				checkDescriptor(t, d, impl)
				d2, err := e.Describe(ctx)
				if err != nil || d2.Name != d.Name {
					t.Errorf("a second Describe gave %v, %v; want the same descriptor", d2, err)
				}
			})
			t.Run("shutdown before configure", func(t *testing.T) {
				e, _, _ := connect(t)
				ctx := testCtx(t)
				if err := e.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown before Configure: %v", err)
				}
				if err := e.Shutdown(ctx); err != nil {
					t.Errorf("second Shutdown: %v", err)
				}
			})
			t.Run("configure, tools, shutdown", func(t *testing.T) {
				e, impl, h := connect(t)
				if sp, ok := impl.(ext.ServiceProvider); ok {
					h.Services = sp
				}
				if o.Prepare != nil {
					o.Prepare(t, h)
				}
				ctx := testCtx(t)
				d, err := e.Describe(ctx)
				if err != nil {
					t.Fatalf("Describe: %v", err)
				}
				if err := e.Configure(ctx, &ext.ConfigureRequest{Name: d.Name, Config: o.Config, Host: h}); err != nil {
					t.Fatalf("Configure: %v", err)
				}
				if d.Has(ext.CapabilityUsers) {
					ul, ok := e.(ext.UserLifecycle)
					if !ok {
						t.Fatal("the descriptor lists users but the carrier has no UserLifecycle")
					}
					if err := ul.Activate(ctx, o.User); err != nil {
						t.Fatalf("Activate(%q): %v", o.User, err)
					}
					if err := ul.Activate(ctx, o.User); err != nil {
						t.Fatalf("a second Activate (refresh) of %q: %v", o.User, err)
					}
				}
				if d.Has(ext.CapabilityStatus) {
					if _, err := e.(ext.StatusReporter).Status(ctx, o.User); err != nil {
						t.Errorf("Status(%q): %v", o.User, err)
					}
				}
				tools := append(h.SystemTools(), h.UserTools(o.User)...)
				checkTools(t, tools)
				if d.Has(ext.CapabilityTools) {
					tc := e.(ext.ToolCaller)
					res, err := tc.CallTool(ctx, &ext.CallToolRequest{User: o.User, Name: "no-such/tool-" + d.Name, Arguments: json.RawMessage("{}")})
					switch {
					case err != nil && !errors.Is(err, ext.ErrNotFound) && !errors.Is(err, ext.ErrInvalidArgument):
						t.Errorf("CallTool of an unknown tool: %v; want ErrNotFound or an IsError result", err)
					case err == nil && !isErrorResult(res):
						t.Errorf("CallTool of an unknown tool succeeded: %+v", res)
					}
					cctx, cancel := context.WithCancel(ctx)
					cancel()
					start := time.Now()
					for _, tool := range tools {
						_, _ = tc.CallTool(cctx, &ext.CallToolRequest{User: o.User, Name: tool.Name, Arguments: json.RawMessage("{}")})
					}
					if d := time.Since(start); d > 5*time.Second {
						t.Errorf("calls with a cancelled context took %v; a cancelled call must return promptly", d)
					}
				}
				checkOptional(ctx, t, e, d, o.User)
				var wg sync.WaitGroup
				errs := make([]error, 3)
				for i := range errs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = e.Shutdown(ctx)
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Errorf("concurrent Shutdown: %v", err)
					}
				}
			})
		})
	}
}

// isErrorResult reports whether res is a failed tool result, in either of
// its forms.
func isErrorResult(res *ext.CallToolResult) bool {
	f, err := res.Fields()
	return err == nil && f != nil && f.IsError
}

// checkOptional checks the optional capabilities beside tools: each one the
// descriptor lists answers through the carrier, refuses what it does not
// know with ErrNotFound (or, for completions and tasks/list, an empty
// answer), and a session-bearing request with a session whose client
// declared nothing still works.
func checkOptional(ctx context.Context, t *testing.T, e ext.Extension, d *ext.Descriptor, user string) {
	t.Helper()
	sess := &Session{}
	if d.Has(ext.CapabilityPrompts) {
		_, err := e.(ext.PromptProvider).GetPrompt(ctx, &ext.GetPromptRequest{User: user, Name: "no-such/prompt-" + d.Name, Session: sess})
		if !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("GetPrompt of an unknown prompt: %v; want ErrNotFound", err)
		}
	}
	if d.Has(ext.CapabilityResources) {
		rp := e.(ext.ResourceProvider)
		_, err := rp.ReadResource(ctx, &ext.ReadResourceRequest{User: user, URI: "agenthost-conformance://no/such/resource", Session: sess})
		if !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("ReadResource of an unknown URI: %v; want ErrNotFound", err)
		}
	}
	if d.Has(ext.CapabilityCompletions) {
		_, err := e.(ext.Completer).Complete(ctx, &ext.CompleteRequest{User: user, Session: sess,
			Params: json.RawMessage(`{"ref":{"type":"ref/prompt","name":"no-such/prompt"},"argument":{"name":"a","value":""}}`)})
		if err != nil && !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("Complete for an unknown prompt: %v; want an empty answer or ErrNotFound", err)
		}
	}
	if d.Has(ext.CapabilityTasks) {
		th := e.(ext.TaskHandler)
		_, err := th.HandleTask(ctx, &ext.TaskRequest{User: user, Method: ext.MethodTaskGet, Params: json.RawMessage(`{"taskId":"no-such-task"}`), Session: sess})
		if !errors.Is(err, ext.ErrNotFound) {
			t.Errorf("tasks/get of an unknown task: %v; want ErrNotFound", err)
		}
		if _, err := th.HandleTask(ctx, &ext.TaskRequest{User: user, Method: ext.MethodTaskList, Params: json.RawMessage(`{}`), Session: sess}); err != nil {
			t.Errorf("tasks/list: %v", err)
		}
	}
	if d.Has(ext.CapabilitySessions) {
		if err := e.(ext.SessionListener).SessionNotify(ctx, user, ext.MethodRootsChanged, json.RawMessage(`{}`)); err != nil {
			t.Errorf("SessionNotify(%s): %v", ext.MethodRootsChanged, err)
		}
	}
	if d.Has(ext.CapabilityAuth) {
		checkAuth(ctx, t, e.(ext.Authorizer), d.Name, user)
	}
}

// checkAuth checks the "auth" capability: a sign-in to a resource the
// user does not have is refused (not found, or invalid), without a URL,
// and a redirect that names no flow the extension started is refused as
// invalid, its query never echoed in the error.
func checkAuth(ctx context.Context, t *testing.T, a ext.Authorizer, extName, user string) {
	t.Helper()
	res, err := a.BeginAuth(ctx, &ext.BeginAuthRequest{User: user, Name: "no-such-resource-" + extName,
		RedirectURL: "https://host.example/oauth/callback", ClientMetadataURL: "https://host.example/oauth/client-metadata.json"})
	switch {
	case err == nil:
		t.Errorf("BeginAuth for an unknown resource gave %+v; want ErrNotFound or ErrInvalidArgument", res)
	case !errors.Is(err, ext.ErrNotFound) && !errors.Is(err, ext.ErrInvalidArgument):
		t.Errorf("BeginAuth for an unknown resource: %v; want ErrNotFound or ErrInvalidArgument", err)
	}
	const code = "conformance-code-4f1e9a"
	_, err = a.CompleteAuth(ctx, &ext.CompleteAuthRequest{User: user, Name: "no-such-resource-" + extName,
		State: "no-such-state", Query: "code=" + code + "&state=no-such-state"})
	switch {
	case !errors.Is(err, ext.ErrInvalidArgument):
		t.Errorf("CompleteAuth of an unknown state: %v; want ErrInvalidArgument", err)
	case strings.Contains(err.Error(), code):
		t.Errorf("CompleteAuth's error %q holds the authorization code", err)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func checkDescriptor(t *testing.T, d *ext.Descriptor, impl ext.Extension) {
	t.Helper()
	if d == nil {
		t.Fatal("Describe returned nil")
	}
	if d.Name == "" || strings.ContainsAny(d.Name, "/ ") {
		t.Errorf("descriptor name %q: want a non-empty name without '/' or spaces", d.Name)
	}
	implements := map[ext.Capability]bool{}
	_, implements[ext.CapabilityTools] = impl.(ext.ToolCaller)
	_, implements[ext.CapabilityUsers] = impl.(ext.UserLifecycle)
	_, implements[ext.CapabilityServices] = impl.(ext.ServiceProvider)
	_, implements[ext.CapabilityStatus] = impl.(ext.StatusReporter)
	_, implements[ext.CapabilityPrompts] = impl.(ext.PromptProvider)
	_, implements[ext.CapabilityResources] = impl.(ext.ResourceProvider)
	_, implements[ext.CapabilityCompletions] = impl.(ext.Completer)
	_, implements[ext.CapabilityTasks] = impl.(ext.TaskHandler)
	_, implements[ext.CapabilitySessions] = impl.(ext.SessionListener)
	_, implements[ext.CapabilityAuth] = impl.(ext.Authorizer)
	_, implements[ext.CapabilityValidate] = impl.(ext.SettingsValidator)
	_, implements[ext.CapabilityActions] = impl.(ext.ActionRunner)
	_, implements[ext.CapabilityUserTools] = impl.(ext.UserToolsWatcher)
	seen := map[ext.Capability]bool{}
	for _, c := range d.Capabilities {
		if !capabilityName.MatchString(string(c)) {
			t.Errorf("capability %q is not a lowercase word", c)
		}
		if seen[c] {
			t.Errorf("capability %q listed twice", c)
		}
		seen[c] = true
		if ok, known := implements[c]; known && !ok {
			t.Errorf("descriptor lists %q but the extension does not implement its interface", c)
		}
	}
	for c, ok := range implements {
		if ok && !seen[c] {
			t.Errorf("the extension implements the %q interface but its descriptor does not list it: the host will never call it", c)
		}
	}
	ids := map[string]bool{}
	for _, s := range d.Settings {
		if s.ID == "" || ids[s.ID] {
			t.Errorf("settings section id %q: want unique and non-empty", s.ID)
		}
		ids[s.ID] = true
		if s.Scope != "user" && s.Scope != "system" {
			t.Errorf("settings section %q: scope %q, want user or system", s.ID, s.Scope)
		}
		var form struct {
			V    int             `json:"v"`
			Root json.RawMessage `json:"root"`
		}
		if err := json.Unmarshal(s.Form, &form); err != nil || form.V != 1 || len(form.Root) == 0 {
			t.Errorf("settings section %q: form %s is not a descriptor v1 form {v:1, root}", s.ID, s.Form)
		}
	}
}

func checkTools(t *testing.T, tools []ext.Tool) {
	t.Helper()
	names := map[string]bool{}
	for _, tool := range tools {
		if tool.Name == "" || names[tool.Name] {
			t.Errorf("tool name %q: want unique and non-empty", tool.Name)
		}
		names[tool.Name] = true
		switch tool.Exposure {
		case "", ext.ExposureDirect, ext.ExposureDeferred, ext.ExposureCodemode:
		default:
			t.Errorf("tool %q: unknown exposure %q", tool.Name, tool.Exposure)
		}
		switch tool.Replay {
		case "", ext.ReplaySafe, ext.ReplayUnsafe:
		default:
			t.Errorf("tool %q: unknown replay %q", tool.Name, tool.Replay)
		}
		if len(tool.InputSchema) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
				t.Errorf("tool %q: input schema is not a JSON object: %v", tool.Name, err)
			} else if typ, ok := schema["type"]; ok && typ != "object" {
				t.Errorf("tool %q: input schema type %v, want object", tool.Name, typ)
			}
		}
	}
}
