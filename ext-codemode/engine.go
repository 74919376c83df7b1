package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/agenthost/ext/mcpwire"
	"modernc.org/quickjs"
)

// Limits bound one script run. Zero fields take the defaults of
// [DefaultLimits].
type Limits struct {
	// WallClock bounds the whole run, inner calls included.
	WallClock time.Duration
	// CPU bounds the time spent running JavaScript (inner calls excluded).
	CPU time.Duration
	// MemoryBytes is the engine's heap cap (QuickJS's own allocator limit).
	MemoryBytes int64
	// OutputBytes caps console output plus the returned value plus the
	// content blocks passed on.
	OutputBytes int
	// Calls caps the inner calls of a run; Parallel those running at once
	// (more wait their turn).
	Calls, Parallel int
}

// DefaultLimits are the limits an operator gets by default.
var DefaultLimits = Limits{
	WallClock: 60 * time.Second, CPU: 10 * time.Second, MemoryBytes: 128 << 20,
	OutputBytes: 64 << 10, Calls: 50, Parallel: 4,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.WallClock <= 0 {
		l.WallClock = d.WallClock
	}
	if l.CPU <= 0 {
		l.CPU = d.CPU
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = d.OutputBytes
	}
	if l.Calls <= 0 {
		l.Calls = d.Calls
	}
	if l.Parallel <= 0 {
		l.Parallel = d.Parallel
	}
	return l
}

// InnerResult is what an inner call returned: the MCP result object, raw.
type InnerResult struct {
	Raw     json.RawMessage
	IsError bool
}

// CallFunc makes one inner call. An error means the call was not made or
// failed outside the tool (refused, not found, invalid arguments); a
// tool's own failure is a result with IsError.
type CallFunc func(ctx context.Context, name string, args json.RawMessage) (*InnerResult, error)

// InnerCall is one inner call of a run, as the result reports it.
type InnerCall struct {
	Tool string `json:"tool"`
	// Outcome is "ok", "tool error", "refused" (never made: arguments,
	// scope, limits) or "failed".
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	Ms      int64  `json:"ms"`
}

// ScriptError is why a run failed: the script's own exception (with its
// line when known) or the limit it hit (Limit names the setting).
type ScriptError struct {
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
	Limit   string `json:"limit,omitempty"`
}

// Outcome is what a run produced.
type Outcome struct {
	Value json.RawMessage `json:"value,omitempty"`
	Logs  []string        `json:"logs,omitempty"`
	Calls []InnerCall     `json:"calls"`
	Error *ScriptError    `json:"error,omitempty"`
	// Content are the non-text content blocks of inner results (images,
	// audio, resources), passed on to the outer result.
	Content []json.RawMessage `json:"-"`
}

// limitError is a run ended by a limit.
func limitError(limit, format string, a ...any) *ScriptError {
	return &ScriptError{Limit: limit, Message: fmt.Sprintf(format, a...) + " (limit " + limit + ")"}
}

// The script's view: the prelude hides the host functions in a closure and
// builds tools, console and the promise table; the wrapper runs the body
// as an async function on the first line, so that lines match the code.
// The prelude's value is the settle function, which Run holds and calls
// for each finished inner call (never a global: a script cannot reach it).
const prelude = `(() => {
const start = globalThis.__ah_start, log = globalThis.__ah_log, done = globalThis.__ah_done, names = JSON.parse(globalThis.__ah_names);
delete globalThis.__ah_start; delete globalThis.__ah_log; delete globalThis.__ah_done; delete globalThis.__ah_names;
delete globalThis.eval;
const pending = new Map();
const settle = (id, ok, payload) => {
  const p = pending.get(id); pending.delete(id);
  if (!p) return;
  if (ok) { p.resolve(JSON.parse(payload)); return; }
  // No stack: the engine writes one where the rejection is thrown into
  // the script (its await), naming the script's line.
  const e = new Error(payload); delete e.stack; p.reject(e);
};
const fmt = (v) => { if (typeof v === "string") return v; try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; } catch (e) { return String(v); } };
const out = (...a) => log(a.map(fmt).join(" "));
globalThis.console = Object.freeze({log: out, info: out, warn: out, error: out, debug: out});
const call = function ahCall(name, args) {
  return new Promise((resolve, reject) => {
    const id = start(String(name), JSON.stringify(args === undefined ? {} : args));
    pending.set(id, {resolve, reject});
  });
};
const tools = {call};
for (const [server, tool, full] of names) {
  if (server === "call") continue;
  const s = tools[server] || (tools[server] = {});
  s[tool] = function ahTool(args) { return call(full, args); };
}
for (const k of Object.keys(tools)) if (k !== "call") Object.freeze(tools[k]);
Object.defineProperty(globalThis, "tools", {value: Object.freeze(tools)});
Object.defineProperty(globalThis, "__ah_run", {configurable: true, value: (f) => {
  delete globalThis.__ah_run;
  f().then((v) => done(true, v === undefined ? "null" : JSON.stringify(v)),
    (e) => done(false, (e && e.stack) ? String(e) + "\n" + e.stack : String(e)));
}});
return settle;
})();`

