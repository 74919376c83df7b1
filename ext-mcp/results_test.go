package extmcp_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
)

// quickRetry retries a quarantined server within milliseconds.
var quickRetry = &extmcp.Options{Catalog: &catalog.Options{Backoff: catalog.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}}}

// wantErrorResult calls and checks for an error result holding want.
func (f *fixture) wantErrorResult(user, name, args, want string) {
	f.t.Helper()
	res, err := f.call(user, name, args)
	if err != nil {
		f.t.Fatalf("%s: %v; want an error result", name, err)
	}
	if !res.IsError || !strings.Contains(res.Text(), want) {
		f.t.Fatalf("%s: isError %v, %.200q; want an error result with %q", name, res.IsError, res.Text(), want)
	}
}

// bigArgs asks the big tool for n bytes.
func bigArgs(n int) string { return fmt.Sprintf(`{"bytes": %d}`, n) }

// checkBig checks that a 15 MB result of server (an example server with
// the tool big) is an error result naming the limit and the server, and
// that the next call on the same connection works.
func checkBig(t *testing.T, f *fixture, server string) {
	t.Helper()
	want := fmt.Sprintf(`MCP server %q returned a result of 14.3 MiB, over the 4 MiB limit (maxResultBytes)`, server)
	f.wantErrorResult("alice", server+"/big", bigArgs(bigSize), want)
	if got := f.mustCall("alice", server+"/big", bigArgs(1000)).Text(); len(got) != 1000 {
		t.Errorf("the call after a refused result returned %d bytes, want 1000", len(got))
	}
	if st := f.statusOf("alice", server); st.State != "connected" {
		t.Errorf("%s after the refused result: %+v", server, st)
	}
}

// checkCapped checks server capped (a bigServer with maxResultBytes 64
// KiB): a tool result and a prompt over the limit, and a resource when it
// is the first server by name that offers it, fail naming the limit and
// the server; results under the limit pass, on the same connection.
func checkCapped(t *testing.T, f *fixture, capped string, resources bool) {
	t.Helper()
	f.wantErrorResult("alice", capped+"/big", bigArgs(100_000), fmt.Sprintf(`MCP server %q returned a result of 97.`, capped))
	f.wantErrorResult("alice", capped+"/big", bigArgs(100_000), "KiB, over the 64 KiB limit (maxResultBytes)")
	if got := f.mustCall("alice", capped+"/big", bigArgs(60_000)).Text(); len(got) != 60_000 {
		t.Errorf("a result just under the limit came back as %d bytes", len(got))
	}
	pp := f.e.(ext.PromptProvider)
	_, err := pp.GetPrompt(ctx(t), &ext.GetPromptRequest{User: "alice", Name: capped + "/big", Arguments: json.RawMessage(`{"bytes": "100000"}`)})
	if err == nil || !strings.Contains(err.Error(), "over the 64 KiB limit (maxResultBytes)") || !strings.Contains(err.Error(), capped) {
		t.Errorf("a prompt over the limit: %v; want an error naming the server and the limit", err)
	}
	if res, err := pp.GetPrompt(ctx(t), &ext.GetPromptRequest{User: "alice", Name: capped + "/big", Arguments: json.RawMessage(`{"bytes": "7"}`)}); err != nil || !strings.Contains(string(res), "xxxxxxx") {
		t.Errorf("a small prompt after a refused one: %s %v", res, err)
	}
	if resources {
		rp := f.e.(ext.ResourceProvider)
		_, err = rp.ReadResource(ctx(t), &ext.ReadResourceRequest{User: "alice", URI: "big://resource"})
		if err == nil || !strings.Contains(err.Error(), "over the 64 KiB limit (maxResultBytes)") || !strings.Contains(err.Error(), capped) {
			t.Errorf("reading a resource over the limit: %v; want an error naming the server and the limit", err)
		}
		if res, err := rp.ReadResource(ctx(t), &ext.ReadResourceRequest{User: "alice", URI: "small://resource"}); err != nil || !strings.Contains(string(res), "xxxxxxxxxx") {
			t.Errorf("a small resource after a refused one: %s %v", res, err)
		}
	}
	if st := f.statusOf("alice", capped); st.State != "connected" {
		t.Errorf("%s after the refused results: %+v", capped, st)
	}
}

// TestResultCapStdio bounds the results of real stdio servers: the
// example notes server (a 15 MB result) and a bigServer process.
func TestResultCapStdio(t *testing.T) {
	needBins(t)
	t.Parallel()
	for _, carrier := range []string{"inprocess", "grpc-fd"} {
		t.Run(carrier, func(t *testing.T) {
			t.Parallel()
			cfg := fmt.Sprintf(`{"mcpServers": {"notes": %s, "capped": %s}}`, notesServer(""), selfServer("big", `"maxResultBytes": 65536`))
			f := newFixture(t, carrier, cfg, nil)
			f.activate("alice")
			checkBig(t, f, "notes")
			checkCapped(t, f, "capped", true)
		})
	}
}

// startBearer runs the example bearer server on a free loopback port and
// returns its URL.
func startBearer(t *testing.T, args ...string) string {
	t.Helper()
	needBins(t)
	cmd := exec.Command(bins.bearer, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stderr)
	line, err := r.ReadString('\n')
	drained := make(chan struct{})
	go func() { // ends when the process exits
		defer close(drained)
		_, _ = io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-drained
		_ = cmd.Wait()
	})
	_, u, ok := strings.Cut(strings.TrimSpace(line), "serving ")
	if err != nil || !ok {
		t.Fatalf("the bearer server did not start: %q %v", line, err)
	}
	return u
}

