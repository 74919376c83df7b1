package mcpendpoint_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/api"
	"github.com/agenthost/agenthost/host/internal/hosttest"
	"github.com/agenthost/agenthost/host/internal/mcpendpoint"
)

// BenchmarkIdleSessions opens sessions the way the session-flood attack
// does (one token, raw initialize requests, nothing after them) for a user
// with 20 tools and reports the memory each idle session holds: heap and
// goroutine stacks in use after a full collection, per session (the
// in-memory host's registration of the session, like the real host's,
// included).
func BenchmarkIdleSessions(b *testing.B) {
	tools := []api.Tool{}
	for i := range 20 {
		tools = append(tools, api.Tool{Tool: ext.Tool{Name: fmt.Sprintf("srv%d/echo", i), Description: strings.Repeat("Echo the text back. ", 5),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","description":"The text."}}}`)}})
	}
	h := hosttest.New(nil)
	h.SetTools("alice", tools...)
	const sessions = 2000
	for range b.N {
		ep, err := mcpendpoint.New(h, benchVerifier{}, &mcpendpoint.Options{MaxSessionsPerUser: sessions, MaxSessions: sessions})
		if err != nil {
			b.Fatal(err)
		}
		init := func() {
			req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer tok-alice")
			w := httptest.NewRecorder()
			ep.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("initialize: %d %s", w.Code, w.Body)
			}
		}
		init() // the user's tables, loaded once
		heap0, stack0 := memInUse()
		for range sessions - 1 {
			init()
		}
		heap1, stack1 := memInUse()
		if n := ep.Sessions(); n != sessions {
			b.Fatalf("Sessions() = %d, want %d", n, sessions)
		}
		b.ReportMetric(float64(heap1-heap0)/(sessions-1)/1024, "heap-KiB/session")
		b.ReportMetric(float64(stack1-stack0)/(sessions-1)/1024, "stack-KiB/session")
		b.ReportMetric(float64(heap1+stack1-heap0-stack0)/(sessions-1)/1024, "KiB/session")
		ep.Close()
	}
}

// memInUse is the heap and the goroutine stacks in use after a full
// collection.
func memInUse() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}
