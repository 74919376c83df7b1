package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// TestCodeModeMaxRunsConcurrent: eight scripts sent at once from outside
// the process, over four connections of two users, against maxRuns 2:
// exactly two run (each waits 3 s on a tool), the other six are refused at
// once naming the limit, and once the two have ended a script runs again.
func TestCodeModeMaxRunsConcurrent(t *testing.T) {
	b := build(t)
	codemodeBin := testbin.Build(t, pkg+"ext-codemode/cmd/agenthost-ext-codemode")
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}},
		map[string]any{"extensions": map[string]any{"code": map[string]any{"path": codemodeBin, "config": map[string]any{
			"exposures": []string{"direct"}, "openServers": []string{"notes"}, "maxRuns": 2,
		}}}})
	e.startServe()
	var clients []*client
	for _, user := range []string{"alice", "alice", "bob", "bob"} {
		c, err := connect(t, e.url, strings.TrimSpace(e.must("", "token", "create", "--user", user, "--name", "e2e")))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	ctx := context.Background()
	run := func(c *client, code string) (string, error) {
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "code__run", Arguments: map[string]any{"code": code}})
		if err != nil {
			return "", err
		}
		return text(res), nil
	}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		ran, busy, other []string
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := run(clients[i%4], `return await tools.notes.slow({duration: "3s"})`)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				other = append(other, err.Error())
			case strings.Contains(out, "code mode is busy") && strings.Contains(out, "maxRuns"):
				busy = append(busy, out)
			case strings.Contains(out, "Calls (1): notes/slow ok"):
				ran = append(ran, out)
			default:
				other = append(other, out)
			}
		}()
	}
	wg.Wait()
	if len(ran) != 2 || len(busy) != 6 || len(other) != 0 {
		t.Errorf("8 scripts at once against maxRuns 2: %d ran, %d refused as busy, others %q; want 2 and 6", len(ran), len(busy), other)
	}
	if out, err := run(clients[2], `return 1`); err != nil || !strings.Contains(out, "Result: 1") {
		t.Errorf("a script after the runs ended = %q, %v", out, err)
	}
}
