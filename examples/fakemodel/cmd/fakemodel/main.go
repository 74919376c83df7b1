// Command fakemodel serves the fakemodel stand-in for the Anthropic
// Messages API on loopback, for running Claude Code's CLI offline by
// hand (the tests use the package in process). It prints its base URL
// (for ANTHROPIC_BASE_URL) on the first line of stdout, and after each
// request rewrites the -record file with what it recorded so far (JSON:
// the Messages requests and the other paths asked for). It stops on
// SIGINT or SIGTERM.
//
//	fakemodel -tool mcp__agenthost__notes__add_note -input '{"text":"hi"}' -final 'Added.' -record /tmp/rec.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/agenthost/agenthost/examples/fakemodel"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fakemodel:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	tool := flag.String("tool", "", "the tool the first turn calls, as the agent names it")
	input := flag.String("input", "{}", "the tool call's arguments (a JSON object)")
	final := flag.String("final", "done", "the text of the turn after the tool result")
	record := flag.String("record", "", "file to write the recorded requests to (JSON)")
	flag.Parse()
	var in map[string]any
	if err := json.Unmarshal([]byte(*input), &in); err != nil {
		return fmt.Errorf("-input %q: %w", *input, err)
	}
	fm := fakemodel.New(fakemodel.Script{Tool: *tool, Input: in, Final: *final})
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fm.ServeHTTP(w, r)
		if *record == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.MarshalIndent(map[string]any{"messages": fm.Requests(), "other": fm.Other()}, "", "  ")
		if err := os.WriteFile(*record, b, 0o600); err != nil {
			fmt.Fprintf(os.Stderr, "fakemodel: writing %s: %v\n", *record, err)
		}
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	fmt.Printf("http://%s\n", ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
