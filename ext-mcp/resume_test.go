package extmcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// resumeServer is a go-sdk Streamable HTTP server whose tool "slow"
// reports progress "before", then loses its request's event stream (how:
// drop), reports "after", asks the client (elicitation) when its
// arguments hold "ask", and answers "done" (and the name given). With store, the server keeps
// its events for resumption (go-sdk's MemoryEventStore).
//
//   - drop "close": the server ends the stream itself, with a retry field
//     of 10 ms on 2025-11-25 (go-sdk's CloseSSEStream, SEP-1699);
//   - drop "cut": a proxy in front breaks the connection after "before"
//     (the client reads an unexpected EOF); the tool goes on once it did;
//   - drop "stall": as "close", but every resumption gets an empty stream;
//   - drop "late": as "close", with a retry field of an hour.
//
// It returns the URL to configure; closed is closed once the tool ended
// its stream ("close", "stall", "late"); resumptions (GETs with
// Last-Event-ID) are counted in resumes.
func resumeServer(t *testing.T, drop string, store bool) (u string, closed <-chan struct{}, resumes *atomic.Int32) {
	t.Helper()
	cut, ended := make(chan struct{}), make(chan struct{})
	var cutOnce, endOnce sync.Once
	resumes = new(atomic.Int32)
	s := mcp.NewServer(&mcp.Implementation{Name: "resume", Version: "v0"}, nil)
	s.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tok := req.Params.GetProgressToken()
			progress := func(msg string, n float64) {
				if tok != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: msg})
				}
			}
			progress("before", 1)
			switch drop {
			case "close", "stall", "late":
				retry := 10 * time.Millisecond
				if drop == "late" {
					retry = time.Hour
				}
				req.Extra.CloseSSEStream(mcp.CloseSSEStreamArgs{RetryAfter: retry})
				endOnce.Do(func() { close(ended) })
			case "cut":
				select {
				case <-cut:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			progress("after", 2)
			text := "done"
			if strings.Contains(string(req.Params.Arguments), `"ask"`) {
				// A request to the client, on the resumed stream.
				res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "form", Message: "Who?", RequestedSchema: json.RawMessage(
					`{"type":"object","properties":{"name":{"type":"string"},"check":{"type":"boolean"},"interpretation":{"type":"string"}}}`)})
				if err != nil {
					return nil, err
				}
				text += " for " + fmt.Sprint(res.Content["name"])
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
		})
	opts := &mcp.StreamableHTTPOptions{}
	if store {
		opts.EventStore = mcp.NewMemoryEventStore(nil)
	}
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "" {
			resumes.Add(1)
			if drop == "stall" {
				// A stream that ends at once, with nothing new.
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "retry: 5\n\n")
				return
			}
		}
		sdk.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	if drop != "cut" {
		return srv.URL, ended, resumes
	}
	// The proxy passes everything on, but breaks the first event stream
	// that carries a progress notification right after that event.
	target, _ := url.Parse(srv.URL)
	var armed atomic.Bool
	armed.Store(true)
	p := httputil.NewSingleHostReverseProxy(target)
	p.ErrorLog = log.New(io.Discard, "", 0) // the cut is on purpose
	p.ModifyResponse = func(resp *http.Response) error {
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &cutter{ReadCloser: resp.Body, armed: &armed, cut: func() { cutOnce.Do(func() { close(cut) }) }}
		}
		return nil
	}
	front := httptest.NewUnstartedServer(p)
	front.Config.ErrorLog = log.New(io.Discard, "", 0)
	front.Start()
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	return front.URL, ended, resumes
}

// cutter passes an event stream on until the end of its first progress
// event, then fails (the proxy then aborts the response) and calls cut.
type cutter struct {
	io.ReadCloser
	armed *atomic.Bool
	cut   func()
	seen  []byte
	done  bool
}

var errCut = errors.New("cut by the test proxy")

func (c *cutter) Read(p []byte) (int, error) {
	if c.done {
		c.cut()
		return 0, errCut
	}
	n, err := c.ReadCloser.Read(p)
	if c.armed.Load() {
		c.seen = append(c.seen, p[:n]...)
		if i := bytes.Index(c.seen, []byte(`"notifications/progress"`)); i >= 0 && bytes.Contains(c.seen[i:], []byte("\n\n")) &&
			c.armed.CompareAndSwap(true, false) {
			c.done = true // this event whole, then the break
		}
	}
	return n, err
}

