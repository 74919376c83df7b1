package main_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { testbin.Cleanup() }))
}

// TestEmbed builds and runs the embedding program with the hello
// extension's binary, connects a go-sdk MCP client with the token it
// printed, lists and calls the tools of both extensions (in process and
// out of process), and stops it with SIGTERM: it exits 0 and leaves no
// extension process behind.
func TestEmbed(t *testing.T) {
	var embed, hello string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); embed = testbin.Build(t, "github.com/agenthost/agenthost/examples/embed") }()
	go func() { defer wg.Done(); hello = testbin.Build(t, "github.com/agenthost/agenthost/examples/hello") }()
	wg.Wait()

	dir := t.TempDir()
	cmd := exec.Command(embed, "-hello", hello, "-addr", "127.0.0.1:0", "-data", filepath.Join(dir, "data"), "-user", "ada")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Read only once the process has exited (in the cleanup).
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("embed's log:\n%s", stderr.String())
		}
	})

	// The first two lines: the endpoint and the token.
	lines := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var endpoint, token string
	for endpoint == "" || token == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("embed exited before printing its endpoint and token")
			}
			if v, ok := strings.CutPrefix(l, "MCP endpoint: "); ok {
				endpoint = v
			}
			if v, ok := strings.CutPrefix(l, "Token for ada: "); ok {
				token = v
			}
		case <-time.After(60 * time.Second):
			t.Fatal("embed printed no endpoint and token within 60s")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	bearer := &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: token}), Base: tr}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "embed-test"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", endpoint, err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if want := []string{"hello__greet", "tally__add"}; !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v (one from each extension)", names, want)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"hello__greet", map[string]any{"name": "Grace"}, "Hello, Grace!"},
		{"tally__add", map[string]any{"n": 2}, "2"},
		{"tally__add", map[string]any{"n": 40}, "42"},
	} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("calling %s: %v", c.tool, err)
		}
		got := ""
		if len(res.Content) == 1 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				got = tc.Text
			}
		}
		if res.IsError || got != c.want {
			t.Errorf("%s(%v) = %q (isError %v), want %q", c.tool, c.args, got, res.IsError, c.want)
		}
	}
	_ = cs.Close()

	helloPIDs := pidsOf(hello)
	if len(helloPIDs) == 0 {
		t.Error("no hello extension process while serving")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("embed after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("embed did not stop within 20s of SIGTERM")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(pidsOf(hello)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if left := pidsOf(hello); len(left) > 0 {
		t.Errorf("hello extension processes %v outlived embed", left)
	}
}

// pidsOf returns the running processes of the binary at path.
func pidsOf(path string) []int {
	return testbin.Processes(func(dir string) bool {
		exe, err := os.Readlink(filepath.Join(dir, "exe"))
		return err == nil && exe == path
	})
}