// TestResultCapHTTP bounds the results of real Streamable HTTP servers:
// the example bearer server (a 15 MB result on an event stream) and
// bigServers answering with event streams and with JSON bodies.
func TestResultCapHTTP(t *testing.T) {
	t.Parallel()
	web := startBearer(t)
	serve := func(opts *mcp.StreamableHTTPOptions) string {
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return bigServer() }, opts))
		t.Cleanup(func() {
			srv.CloseClientConnections()
			srv.Close()
		})
		return srv.URL
	}
	cfg := fmt.Sprintf(`{"mcpServers": {"web": {"url": %q}, "capped": {"url": %q, "maxResultBytes": 65536},
		"json": {"url": %q, "maxResultBytes": 65536}}}`, web, serve(nil), serve(&mcp.StreamableHTTPOptions{JSONResponse: true}))
	f := newFixture(t, "inprocess", cfg, nil)
	f.setSecret("alice", extmcp.TokenSecret("web"), "alice-web-token")
	f.activate("alice")
	checkBig(t, f, "web")
	checkCapped(t, f, "capped", true) // first by name: the resources are capped's
	checkCapped(t, f, "json", false)
}

// TestResultCapList bounds the lists go-sdk asks for on stdio too: a tool
// list over the limit fails the connection with the reason, and the
// server is quarantined.
func TestResultCapList(t *testing.T) {
	needBins(t)
	t.Parallel()
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"tiny": %s}}`, notesServer(`"maxResultBytes": 1024`)), nil)
	f.activate("alice")
	st := f.statusOf("alice", "tiny")
	if st.State != "quarantined" || !strings.Contains(st.Reason, `MCP server "tiny" returned a result of `) ||
		!strings.Contains(st.Reason, "over the 1 KiB limit (maxResultBytes)") {
		t.Errorf("a tool list over the limit: %+v", st)
	}
}

// TestResultCapStateless bounds a stateless server's results, which go-sdk
// reads: it ends the connection on a message over the limit, and the
// server is reconnected.
func TestResultCapStateless(t *testing.T) {
	t.Parallel()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return bigServer() }, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"web": {"url": %q, "protocolVersion": "latest", "maxResultBytes": 65536}}}`, srv.URL), quickRetry)
	f.activate("alice")
	f.wantErrorResult("alice", "web/big", bigArgs(100_000), `MCP server "web" returned a result over the 64 KiB limit (maxResultBytes)`)
	f.eventuallyCall("alice", "web/big", bigArgs(10))
}

// eventuallyCall retries a call until it succeeds (a reconnect).
func (f *fixture) eventuallyCall(user, name, args string) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := f.call(user, name, args)
		if err == nil && !res.IsError {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s never worked again: %v %v", name, err, res)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResultCapRawStdio bounds what no encoder would write: an answer
// whose id follows a result over the limit, a notification over the
// limit, and an answer that never ends, which closes the connection; the
// server is then reconnected and answers again.
func TestResultCapRawStdio(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "grpc-fd", fmt.Sprintf(`{"mcpServers": {"raw": %s}}`, selfServer("rawbig", "")), quickRetry)
	f.activate("alice")
	f.wantErrorResult("alice", "raw/idlast", `{}`, `MCP server "raw" returned a result of 14.3 MiB, over the 4 MiB limit (maxResultBytes)`)
	f.mustCall("alice", "raw/small", `{}`)
	if got := f.mustCall("alice", "raw/noisy", `{}`).Text(); got != "ok" {
		t.Errorf("after a notification over the limit: %q", got)
	}
	if !strings.Contains(f.logs.String(), "an MCP server sent a message over the limit; dropped") {
		t.Error("the dropped notification was not logged")
	}
	if got := f.mustCall("alice", "raw/askbig", `{}`).Text(); !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "over this client's limit of 4 MiB") {
		t.Errorf("a request of the server's over the limit got %q; want an error answer", got)
	}
	f.wantErrorResult("alice", "raw/endless", `{}`, `MCP server "raw" returned a result of more than 64 MiB, over the 4 MiB limit (maxResultBytes)`)
	f.eventuallyCall("alice", "raw/small", `{}`)
	if st := f.statusOf("alice", "raw"); st.State != "connected" {
		t.Errorf("after the reconnect: %+v", st)
	}
}

// TestResultCapMemory shows that an endless line does not make ext-mcp
// hold it: while ext-mcp reads and discards 64 MiB, it allocates a small
// part of that (the limit, once). Not parallel: the allocation counter is
// the whole process's.
func TestResultCapMemory(t *testing.T) {
	f := newFixture(t, "inprocess", fmt.Sprintf(`{"mcpServers": {"raw": %s}}`, selfServer("rawbig", "")), quickRetry)
	f.activate("alice")
	f.mustCall("alice", "raw/small", `{}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f.wantErrorResult("alice", "raw/endless", `{}`, "more than 64 MiB")
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %.1f MiB while discarding a line of more than 64 MiB (limit 4 MiB)", float64(alloc)/(1<<20))
	if alloc > 32<<20 {
		t.Errorf("allocated %d bytes while discarding the line: it was buffered", alloc)
	}
}