// TestResumeDroppedStream calls a tool whose POST event stream ends before
// the answer, on each session-bound protocol revision, the server ending
// it on purpose or the connection breaking: ext-mcp resumes it with a GET
// and Last-Event-ID, as the spec says, and the call returns the answer
// with the progress of both streams reaching the caller, and the server's
// question on the resumed stream answered by it. Before, the call
// failed with "the server ended the stream before answering". A server
// that keeps no events (no event ids) still fails the call, saying so; one
// whose resumptions bring nothing new fails it after 5; a call cancelled
// while it waits to resume ends at once.
func TestResumeDroppedStream(t *testing.T) {
	t.Parallel()
	// config serves a resumeServer to ext-mcp on protocol.
	config := func(u, protocol string) string {
		return fmt.Sprintf(`{"mcpServers": {"r": {"url": %q, "protocolVersion": %q}}}`, u, protocol)
	}
	for _, tc := range []struct{ protocol, drop string }{
		{"2025-11-25", "close"}, // the server's retry: 10 ms
		{"2025-06-18", "close"}, // no retry field: go-sdk's first backoff
		{"2025-11-25", "cut"},   // after the priming event and "before"
		{"2025-03-26", "cut"},
	} {
		t.Run(tc.protocol+"/"+tc.drop, func(t *testing.T) {
			t.Parallel()
			u, _, resumes := resumeServer(t, tc.drop, true)
			f := newFixture(t, "inprocess", config(u, tc.protocol), nil)
			f.activate("alice")
			s := clientSession("alice")
			res, err := f.e.(ext.ToolCaller).CallTool(ctx(t), &ext.CallToolRequest{User: "alice", Name: "r/slow",
				Arguments: json.RawMessage(`{"ask":true}`), ProgressToken: json.RawMessage(`"p"`), Session: s})
			if err != nil {
				t.Fatalf("the call failed: %v", err)
			}
			if res, err = res.Fields(); err != nil || res.IsError || res.Text() != "done for Name of alice" {
				t.Fatalf("the call answered %q (error result %v, %v), want done, with the caller's answer to the server's question", res.Text(), res.IsError, err)
			}
			var got []string
			for _, n := range s.Notes() {
				if n.Method == ext.MethodProgress {
					var p struct{ Message string }
					_ = json.Unmarshal(n.Params, &p)
					got = append(got, p.Message)
				}
			}
			if strings.Join(got, ",") != "before,after" {
				t.Errorf("the caller heard progress %q, want before and after, once each", got)
			}
			if n := resumes.Load(); n != 1 {
				t.Errorf("%d resumptions, want 1", n)
			}
		})
	}
	t.Run("no event ids", func(t *testing.T) {
		t.Parallel()
		u, _, _ := resumeServer(t, "close", false)
		f := newFixture(t, "inprocess", config(u, "2025-11-25"), nil)
		f.activate("alice")
		f.wantErrorResult("alice", "r/slow", `{}`, `MCP server "r" failed to run tool "slow": the server ended the stream before answering (it gave no event id to resume it from)`)
	})
	t.Run("no new event", func(t *testing.T) {
		t.Parallel()
		u, _, resumes := resumeServer(t, "stall", true)
		f := newFixture(t, "inprocess", config(u, "2025-11-25"), nil)
		f.activate("alice")
		f.wantErrorResult("alice", "r/slow", `{}`, "5 resumptions from event")
		if n := resumes.Load(); n != 5 {
			t.Errorf("%d resumptions that brought nothing, want 5", n)
		}
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		// The server asks for an hour (30 s, bounded): the call's end
		// ends the wait, and no resumption is sent.
		t.Parallel()
		u, closed, resumes := resumeServer(t, "late", true)
		f := newFixture(t, "inprocess", config(u, "2025-11-25"), nil)
		f.activate("alice")
		cctx, cancel := context.WithCancel(ctx(t))
		errc := make(chan error, 1)
		go func() {
			_, err := f.e.(ext.ToolCaller).CallTool(cctx, &ext.CallToolRequest{User: "alice", Name: "r/slow", Arguments: json.RawMessage(`{}`)})
			errc <- err
		}()
		<-closed
		// Still waiting a moment later (it waits 30 s; before, the call
		// failed as soon as the stream ended).
		select {
		case err := <-errc:
			t.Fatalf("the call ended before it was cancelled: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("a call cancelled while its stream waits to be resumed: %v, want context.Canceled", err)
		}
		if n := resumes.Load(); n != 0 {
			t.Errorf("%d resumptions after the call ended", n)
		}
	})
}
