package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agenthost/agenthost/ext"
	"github.com/evanw/esbuild/pkg/api"
	"github.com/go-sourcemap/sourcemap"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// Version is the extension's version, stamped by the build.
var Version = "dev"

// ToolName is code mode's tool (code__run on /mcp).
const ToolName = "code/run"

// SectionSettings is the user's settings section: the switch.
const SectionSettings = "codemode"

// Config is the operator's config block of the extension. Zero fields
// take the defaults.
type Config struct {
	// Exposures are the exposures of the tools code may call (default
	// ["codemode"]; add "direct" and "deferred" to let code reach those
	// too).
	Exposures []ext.Exposure `json:"exposures,omitempty"`
	// OpenServers are the servers whose tools that may change things (not
	// readOnlyHint, or destructiveHint) code may call; elsewhere only
	// read-only tools. "*" opens every server.
	OpenServers []string `json:"openServers,omitempty"`
	// Default is whether code mode is on for a user who did not choose
	// (default true); UserSwitch lets users turn it off and on (default
	// true); when false, Default holds for everyone.
	Default    *bool `json:"default,omitempty"`
	UserSwitch *bool `json:"userSwitch,omitempty"`
	// The limits of a run.
	WallClockSeconds float64 `json:"wallClockSeconds,omitempty"`
	CPUSeconds       float64 `json:"cpuSeconds,omitempty"`
	MemoryMiB        int     `json:"memoryMiB,omitempty"`
	MaxOutputBytes   int     `json:"maxOutputBytes,omitempty"`
	MaxCalls         int     `json:"maxCalls,omitempty"`
	MaxParallel      int     `json:"maxParallel,omitempty"`
	// MaxRuns caps the runs at once in the process (default 4): with the
	// memory cap, it bounds what code mode can take of the machine.
	MaxRuns int `json:"maxRuns,omitempty"`
	// DescriptionBytes is the budget of code/run's description (default
	// 8192): past it the declarations are left out for search_tools.
	DescriptionBytes int `json:"descriptionBytes,omitempty"`
}

// limits returns the run limits of c.
func (c *Config) limits() Limits {
	return Limits{
		WallClock: time.Duration(c.WallClockSeconds * float64(time.Second)), CPU: time.Duration(c.CPUSeconds * float64(time.Second)),
		MemoryBytes: int64(c.MemoryMiB) << 20, OutputBytes: c.MaxOutputBytes, Calls: c.MaxCalls, Parallel: c.MaxParallel,
	}.withDefaults()
}

func (c *Config) validate() error {
	var errs []error
	for _, x := range c.Exposures {
		switch x {
		case ext.ExposureCodemode, ext.ExposureDirect, ext.ExposureDeferred:
		default:
			errs = append(errs, fmt.Errorf("exposures: %q is not codemode, direct or deferred", x))
		}
	}
	if c.WallClockSeconds < 0 || c.CPUSeconds < 0 || c.MemoryMiB < 0 || c.MaxOutputBytes < 0 || c.MaxCalls < 0 || c.MaxParallel < 0 || c.MaxRuns < 0 || c.DescriptionBytes < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	if c.MemoryMiB > 4096 {
		errs = append(errs, errors.New("memoryMiB: at most 4096"))
	}
	return errors.Join(errs...)
}

// Extension is code mode. Its methods are called concurrently; per user
// state is under mu, runs are bounded by a semaphore.
type Extension struct {
	mu    sync.Mutex
	host  ext.Host
	cfg   Config
	runs  chan struct{}
	tools map[string][]ext.Tool // user → the tools the host told (others')
}

// New returns the extension.
func New() *Extension { return &Extension{tools: map[string][]ext.Tool{}} }

var (
	_ ext.ToolCaller       = (*Extension)(nil)
	_ ext.UserLifecycle    = (*Extension)(nil)
	_ ext.UserToolsWatcher = (*Extension)(nil)
)

const settingsForm = `{"v":1,"root":{"type":"form","children":[{"type":"toggle","name":"enabled","label":"Code mode: let the agent run scripts that call your tools","default":true}]}}`

// Describe implements [ext.Extension].
func (e *Extension) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{
		Name: "code", Version: Version,
		Capabilities: []ext.Capability{ext.CapabilityTools, ext.CapabilityUsers, ext.CapabilityUserTools, ext.CapabilityCallerTools},
		Settings: []ext.SettingsSection{{ID: SectionSettings, Title: "Code mode", Scope: "user",
			Description: "Code mode lets your agent write a short script that calls your tools (code__run). Turn it off to keep every call one by one.",
			Form:        json.RawMessage(settingsForm)}},
	}, nil
}

