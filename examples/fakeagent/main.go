// Command fakeagent behaves like `claude -p` for the runner's tests: it
// reads the MCP config file given with --mcp-config (Claude Code's format:
// {"mcpServers":{NAME:{"type":"http","url":...,"headers":{...}}}}),
// connects with go-sdk to each server's URL with its headers, lists the
// tools, and writes one JSON line per step to stdout. Its prompt (-p)
// says what to do, one instruction per ";":
//
//	call TOOL {JSON}   call a tool (its name as the server lists it)
//	env                print the environment
//	stat PATH          say whether PATH exists (what a sandbox hides)
//	hang               wait until killed
//	escape             start a copy of itself that hangs in a session of
//	                   its own (setsid, stdio on /dev/null): a daemon that
//	                   left the agent's process group
//	exit N             exit with status N
//
// With FAKEAGENT_TOKEN_OUT set (tests only) it appends the bearer token
// of each server to that file, never to its output.
//
// Any other flag (--strict-mcp-config, --allowedTools X, ...) is accepted
// and printed back, so a test sees the argv the runner built.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type server struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

func say(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func fail(format string, args ...any) {
	say(map[string]any{"error": fmt.Sprintf(format, args...)})
	os.Exit(1)
}

type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header.Set(k, v)
	}
	return t.next.RoundTrip(r)
}

func main() {
	var prompt, cfgPath string
	var rest []string
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-p" || a == "--print":
			i++
			if i < len(args) {
				prompt = args[i]
			}
		case a == "--mcp-config":
			i++
			if i < len(args) {
				cfgPath = args[i]
			}
		default:
			rest = append(rest, a)
		}
	}
	say(map[string]any{"argv": rest, "prompt": prompt})
	var steps []string
	for _, s := range strings.Split(prompt, ";") {
		if s = strings.TrimSpace(s); s != "" {
			steps = append(steps, s)
		}
	}
	for _, s := range steps {
		if s == "env" {
			env := os.Environ()
			sort.Strings(env)
			say(map[string]any{"env": env})
		}
	}
	var cfg struct {
		MCPServers map[string]server `json:"mcpServers"`
	}
	if cfgPath != "" {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			fail("reading --mcp-config: %v", err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			fail("parsing --mcp-config: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sessions := map[string]*mcp.ClientSession{}
	for name, s := range cfg.MCPServers {
		if out := os.Getenv("FAKEAGENT_TOKEN_OUT"); out != "" {
			// Tests only: where the test finds the token it was given, to
			// try it after the session (never printed, never in status).
			f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				fail("FAKEAGENT_TOKEN_OUT: %v", err)
			}
			fmt.Fprintln(f, strings.TrimPrefix(s.Headers["Authorization"], "Bearer "))
			_ = f.Close()
		}
		hc := &http.Client{Transport: headers{h: s.Headers, next: http.DefaultTransport}}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "fakeagent", Version: "v1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc}, nil)
		if err != nil {
			fail("connecting to %s (%s): %v", name, s.URL, err)
		}
		defer cs.Close()
		sessions[name] = cs
		var names []string
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				fail("listing %s's tools: %v", name, err)
			}
			names = append(names, t.Name)
		}
		sort.Strings(names)
		say(map[string]any{"server": name, "tools": names})
	}
	for _, s := range steps {
		verb, arg, _ := strings.Cut(s, " ")
		switch verb {
		case "call":
			tool, js, _ := strings.Cut(strings.TrimSpace(arg), " ")
			var in map[string]any
			if js != "" {
				if err := json.Unmarshal([]byte(js), &in); err != nil {
					fail("arguments of %s: %v", tool, err)
				}
			}
			for name, cs := range sessions {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: in})
				if err != nil {
					fail("calling %s on %s: %v", tool, name, err)
				}
				var text []string
				for _, c := range res.Content {
					if t, ok := c.(*mcp.TextContent); ok {
						text = append(text, t.Text)
					}
				}
				say(map[string]any{"called": tool, "isError": res.IsError, "text": strings.Join(text, "\n")})
			}
		case "stat":
			_, err := os.Stat(strings.TrimSpace(arg))
			say(map[string]any{"stat": strings.TrimSpace(arg), "exists": err == nil})
		case "escape":
			self, err := os.Executable()
			if err != nil {
				fail("escape: %v", err)
			}
			c := exec.Command(self, "-p", "hang")
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := c.Start(); err != nil {
				fail("escape: %v", err)
			}
			say(map[string]any{"escaped": c.Process.Pid})
			_ = c.Process.Release()
		case "hang":
			say(map[string]any{"hanging": true})
			time.Sleep(24 * time.Hour)
		case "exit":
			n, _ := strconv.Atoi(strings.TrimSpace(arg))
			say(map[string]any{"exit": n})
			os.Exit(n)
		}
	}
	say(map[string]any{"done": true})
}
