//lint:file-ignore SA1019 logging is deprecated from MCP 2026-07-28 but still spoken by the 2025 revisions the endpoint serves: this test drives it (issue 9).
package mcpendpoint_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestStandaloneStreamReconnects: when the endpoint ends a session's
// standalone stream (here another GET of the session replaces it; a full
// queue does the same), a go-sdk client reconnects and the session goes
// on, however often that happens: the stream's events carry IDs, so each
// reconnect after one counts as progress. Before, they carried none, and
// go-sdk failed the whole session once its stream had ended MaxRetries+1
// times (5 by default, 1 here).
func TestStandaloneStreamReconnects(t *testing.T) {
	e := newEnv(t, nil)
	logs := make(chan *mcp.LoggingMessageParams, 256)
	c := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { logs <- r.Params },
	})
	cs, err := c.Connect(tctx(t), &mcp.StreamableClientTransport{Endpoint: e.srv.URL,
		HTTPClient: &http.Client{Transport: &bearerRT{base: e.tr, token: aliceTok}}, MaxRetries: 1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(tctx(t), &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	drain := func() {
		for {
			select {
			case <-logs:
			default:
				return
			}
		}
	}
	for round := range 2 {
		waitStream(t, e, logs)
		drain()
		// Another GET of the session: the client's stream ends, and the
		// client's reconnect ends this one in turn.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL, nil)
		req.Header.Set("Authorization", "Bearer "+aliceTok)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := (&http.Client{Transport: e.tr}).Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("round %d: the client did not reconnect its stream after the endpoint ended it", round)
		}
	}
	if _, err := cs.ListTools(tctx(t), nil); err != nil {
		t.Fatalf("the session after its stream ended twice: %v", err)
	}
	drain()
	waitStream(t, e, logs)
}