// runFile is the script's file name in stack traces.
const runFile = "<eval>"

// frameRE matches a stack frame in the script's file; frames of the
// prelude's own functions (ah*) are skipped.
var frameRE = regexp.MustCompile(`at (\S+) \(` + regexp.QuoteMeta(runFile) + `:(\d+)`)

// scriptLine returns the line of the first frame of the script's own code.
func scriptLine(stack string) int {
	for _, m := range frameRE.FindAllStringSubmatch(stack, -1) {
		if !strings.HasPrefix(m[1], "ah") {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}

type settled struct {
	id      int
	ok      bool
	refused bool // never given to a worker
	payload string
}

// job is an inner call waiting for a worker.
type job struct {
	id   int
	name string
	args json.RawMessage
	t0   time.Time
}

// runJob makes one inner call on a worker and records its outcome; a
// call queued when the run ended is not started.
func runJob(ctx context.Context, j job, call CallFunc, lim Limits, mu *sync.Mutex, out *Outcome, outBytes, ended *int, progress func(int, InnerCall)) settled {
	if ctx.Err() != nil {
		mu.Lock()
		out.Calls[j.id] = InnerCall{Tool: j.name, Outcome: "failed", Error: "not started: the run ended"}
		mu.Unlock()
		return settled{id: j.id, payload: "the run ended"}
	}
	res, err := call(ctx, j.name, j.args)
	s, ic, other := settle(j.id, res, err)
	ic.Tool, ic.Ms = j.name, time.Since(j.t0).Milliseconds()
	mu.Lock()
	out.Calls[j.id] = ic
	if res != nil && !res.IsError {
		for _, b := range other {
			if *outBytes+len(b) <= lim.OutputBytes {
				*outBytes += len(b)
				out.Content = append(out.Content, b)
			}
		}
	}
	*ended++
	n := *ended
	mu.Unlock()
	if progress != nil {
		progress(n, ic)
	}
	return s
}

// Run runs code (the body of an async JavaScript function) with the tools
// named (host names, "server/tool") callable through call, within lim.
// progress, when set, is told of each inner call as it ends. Run returns
// when the script settled, failed or hit a limit, after every inner call
// it started has returned.
//
// One goroutine of its own drives the engine; once the script has
// computed for 10 ms, on an OS thread at the lowest CPU priority
// (engineThread: SCHED_IDLE on Linux), so that it computes only on CPU
// nobody else wants, the goroutine locked to that thread for good so that
// it ends with the run instead of going back to Go's pool at that
// priority. Inner calls run on at most lim.Parallel workers at normal
// priority (a call holds locks shared with other users' calls, which a
// starved thread must not). Run waits for all of them.
func Run(ctx context.Context, code string, names []string, lim Limits, call CallFunc, progress func(done int, c InnerCall)) *Outcome {
	var (
		out      *Outcome
		panicked any
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		defer func() { panicked = recover() }()
		out = run(ctx, code, names, lim, call, progress)
	}()
	<-done
	if panicked != nil {
		panic(panicked) // on the caller's goroutine, as when it ran there
	}
	return out
}

// engineThreadHook, when set (tests), is called on the engine's thread by
// each console output of a script.
var engineThreadHook func()

// run is Run on the engine's goroutine.
func run(ctx context.Context, code string, names []string, lim Limits, call CallFunc, progress func(done int, c InnerCall)) *Outcome {
	lim = lim.withDefaults()
	out := &Outcome{Calls: []InnerCall{}}
	ctx, cancel := context.WithTimeoutCause(ctx, lim.WallClock, errWallClock)
	defer cancel()

	vm, err := quickjs.NewVM()
	if err != nil {
		out.Error = &ScriptError{Message: "starting the engine: " + err.Error()}
		return out
	}
	defer vm.Close()
	vm.SetMemoryLimit(uintptr(lim.MemoryBytes))
	// Not SetMaxStackSize: the engine's default catches deep recursion in
	// ~0.1 s, while a smaller setting took seconds and a larger one
	// overflowed the goroutine's stack (measured, quickjs v0.27.0).
	stopInterrupt := context.AfterFunc(ctx, vm.Interrupt)
	defer stopInterrupt()

	var (
		mu       sync.Mutex // guards out.Calls, out.Content, outBytes, ended from the workers
		outBytes int
		ended    int // inner calls with an outcome, for progress
		wg       sync.WaitGroup
		results  = make(chan settled, lim.Calls)
		jobs     = make(chan job, lim.Calls)
		started  int
		inflight int // calls started whose promise is not settled yet
		active   int // calls given to the workers whose result is not back yet
		workers  int
		finished bool
		abort    *ScriptError
		final    *ScriptError
	)
	// The workers: at most lim.Parallel, started as calls overlap and kept
	// for the run (a goroutine per call grew a fresh stack every call:
	// issue 22's profile). Run owns them: it closes jobs and waits.
	worker := func() {
		defer wg.Done()
		for j := range jobs {
			results <- runJob(ctx, j, call, lim, &mu, out, &outBytes, &ended, progress)
		}
	}
	defer wg.Wait()
	defer close(jobs)
	defer cancel() // inner calls end, and those queued are not started, before wg.Wait

	var triples [][3]string
	for _, n := range names {
		server, tool, _ := strings.Cut(n, "/")
		triples = append(triples, [3]string{Ident(server), Ident(tool), n})
	}
	nb, _ := json.Marshal(triples)
	allowed := make(map[string]bool, len(names))
	for _, n := range names {
		allowed[n] = true
	}

	reg := func(name string, fn quickjs.HostFunc) bool {
		if err := vm.RegisterHostFunc(name, fn); err != nil {
			out.Error = &ScriptError{Message: "starting the engine: " + err.Error()}
			return false
		}
		return true
	}
	if !reg("__ah_log", func(args []any) (any, error) {
		if engineThreadHook != nil {
			engineThreadHook()
		}
		s := fmt.Sprint(args...)
		mu.Lock()
		defer mu.Unlock()
		if outBytes+len(s) > lim.OutputBytes {
			if abort == nil {
				abort = limitError("maxOutputBytes", "the script's output passed %d bytes", lim.OutputBytes)
				vm.Interrupt()
			}
			return nil, errors.New(abort.Message)
		}
		outBytes += len(s)
		out.Logs = append(out.Logs, s)
		return nil, nil
	}) || !reg("__ah_done", func(args []any) (any, error) {
		finished = true
		ok, _ := args[0].(bool)
		s, _ := args[1].(string)
		if ok {
			out.Value = json.RawMessage(s)
			return nil, nil
		}
		msg, stack, _ := strings.Cut(s, "\n")
		final = scriptError(msg, lim)
		if final.Limit == "" {
			final.Line = scriptLine(stack)
		}
		return nil, nil
	}) || !reg("__ah_start", func(args []any) (any, error) {
		name, _ := args[0].(string)
		argJSON, _ := args[1].(string)
		if abort != nil {
			return nil, errors.New(abort.Message)
		}
		if started >= lim.Calls {
			abort = limitError("maxCalls", "the script made more than %d tool calls", lim.Calls)
			vm.Interrupt()
			return nil, errors.New(abort.Message)
		}
		id := started
		started++
		mu.Lock()
		out.Calls = append(out.Calls, InnerCall{Tool: name})
		mu.Unlock()
		if !allowed[name] {
			msg := fmt.Sprintf("tool %q is not one code may call here (see the tools in code/run's description)", name)
			mu.Lock()
			out.Calls[id].Outcome, out.Calls[id].Error = "refused", msg
			ended++
			mu.Unlock()
			inflight++
			results <- settled{id: id, payload: msg, refused: true}
			return id, nil
		}
		inflight++
		active++
		jobs <- job{id: id, name: name, args: json.RawMessage(argJSON), t0: time.Now()}
		if active > workers && workers < lim.Parallel {
			workers++
			wg.Add(1)
			go worker()
		}
		return id, nil
	}) {
		return out
	}
	if err := vm.SetProperty(vm.GlobalObject(), mustAtom(vm, "__ah_names"), string(nb)); err != nil {
		out.Error = &ScriptError{Message: "starting the engine: " + err.Error()}
		return out
	}

	// CPU: the CPU time the engine's thread spent in each entry, summed
	// (waiting for the CPU is not counted: see engineThread). Past
	// normalShare of it the run's JavaScript runs at idle priority.
	var cpu time.Duration
	thread := &engineThread{}
	defer thread.stop()
	enter := func(f func() error) error {
		left := lim.CPU - cpu
		if left <= 0 {
			return errCPU
		}
		var err error
		cpu += thread.do(cpu, left, vm, func() { err = f() })
		return err
	}
	fail := func(err error) *Outcome {
		switch {
		case abort != nil:
			out.Error = abort
		case errors.Is(context.Cause(ctx), errWallClock):
			out.Error = limitError("wallClockSeconds", "the script ran longer than %v", lim.WallClock)
		case ctx.Err() != nil:
			out.Error = &ScriptError{Message: "the call was cancelled: " + context.Cause(ctx).Error()}
		case cpu >= lim.CPU || errors.Is(err, errCPU):
			out.Error = limitError("cpuSeconds", "the script computed longer than %v", lim.CPU)
		default:
			out.Error = engineError(err, lim)
		}
		return out
	}

	// settleFn is held, not looked up: VM.Call would parse its name as a
	// script on every inner call (issue 22's profile).
	var settleFn quickjs.Value
	if err := enter(func() (err error) { settleFn, err = vm.EvalValue(prelude, quickjs.EvalGlobal); return err }); err != nil {
		return fail(err)
	}
	defer settleFn.Free()
	if err := enter(func() error { _, err := vm.Eval("__ah_run(async () => {"+code+"\n});", quickjs.EvalGlobal); return err }); err != nil {
		return fail(err)
	}
	for {
		if err := enter(func() error { _, err := vm.ExecutePendingJobs(); return err }); err != nil || abort != nil || ctx.Err() != nil {
			return fail(err)
		}
		if finished {
			break
		}
		if inflight == 0 {
			out.Error = &ScriptError{Message: "the script awaits a promise that nothing can settle (only tool calls settle promises here: there are no timers)"}
			return out
		}
		select {
		case s := <-results:
			inflight--
			if !s.refused {
				active--
			}
			if err := enter(func() error { _, err := settleFn.Call(quickjs.UndefinedValue, s.id, s.ok, s.payload); return err }); err != nil {
				return fail(err)
			}
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	if final != nil {
		out.Error = final
		return out
	}
	mu.Lock()
	defer mu.Unlock()
	if outBytes+len(out.Value) > lim.OutputBytes {
		out.Value = nil
		out.Error = limitError("maxOutputBytes", "the returned value passed %d bytes with the output", lim.OutputBytes)
	}
	return out
}

var (
	errWallClock = errors.New("the wall-clock limit passed")
	errCPU       = errors.New("the CPU budget is spent")
)

// engineError words an error of the engine: out of memory and stack
// overflow name their limits.
func engineError(err error, lim Limits) *ScriptError {
	if err == nil {
		return &ScriptError{Message: "the script failed"}
	}
	se := scriptError(err.Error(), lim)
	var qe *quickjs.Error
	if errors.As(err, &qe) && se.Limit == "" {
		se.Line = qe.LineNumber
		if n := scriptLine(qe.Stack); n > 0 {
			se.Line = n
		}
	}
	return se
}

// scriptError words an exception's message: the engine's own limits are
// named.
func scriptError(msg string, lim Limits) *ScriptError {
	switch {
	case strings.Contains(msg, "out of memory"):
		return limitError("memoryMiB", "the script ran out of memory (%d MiB)", lim.MemoryBytes>>20)
	case strings.Contains(msg, "stack overflow"):
		return limitError("stack", "the script recursed too deep (the engine's stack limit)")
	case strings.Contains(msg, "invalid string length"), strings.Contains(msg, "invalid array length"):
		return limitError("memoryMiB", "%s: a string or array longer than the engine holds", strings.TrimSpace(msg))
	case strings.Contains(msg, "interrupted"):
		return limitError("cpuSeconds", "the script was interrupted")
	}
	return &ScriptError{Message: msg}
}

func mustAtom(vm *quickjs.VM, s string) quickjs.Atom {
	a, _ := vm.NewAtom(s)
	return a
}

// settle turns an inner call's result into what its promise gets: the
// structuredContent when there is one, else the text; the tool's message
// as the rejection when isError. other are the result's non-text content
// blocks (images, audio, resources), from the same one reading of the
// result.
func settle(id int, res *InnerResult, err error) (s settled, ic InnerCall, other []json.RawMessage) {
	s = settled{id: id}
	if err != nil {
		outcome := "failed"
		if refusedErr(err) {
			outcome = "refused"
		}
		s.payload = err.Error()
		return s, InnerCall{Outcome: outcome, Error: err.Error()}, nil
	}
	content, structured := resultFields(res.Raw)
	var text []json.RawMessage // the text blocks' texts, JSON strings
	for _, b := range content {
		typ, txt, ok := blockFields(b)
		if !ok {
			continue
		}
		if typ == "text" {
			text = append(text, txt)
		} else {
			other = append(other, b)
		}
	}
	if res.IsError {
		joined := joinText(text)
		if joined == "" {
			joined = "the tool failed"
		}
		s.payload = joined
		return s, InnerCall{Outcome: "tool error", Error: joined}, nil
	}
	s.ok = true
	switch {
	case len(structured) > 0 && string(structured) != "null":
		s.payload = string(structured)
	case len(text) == 1:
		s.payload = string(text[0]) // a JSON string already
	default:
		b, _ := json.Marshal(joinText(text))
		s.payload = string(b)
	}
	return s, InnerCall{Outcome: "ok"}, other
}

// resultFields reads an MCP result's content blocks and structuredContent
// in place (ext/mcpwire's scanner; encoding/json when the scanner declines
// it). Invalid JSON has neither.
func resultFields(raw json.RawMessage) (content []json.RawMessage, structured json.RawMessage) {
	if !json.Valid(raw) {
		return nil, nil
	}
	var c []byte
	ok := mcpwire.ObjectFields(raw, func(k, v []byte) bool {
		switch string(k) {
		case "content":
			return mcpwire.Once(&c, v)
		case "structuredContent":
			return mcpwire.Once((*[]byte)(&structured), v)
		}
		// encoding/json matches keys case-insensitively: leave those to it.
		return !bytes.EqualFold(k, []byte("content")) && !bytes.EqualFold(k, []byte("structuredContent"))
	})
	if ok && (c == nil || arrayItems(c, &content)) {
		return content, structured
	}
	var r struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	}
	_ = json.Unmarshal(raw, &r)
	return r.Content, r.StructuredContent
}

// arrayItems appends the items of b, a valid JSON array, to *dst; false
// when b is not an array.
func arrayItems(b []byte, dst *[]json.RawMessage) bool {
	i := mcpwire.SkipSpace(b, 0)
	if i == len(b) || b[i] != '[' {
		return false
	}
	if i = mcpwire.SkipSpace(b, i+1); i < len(b) && b[i] == ']' {
		return true
	}
	for i < len(b) {
		end := mcpwire.ValueEnd(b, i)
		*dst = append(*dst, b[i:end])
		switch i = mcpwire.SkipSpace(b, end); {
		case i == len(b):
			return false
		case b[i] == ']':
			return true
		case b[i] == ',':
			i = mcpwire.SkipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}

// blockFields reads a content block's type ("" when absent) and text (a
// JSON string, "" when absent or null), as encoding/json would into
// struct{ Type, Text string }; ok is false when it would fail.
func blockFields(b []byte) (typ string, text json.RawMessage, ok bool) {
	var t []byte
	if mcpwire.ObjectFields(b, func(k, v []byte) bool {
		switch string(k) {
		case "type":
			return mcpwire.Once(&t, v)
		case "text":
			return mcpwire.Once((*[]byte)(&text), v)
		}
		return !bytes.EqualFold(k, []byte("type")) && !bytes.EqualFold(k, []byte("text"))
	}) && mcpwire.PlainString(t, &typ) && (text == nil || text[0] == '"') {
		if text == nil {
			text = json.RawMessage(`""`)
		}
		return typ, text, true
	}
	var c struct{ Type, Text string }
	if json.Unmarshal(b, &c) != nil {
		return "", nil, false
	}
	text, _ = json.Marshal(c.Text)
	return c.Type, text, true
}

// joinText joins the texts (JSON strings) with newlines.
func joinText(texts []json.RawMessage) string {
	var b strings.Builder
	for i, t := range texts {
		if i > 0 {
			b.WriteByte('\n')
		}
		var s string
		if !mcpwire.PlainString(t, &s) {
			_ = json.Unmarshal(t, &s)
		}
		b.WriteString(s)
	}
	return b.String()
}

var identRE = regexp.MustCompile(`[^A-Za-z0-9_$]`)

// Ident makes a name a JavaScript identifier: other characters become _,
// and a leading digit gets a _ before it.
func Ident(s string) string {
	s = identRE.ReplaceAllString(s, "_")
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "_" + s
	}
	return s
}
