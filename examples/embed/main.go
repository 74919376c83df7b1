// Command embed is a program that embeds the agenthost host, as an agent
// runtime would: one extension runs in process (tally, a Go value defined
// below), one out of process (the hello example's binary, launched and
// supervised by the host over go-plugin), and package serve serves both
// to agents at /mcp, with the settings UI, the JSON API and the status
// page beside it.
//
//	go build -o bin/ ./examples/hello ./examples/embed
//	bin/embed -hello bin/hello -addr 127.0.0.1:8080
//
// It prints the MCP endpoint and a bearer token for the user (-user,
// default alice); point any MCP client at them. Ctrl-C stops it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/host/serve"
)

func main() {
	hello := flag.String("hello", "bin/hello", "the hello extension's binary")
	addr := flag.String("addr", "127.0.0.1:8080", "the address to serve on (port 0: any free one)")
	data := flag.String("data", ".embed", "the data folder: settings, tokens, encrypted secrets")
	user := flag.String("user", "alice", "the user to issue a token for")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *hello, *addr, *data, *user)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, helloPath, addr, data, user string) error {
	helloPath, err := filepath.Abs(helloPath)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := &host.Config{
		DataDir: data,
		Secrets: host.SecretsConfig{Backend: "file"},
		// Out of process: the host launches the binary and restarts it if
		// it crashes. The key is the extension's own name.
		Extensions: map[string]host.ExtensionConfig{"hello": {Path: helloPath}},
	}
	h, err := host.New(ctx, cfg, &host.Options{
		Logger: logger,
		// In process: a Go value, called directly.
		Extensions: map[string]host.InProcess{"tally": {Extension: &tally{}}},
	})
	if err != nil {
		return err
	}
	s, err := serve.New(h, &serve.Options{Logger: logger, Addr: addr})
	if err != nil {
		return errors.Join(err, h.Close())
	}
	tok, err := s.CreateToken(ctx, user, "embed")
	if err != nil {
		return errors.Join(err, s.Close(), h.Close())
	}
	ln, err := s.Listen()
	if err != nil {
		return errors.Join(err, s.Close(), h.Close())
	}
	fmt.Printf("MCP endpoint: %s/mcp\n", s.URL())
	fmt.Printf("Token for %s: %s\n", user, tok)
	// Serve until Ctrl-C, then close the server before the host.
	return errors.Join(s.Serve(ctx, ln), h.Close())
}

// tally is an in-process extension: one tool that adds to a running total
// kept per user, so each user sees only their own.
type tally struct {
	mu     sync.Mutex
	totals map[string]int
}

var (
	_ ext.Extension  = (*tally)(nil)
	_ ext.ToolCaller = (*tally)(nil)
)

func (t *tally) Describe(context.Context) (*ext.Descriptor, error) {
	return &ext.Descriptor{Name: "tally", Version: "v1", Description: "A running total per user.",
		Capabilities: []ext.Capability{ext.CapabilityTools}}, nil
}

func (t *tally) Configure(ctx context.Context, req *ext.ConfigureRequest) error {
	t.mu.Lock()
	t.totals = map[string]int{}
	t.mu.Unlock()
	return req.Host.SetSystemTools(ctx, []ext.Tool{{
		Name: "tally/add", Description: "Add n to your running total and return it.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`),
	}})
}

func (t *tally) Shutdown(context.Context) error { return nil }

func (t *tally) CallTool(_ context.Context, req *ext.CallToolRequest) (*ext.CallToolResult, error) {
	if req.Name != "tally/add" {
		return nil, ext.Errorf(ext.ErrNotFound, "tool %q", req.Name)
	}
	var args struct {
		N *int `json:"n"`
	}
	if err := json.Unmarshal(req.Arguments, &args); err != nil || args.N == nil {
		return ext.ErrorResult(`tally/add needs {"n": <integer>}`), nil
	}
	t.mu.Lock()
	t.totals[req.User] += *args.N
	total := t.totals[req.User]
	t.mu.Unlock()
	return ext.TextResult(strconv.Itoa(total)), nil
}
