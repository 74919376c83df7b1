package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// greeter is a Connector whose servers each have one tool, "hello".
type greeter struct{}

func (greeter) Connect(_ context.Context, user string, s catalog.ServerDecl, _ func()) (catalog.Conn, error) {
	return &greeting{server: s.Name, done: make(chan struct{})}, nil
}

type greeting struct {
	server string
	done   chan struct{}
}

func (g *greeting) ListTools(context.Context) ([]catalog.ToolInfo, error) {
	return []catalog.ToolInfo{{Name: "hello"}}, nil
}

func (g *greeting) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	return ext.TextResult(fmt.Sprintf("hello %s, from %s", req.User, g.server)), nil
}

func (g *greeting) Done() <-chan struct{} { return g.done }
func (g *greeting) Err() error            { return nil }
func (g *greeting) Close() error          { close(g.done); return nil }

func Example() {
	ctx := context.Background()
	planner := &catalog.SettingsPlanner{
		Servers: []catalog.ServerDecl{
			{Name: "a", Enabled: true},
			{Name: "b", Enabled: true, Availability: catalog.AvailabilityOptIn},
		},
		Toggles: func(context.Context, string) (json.RawMessage, error) { return json.RawMessage(`{"b": true}`), nil },
	}
	publish := catalog.PublisherFunc(func(_ context.Context, user string, c *ext.Catalog) error {
		for _, t := range c.Tools {
			fmt.Printf("%s: %s (%s) %q\n", user, t.Name, t.Exposure, t.Description)
		}
		return nil
	})
	e := catalog.New(planner, greeter{}, publish, nil)
	defer e.Close(ctx)

	if err := e.Activate(ctx, "alice"); err != nil {
		fmt.Println(err)
	}
	res, _ := e.Call(ctx, &ext.CallToolRequest{User: "alice", Name: "b/hello"})
	fmt.Println(res.Text())
	_, err := e.Call(ctx, &ext.CallToolRequest{User: "", Name: "b/hello"})
	fmt.Println(err)
	// Output:
	// alice: a/hello (direct) "MCP tool hello on server a."
	// alice: b/hello (direct) "MCP tool hello on server b."
	// hello alice, from b
	// calling "b/hello": caller not identified: permission denied
}
