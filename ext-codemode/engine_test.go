package codemode_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	codemode "github.com/agenthost/agenthost/ext-codemode"
)

// echo answers every inner call with its arguments as structuredContent;
// tool "t/fail" answers an isError result.
func echo(calls *atomic.Int32) codemode.CallFunc {
	return func(ctx context.Context, name string, args json.RawMessage) (*codemode.InnerResult, error) {
		calls.Add(1)
		if name == "t/fail" {
			return &codemode.InnerResult{Raw: json.RawMessage(`{"content":[{"type":"text","text":"no such note"}],"isError":true}`), IsError: true}, nil
		}
		if name == "t/text" {
			return &codemode.InnerResult{Raw: json.RawMessage(`{"content":[{"type":"text","text":"hello"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`)}, nil
		}
		if name == "t/wait" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return &codemode.InnerResult{Raw: json.RawMessage(`{"content":[],"structuredContent":` + string(args) + `}`)}, nil
	}
}

var names = []string{"t/echo", "t/fail", "t/text", "t/wait", "my-server/do.it"}

func TestRun(t *testing.T) {
	var n atomic.Int32
	var progress atomic.Int32
	out := codemode.Run(context.Background(), `
const a = await tools.t.echo({x: 1});
const b = await tools.call("t/text", {});
console.log("got", a, b);
const c = await tools.my_server.do_it({y: 2});
return {sum: a.x + c.y, b};`, names, codemode.Limits{}, echo(&n), func(int, codemode.InnerCall) { progress.Add(1) })
	if out.Error != nil {
		t.Fatalf("error %+v", out.Error)
	}
	if string(out.Value) != `{"sum":3,"b":"hello"}` || len(out.Logs) != 1 || out.Logs[0] != `got {"x":1} hello` {
		t.Errorf("value %s logs %q", out.Value, out.Logs)
	}
	if len(out.Calls) != 3 || out.Calls[0].Outcome != "ok" || out.Calls[2].Tool != "my-server/do.it" || progress.Load() != 3 || len(out.Content) != 1 {
		t.Errorf("calls %+v progress %d content %d", out.Calls, progress.Load(), len(out.Content))
	}
}

func TestRunErrors(t *testing.T) {
	var n atomic.Int32
	// Generous time limits but for the endless loop: under -race the
	// engine runs many times slower, and the memory and stack limits
	// must be what ends those scripts.
	lim := codemode.Limits{CPU: time.Minute, WallClock: 2 * time.Minute, MemoryBytes: 8 << 20, Calls: 5}
	for _, tc := range []struct{ name, code, want, limit string }{
		{"tool error", "await tools.t.echo({});\nawait tools.t.fail({});", "no such note", ""},
		{"line", "const x = 1;\nnull.y;", "cannot read property", ""},
		{"endless loop", "for (;;) {}", "computed longer", "cpuSeconds"},
		{"repeat 2**30", "return 'x'.repeat(2**30).length", "invalid string length", "memoryMiB"},
		{"array grows", "const a = []; for (;;) a.push('x'.repeat(10000) + a.length);", "out of memory", "memoryMiB"},
		{"recursion", "const f = (n) => f(n + 1) + 1; return f(0);", "recursed too deep", "stack"},
		{"flood", "for (;;) await tools.t.echo({});", "more than 5 tool calls", "maxCalls"},
		{"parallel flood", "await Promise.all(Array.from({length: 100}, () => tools.t.echo({})));", "more than 5 tool calls", "maxCalls"},
		{"awaits forever", "await new Promise(() => {});", "nothing can settle", ""},
		{"network", "return await fetch('http://example.com')", "'fetch' is not defined", ""},
		{"files", "return require('fs')", "'require' is not defined", ""},
		{"std", "return std.loadFile('/etc/passwd')", "'std' is not defined", ""},
		{"eval", "return eval('1')", "'eval' is not defined", ""},
		{"timers", "setTimeout(() => {}, 10)", "'setTimeout' is not defined", ""},
		{"not offered", "return await tools.call('other/tool', {})", "not one code may call", ""},
		{"output", "for (;;) console.log('x'.repeat(1000))", "output passed", "maxOutputBytes"},
	} {
		l := lim
		if tc.limit == "cpuSeconds" {
			l.CPU = time.Second
		}
		out := codemode.Run(context.Background(), tc.code, names, l, echo(&n), nil)
		if out.Error == nil || !strings.Contains(out.Error.Message, tc.want) || out.Error.Limit != tc.limit {
			t.Errorf("%s: error %+v, want %q (limit %q)", tc.name, out.Error, tc.want, tc.limit)
		}
		if tc.name == "line" && out.Error.Line != 2 {
			t.Errorf("line: %+v, want line 2", out.Error)
		}
		if tc.name == "tool error" && (len(out.Calls) != 2 || out.Calls[0].Outcome != "ok" || out.Calls[1].Outcome != "tool error" || out.Error.Line != 2) {
			t.Errorf("tool error: calls %+v error %+v", out.Calls, out.Error)
		}
	}
}

// TestRunCancel: cancelling the run ends the script and its inner calls.
func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	call := func(ctx context.Context, name string, args json.RawMessage) (*codemode.InnerResult, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	go func() { <-started; cancel() }()
	out := codemode.Run(ctx, "await tools.t.wait({}); return 1", names, codemode.Limits{}, call, nil)
	if out.Error == nil || !strings.Contains(out.Error.Message, "cancelled") {
		t.Errorf("error %+v, want cancelled", out.Error)
	}
}

// TestRunSettleHidden: the settle function is held by Run, not a global,
// so a script cannot settle its own pending calls with forged results.
func TestRunSettleHidden(t *testing.T) {
	var n atomic.Int32
	out := codemode.Run(context.Background(), `
const names = Object.getOwnPropertyNames(globalThis).filter((k) => k.startsWith("__ah"));
const r = await tools.t.echo({x: 1});
return {names, x: r.x};`, names, codemode.Limits{}, echo(&n), nil)
	if out.Error != nil {
		t.Fatalf("error %+v", out.Error)
	}
	if string(out.Value) != `{"names":[],"x":1}` {
		t.Errorf("value %s, want no __ah globals", out.Value)
	}
}
