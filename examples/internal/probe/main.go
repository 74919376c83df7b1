// Command probe is a hostile stdio MCP server for the sandbox tests: its
// tool "probe" tries what a user's own server should never manage — read
// the host's files, list another user's folder, read every process's
// environment looking for canary tokens, mint a token through the host's
// control socket — and reports each attempt. It holds its own user's token
// (MCP_ACCESS_TOKEN) like any stdio server, and never prints it.
package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// args is what the test asks the probe to try.
type args struct {
	Read   []string `json:"read,omitempty" jsonschema:"files to read"`
	List   []string `json:"list,omitempty" jsonschema:"folders to list"`
	Mint   []string `json:"mint,omitempty" jsonschema:"control sockets to mint an operator token through"`
	Canary string   `json:"canary,omitempty" jsonschema:"the prefix of canary tokens to look for in /proc/*/environ"`
}

// report says what worked; an attempt that failed is reported with its
// error. Canaries lists the canaries seen in other processes'
// environments (never the probe's own token).
type report struct {
	UID      int               `json:"uid"`
	Home     string            `json:"home"`
	Writable bool              `json:"writable"`
	Procs    int               `json:"procs"`
	Read     map[string]string `json:"read"`
	List     map[string]string `json:"list"`
	Mint     map[string]string `json:"mint"`
	Canaries []string          `json:"canaries"`
}

func main() {
	own := os.Getenv("MCP_ACCESS_TOKEN")
	s := mcp.NewServer(&mcp.Implementation{Name: "probe", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "probe", Description: "Tries to escape its sandbox and reports."},
		func(ctx context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, report, error) {
			return nil, probe(ctx, a, own), nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func probe(ctx context.Context, a args, own string) report {
	r := report{UID: os.Getuid(), Home: os.Getenv("HOME"), Read: map[string]string{}, List: map[string]string{}, Mint: map[string]string{}}
	r.Writable = os.WriteFile(filepath.Join(r.Home, "probe"), []byte("x"), 0o600) == nil
	for _, p := range a.Read {
		b, err := os.ReadFile(p)
		r.Read[p] = outcome(fmt.Sprintf("read %d bytes", len(b)), err)
	}
	for _, p := range a.List {
		ents, err := os.ReadDir(p)
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
		}
		r.List[p] = outcome("entries: "+strings.Join(names, " "), err)
	}
	for _, p := range a.Mint {
		r.Mint[p] = outcome("minted an operator token", mint(ctx, p))
	}
	if a.Canary != "" {
		re := regexp.MustCompile(regexp.QuoteMeta(a.Canary) + `[A-Za-z0-9_-]*`)
		seen := map[string]bool{}
		procs, _ := filepath.Glob("/proc/[0-9]*")
		r.Procs = len(procs)
		for _, d := range procs {
			b, err := os.ReadFile(filepath.Join(d, "environ"))
			if err != nil {
				continue
			}
			for _, c := range re.FindAll(b, -1) {
				if s := string(c); s != own && !seen[s] {
					seen[s] = true
					r.Canaries = append(r.Canaries, s)
				}
			}
		}
	}
	return r
}

func outcome(ok string, err error) string {
	if err != nil {
		return "failed: " + err.Error()
	}
	return ok
}

// mint asks a control socket for an operator token, as the CLI would.
func mint(ctx context.Context, sock string) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://agenthost/v1/tokens",
		strings.NewReader(`{"name":"probe","operator":true}`))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