// Configure implements [ext.Extension].
func (e *Extension) Configure(_ context.Context, req *ext.ConfigureRequest) error {
	var c Config
	if len(req.Config) > 0 && string(req.Config) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(req.Config)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("code mode config: %w", ext.Mark(err, ext.ErrInvalidArgument))
		}
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("code mode config: %w", ext.Mark(err, ext.ErrInvalidArgument))
	}
	if len(c.Exposures) == 0 {
		c.Exposures = []ext.Exposure{ext.ExposureCodemode}
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = 4
	}
	if c.DescriptionBytes == 0 {
		c.DescriptionBytes = 8192
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = int(DefaultLimits.MemoryBytes >> 20)
	}
	e.mu.Lock()
	e.host, e.cfg, e.runs = req.Host, c, make(chan struct{}, c.MaxRuns)
	e.mu.Unlock()
	raiseProcs(c.MaxRuns)
	return nil
}

// raiseProcs makes room for runs scripts at idle priority: a script's
// thread that a busy machine starves keeps its Go P (GOMAXPROCS) until the
// kernel runs it, so with one P per CPU a few such scripts would leave the
// process's other goroutines (other users' inner calls, the call channel)
// none. GOMAXPROCS is raised to the CPUs plus runs, once and never
// lowered (process-wide: an embedding program keeps at least its own).
func raiseProcs(runs int) {
	if want := runtime.NumCPU() + runs; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// Shutdown implements [ext.Extension].
func (e *Extension) Shutdown(context.Context) error { return nil }

// reachable reports whether code may call t under the operator's policy.
func (c *Config) reachable(t ext.Tool) bool {
	x := t.Exposure
	if x == "" {
		x = ext.ExposureDirect
	}
	if !slices.Contains(c.Exposures, x) {
		return false
	}
	if readOnly(t.Annotations) {
		return true
	}
	server, _, _ := strings.Cut(t.Name, "/")
	return slices.Contains(c.OpenServers, server) || slices.Contains(c.OpenServers, "*")
}

// readOnly reports whether annotations say readOnlyHint and not
// destructiveHint.
func readOnly(ann json.RawMessage) bool {
	var a struct {
		ReadOnly    bool  `json:"readOnlyHint"`
		Destructive *bool `json:"destructiveHint"`
	}
	if json.Unmarshal(ann, &a) != nil {
		return false
	}
	return a.ReadOnly && (a.Destructive == nil || !*a.Destructive)
}

// enabled reads the user's switch under the operator's rule.
func (e *Extension) enabled(ctx context.Context, h ext.Host, c *Config, user string) bool {
	on := c.Default == nil || *c.Default
	if c.UserSwitch != nil && !*c.UserSwitch {
		return on
	}
	raw, err := h.UserStore(user).Settings().Get(ctx, SectionSettings)
	if err != nil {
		return on
	}
	var v struct {
		Enabled *bool `json:"enabled"`
	}
	if json.Unmarshal(raw, &v) == nil && v.Enabled != nil {
		return *v.Enabled
	}
	return on
}

// UserToolsChanged implements [ext.UserToolsWatcher].
func (e *Extension) UserToolsChanged(ctx context.Context, user string, tools []ext.Tool) error {
	e.mu.Lock()
	e.tools[user] = tools
	e.mu.Unlock()
	return e.publish(ctx, user)
}

// Activate implements [ext.UserLifecycle]: the user's switch may have
// changed.
func (e *Extension) Activate(ctx context.Context, user string) error { return e.publish(ctx, user) }

// Retire implements [ext.UserLifecycle].
func (e *Extension) Retire(ctx context.Context, user, name string) error {
	if name != "" {
		return nil
	}
	e.mu.Lock()
	delete(e.tools, user)
	h := e.host
	e.mu.Unlock()
	return h.SetUserTools(ctx, user, nil)
}

// ReconcileAll implements [ext.UserLifecycle].
func (e *Extension) ReconcileAll(ctx context.Context) error {
	e.mu.Lock()
	users := make([]string, 0, len(e.tools))
	for u := range e.tools {
		users = append(users, u)
	}
	e.mu.Unlock()
	var errs []error
	for _, u := range users {
		errs = append(errs, e.publish(ctx, u))
	}
	return errors.Join(errs...)
}

// publish offers code/run to user when code mode is on for them and they
// have a tool code may call; else withdraws it.
func (e *Extension) publish(ctx context.Context, user string) error {
	e.mu.Lock()
	h, c, all := e.host, e.cfg, e.tools[user]
	e.mu.Unlock()
	if h == nil {
		return fmt.Errorf("code mode is not configured: %w", ext.ErrUnavailable)
	}
	var reach []ext.Tool
	for _, t := range all {
		if c.reachable(t) {
			reach = append(reach, t)
		}
	}
	if len(reach) == 0 || !e.enabled(ctx, h, &c, user) {
		return h.SetUserTools(ctx, user, nil)
	}
	return h.SetUserTools(ctx, user, []ext.Tool{RunTool(reach, c.DescriptionBytes, c.limits())})
}

const runSchema = `{"type":"object","properties":{"code":{"type":"string","description":"The body of an async JavaScript (or TypeScript) function: await tools.<server>.<tool>(args), console.log(...), return a JSON value."}},"required":["code"]}`

const runOutput = `{"type":"object","properties":{"value":{},"logs":{"type":"array","items":{"type":"string"}},"calls":{"type":"array","items":{"type":"object","properties":{"tool":{"type":"string"},"outcome":{"type":"string"},"error":{"type":"string"},"ms":{"type":"number"}}}},"error":{"type":"object","properties":{"message":{"type":"string"},"line":{"type":"number"},"limit":{"type":"string"}}}},"required":["calls"]}`

// RunTool returns code/run's definition for tools: its description holds
// their declarations when they fit in budget bytes; past it, their names
// and a pointer to search_tools.
func RunTool(tools []ext.Tool, budget int, lim Limits) ext.Tool {
	head := fmt.Sprintf("Run a script that calls the user's tools: the body of an async JavaScript function (TypeScript types allowed). "+
		"Each tool is an async function tools.<server>.<tool>(args) (names with other characters than letters, digits, _ and $ have them as _), "+
		"or tools.call(\"server/tool\", args); it resolves to the tool's structured result, else its text, and throws an Error with the tool's message when it fails. "+
		"Arguments are checked against the tool's schema before the call. console.log lines and the returned JSON value make up the result, with the list of calls made and their outcome. "+
		"No network, files or timers. Limits: %v wall clock, %v CPU, %d MiB memory, %d calls (%d at once), %d bytes of output.\n\n",
		lim.WallClock, lim.CPU, lim.MemoryBytes>>20, lim.Calls, lim.Parallel, lim.OutputBytes)
	parts := append([]ext.DescriptionPart{{Text: head + "```ts\n"}}, declParts(tools)...)
	parts = append(parts, ext.DescriptionPart{Text: "```"})
	d := &ext.ScopedDescription{Parts: parts}
	desc, _ := d.Render(nil)
	if len(desc) > budget {
		// The names, each a part of its own, so that a scoped view lists
		// only its own.
		d.Parts = []ext.DescriptionPart{{Text: head + "The tools' declarations do not fit here: search_tools (by keyword) finds them with their input schemas (marked only from code); call one with tools.call(name, args). Tools:"}}
		for _, t := range tools {
			d.Parts = append(d.Parts, ext.DescriptionPart{Text: " " + t.Name, Tools: []string{t.Name}})
		}
		desc, _ = d.Render(nil)
		if len(desc) > budget {
			cut := max(0, budget-len("…"))
			for cut > 0 && !utf8.RuneStart(desc[cut]) {
				cut--
			}
			desc = desc[:cut] + "…"
			// Past the budget even so: a scoped view gets the head
			// and no names.
			names := make([]string, len(tools))
			for i, t := range tools {
				names[i] = t.Name
			}
			d.Parts = append(d.Parts[:1], ext.DescriptionPart{Tools: names})
		}
	}
	t := ext.Tool{
		Name: ToolName, Title: "Run code with your tools", Description: desc,
		InputSchema: json.RawMessage(runSchema), OutputSchema: json.RawMessage(runOutput),
		Annotations: json.RawMessage(`{"readOnlyHint":false,"openWorldHint":false}`),
	}
	// The description in parts: a scoped token's view shows only the
	// declarations of its tools (the host assembles them per view).
	if st, err := ext.WithScopedDescription(t, d); err == nil {
		t = st
	}
	return t
}

// StripTypes returns code with its TypeScript types stripped (esbuild),
// for code that is not plain JavaScript.
func StripTypes(code string) (string, error) {
	js, _, err := stripTypes(code)
	return js, err
}

// stripTypes is [StripTypes] with the map from a line of the stripped code
// back to the user's line (esbuild's source map: its output is
// reformatted, so lines move; 0 when a line maps to none).
func stripTypes(code string) (string, func(int) int, error) {
	src := "async function __ah_body() {\n" + code + "\n}"
	r := api.Transform(src, api.TransformOptions{Loader: api.LoaderTS, Target: api.ES2020, Sourcemap: api.SourceMapExternal, Sourcefile: "code.ts"})
	if len(r.Errors) > 0 {
		m := r.Errors[0]
		line := 0
		if m.Location != nil {
			line = m.Location.Line - 1
		}
		return "", nil, fmt.Errorf("line %d: %s", line, m.Text)
	}
	out := string(r.Code)
	i, j := strings.Index(out, "{"), strings.LastIndex(out, "}")
	if i < 0 || j <= i {
		return "", nil, errors.New("stripping types gave no function body")
	}
	// Line n of the body is line n+skip of esbuild's output, whose line
	// maps to a line of src, one below the user's (the wrapper's line).
	skip := strings.Count(out[:i+1], "\n")
	sm, err := sourcemap.Parse("code.js.map", r.Map)
	if err != nil {
		return "", nil, fmt.Errorf("reading esbuild's source map: %w", err)
	}
	lineOf := func(n int) int {
		if n <= 0 {
			return 0
		}
		// The last mapping on the line (the first may be the previous
		// line's, by the library's fuzzy match).
		if _, _, line, _, ok := sm.Source(n+skip, 1<<30); ok && line > 1 {
			return line - 1
		}
		return 0
	}
	return out[i+1 : j], lineOf, nil
}

// validator checks arguments against tools' input schemas; compiled
// schemas are kept per schema text.
type validator struct {
	mu sync.Mutex
	m  map[string]*jsonschema.Schema
}

var schemas = &validator{m: map[string]*jsonschema.Schema{}}

func (v *validator) check(schema json.RawMessage, args json.RawMessage) error {
	if len(schema) == 0 {
		return nil
	}
	v.mu.Lock()
	sch := v.m[string(schema)] // looked up without copying the schema
	v.mu.Unlock()
	if sch == nil {
		key := string(schema)
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(key))
		if err != nil {
			return nil // a schema we cannot read is the server's to enforce
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("tool.json", doc); err != nil {
			return nil
		}
		if sch, err = c.Compile("tool.json"); err != nil {
			return nil
		}
		v.mu.Lock()
		if len(v.m) > 4096 {
			clear(v.m)
		}
		v.m[key] = sch
		v.mu.Unlock()
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("the arguments are not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return errors.New(validationText(ve))
		}
		return err
	}
	return nil
}

// validationText words a validation error by its innermost causes, each
// naming the field ("/to: missing property" style).
func validationText(ve *jsonschema.ValidationError) string {
	var parts []string
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			field := "/" + strings.Join(e.InstanceLocation, "/")
			parts = append(parts, fmt.Sprintf("at %s: %s", field, e.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	if len(parts) > 5 {
		parts = append(parts[:5], "…")
	}
	return strings.Join(parts, "; ")
}

// CallTool implements [ext.ToolCaller]: code/run.
func (e *Extension) CallTool(ctx context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	if req.Name != ToolName {
		return nil, fmt.Errorf("tool %q: %w", req.Name, ext.ErrNotFound)
	}
	var in struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(req.Arguments, &in); err != nil || strings.TrimSpace(in.Code) == "" {
		return ext.ErrorResult(`code/run takes {"code": "<the body of an async function>"}`), nil
	}
	e.mu.Lock()
	h, c, runs := e.host, e.cfg, e.runs
	e.mu.Unlock()
	ct, ok := h.(ext.CallerTools)
	if !ok || req.Caller == "" {
		return nil, fmt.Errorf("this host cannot call tools as the caller: %w", ext.ErrUnavailable)
	}
	if !e.enabled(ctx, h, &c, req.User) {
		return ext.ErrorResult("code mode is off for you (your settings, section Code mode)"), nil
	}
	select {
	case runs <- struct{}{}:
		defer func() { <-runs }()
	default:
		return ext.ErrorResult("code mode is busy: %d scripts run already (limit maxRuns); try again shortly", cap(runs)), nil
	}
	listed, err := ct.ListCallerTools(ctx, req.Caller)
	if err != nil {
		return nil, fmt.Errorf("listing the caller's tools: %w", err)
	}
	byName := map[string]ext.Tool{}
	var names []string
	for _, t := range listed {
		if c.reachable(t) {
			byName[t.Name] = t
			names = append(names, t.Name)
		}
	}
	sess := ext.SessionOf(req.Session)
	call := func(ctx context.Context, name string, args json.RawMessage) (*InnerResult, error) {
		t, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("tool %q: %w", name, ext.ErrNotFound)
		}
		if err := schemas.check(t.InputSchema, args); err != nil {
			return nil, fmt.Errorf("arguments of %s refused before the call: %v: %w", name, err, ext.ErrInvalidArgument)
		}
		res, err := ct.CallCallerTool(ctx, &ext.CallerCallRequest{Caller: req.Caller, Name: name, Arguments: args})
		if err != nil {
			return nil, err
		}
		b, err := res.JSON()
		if err != nil {
			return nil, err
		}
		return &InnerResult{Raw: b, IsError: res.IsError}, nil
	}
	progress := func(n int, ic InnerCall) {
		if len(req.ProgressToken) > 0 {
			_ = ext.Progress(ctx, sess, float64(n), 0, ic.Tool+": "+ic.Outcome)
		}
	}
	return runResult(runCode(ctx, in.Code, names, c.limits(), call, progress))
}

// runCode runs code, JavaScript or TypeScript (types stripped), with
// [Run]; a TypeScript script's error names the user's line, not the
// stripped code's.
func runCode(ctx context.Context, code string, names []string, lim Limits, call CallFunc, progress func(int, InnerCall)) *Outcome {
	var lineOf func(int) int // the user's line of a line of code (TypeScript)
	if _, err := compileCheck(code); err != nil {
		stripped, m, serr := stripTypes(code)
		if serr != nil {
			return &Outcome{Calls: []InnerCall{}, Error: &ScriptError{Message: "the code is neither JavaScript nor TypeScript: " + err.Error()}}
		}
		code, lineOf = stripped, m
	}
	o := Run(ctx, code, names, lim, call, progress)
	if o.Error != nil && o.Error.Line > 0 && lineOf != nil {
		o.Error.Line = lineOf(o.Error.Line)
	}
	return o
}

// compileCheck reports whether code parses as JavaScript (as Run wraps it).
func compileCheck(code string) (bool, error) {
	r := api.Transform("(async () => {"+code+"\n})", api.TransformOptions{Loader: api.LoaderJS})
	if len(r.Errors) > 0 {
		return false, errors.New(r.Errors[0].Text)
	}
	return true, nil
}

// runResult is code/run's result: a text summary and the outcome as
// structuredContent, the inner results' other blocks after it; isError
// when the script failed.
func runResult(o *Outcome) (*ext.CallToolResult, error) {
	sc, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encoding the outcome: %w", err)
	}
	var text strings.Builder
	if o.Error != nil {
		fmt.Fprintf(&text, "Error: %s", o.Error.Message)
		if o.Error.Line > 0 {
			fmt.Fprintf(&text, " (line %d)", o.Error.Line)
		}
		text.WriteString("\n")
	}
	for _, l := range o.Logs {
		text.WriteString(l + "\n")
	}
	if len(o.Value) > 0 {
		text.WriteString("Result: " + string(o.Value) + "\n")
	}
	fmt.Fprintf(&text, "Calls (%d):", len(o.Calls))
	for _, c := range o.Calls {
		fmt.Fprintf(&text, " %s %s;", c.Tool, c.Outcome)
	}
	tb, _ := json.Marshal(map[string]string{"type": "text", "text": text.String()})
	content := append([]json.RawMessage{tb}, o.Content...)
	cb, _ := json.Marshal(content)
	r := map[string]json.RawMessage{"content": cb, "structuredContent": sc}
	if o.Error != nil {
		r["isError"] = json.RawMessage("true")
	}
	b, _ := json.Marshal(r)
	return ext.RawResult(b)
}
