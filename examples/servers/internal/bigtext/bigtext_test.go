package bigtext_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agenthost/agenthost/examples/servers/internal/bigtext"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBig calls the tool over in-memory transports: the size asked for,
// and a refusal beyond Max.
func TestBig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v0"}, nil)
	bigtext.AddTool(s)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for n, wantErr := range map[int]bool{0: false, 12345: false, bigtext.Max + 1: true, -1: true} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "big", Arguments: map[string]any{"bytes": n}})
		if err != nil {
			t.Fatal(err)
		}
		if res.IsError != wantErr {
			t.Errorf("big %d: isError %v", n, res.IsError)
			continue
		}
		if !wantErr {
			if got := len(res.Content[0].(*mcp.TextContent).Text); got != n {
				t.Errorf("big %d: %d bytes", n, got)
			}
		}
	}
}
