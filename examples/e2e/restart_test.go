package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCallsDuringExtensionRestart (issue 17, item 7): ext-mcp is killed
// (SIGKILL) while 40 users are active; once its successor runs, 18 of them
// (the last in name order, re-activated last but for their calls) call
// their server's tool while the users are being re-activated in it. Every
// call succeeds: a call that arrives before its user is re-activated waits
// for it, instead of failing with "no longer available". The test logs the
// window: from the kill to the successor, and from there to the last
// call's answer.
func TestCallsDuringExtensionRestart(t *testing.T) {
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{
		"notes": map[string]any{"command": b.notes},
	}})
	e.startServe()
	const users, callers = 40, 18
	name := func(i int) string { return fmt.Sprintf("user%02d", i) }
	cli := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, e.bin.agenthost, append([]string{"--config", e.cfg}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// Every user is active, their notes server connected.
	var wg sync.WaitGroup
	errs := make([]error, users)
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := cli("call", "--user", name(i), "notes/echo", `{"text":"before"}`); err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s's call before the crash: %v", name(i), err)
		}
	}
	type extInfo struct {
		Name     string
		State    string
		PID      int
		Restarts int
	}
	mcp := func() extInfo {
		t.Helper()
		out := e.must("", "ext", "list", "--json")
		var exts []extInfo
		if err := json.Unmarshal([]byte(out), &exts); err != nil {
			t.Fatalf("ext list: %v\n%s", err, out)
		}
		i := slices.IndexFunc(exts, func(x extInfo) bool { return x.Name == "mcp" })
		if i < 0 {
			t.Fatalf("no mcp in %s", out)
		}
		return exts[i]
	}
	before := mcp()
	if before.PID == 0 {
		t.Fatal("ext list shows no pid for mcp")
	}
	killed := time.Now()
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the successor of ext-mcp runs", func() bool {
		now := mcp()
		return now.State == "running" && now.PID != 0 && now.PID != before.PID
	})
	up := time.Now()
	// The last 18 users call now, while the successor re-activates the 40
	// (8 at a time).
	took := make([]time.Duration, 0, callers)
	var mu sync.Mutex
	for i := users - callers; i < users; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			out, err := cli("call", "--user", name(i), "notes/echo", `{"text":"after"}`)
			if err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out)
			}
			mu.Lock()
			took = append(took, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	last := time.Now()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s's call during the re-activation: %v", name(i), err)
		}
	}
	if got := mcp().Restarts; got != 1 {
		t.Errorf("restarts = %d, want 1", got)
	}
	slices.Sort(took)
	t.Logf("%d active users, %d calling: kill → successor running %v; successor running → last call answered %v (calls p50 %v, max %v)",
		users, callers, up.Sub(killed).Round(time.Millisecond), last.Sub(up).Round(time.Millisecond),
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
