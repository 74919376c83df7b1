package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/examples/internal/testbin"
)

// needPart skips a test whose system part is missing, loudly, and fails
// it under CI=true.
func needPart(t *testing.T, part string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s is missing: %v", part, err)
	}
	t.Skipf("SKIPPED: needs %s: %v (under CI=true this fails)", part, err)
}

// needSandbox checks that bubblewrap can make a sandbox here, as the host
// will (a user namespace unless root).
func needSandbox(t *testing.T) {
	t.Helper()
	args := []string{"--ro-bind", "/", "/", "--unshare-pid", "true"}
	if os.Geteuid() != 0 {
		args = append([]string{"--unshare-user"}, args...)
	}
	out, err := exec.Command("bwrap", args...).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	needPart(t, "a working bwrap (apt-get install bubblewrap; user namespaces allowed)", err)
}

// needCgroup checks that the host put process pid (one of its service
// processes) in a cgroup of its own: only then does a grandchild that left
// the process group (setsid) get killed.
func needCgroup(t *testing.T, pid int) {
	t.Helper()
	needPart(t, "a cgroup v2 hierarchy the host may create cgroups in", inCgroup(pid))
}

// inCgroup says why process pid is in no cgroup of the host's, or nil.
func inCgroup(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err == nil && !bytes.Contains(b, []byte("/agenthost-")) {
		err = fmt.Errorf("the host put its service process in no cgroup of its own: %s", bytes.TrimSpace(b))
	}
	return err
}

// probeReport is what the probe server's probe tool answers.
type probeReport struct {
	UID      int               `json:"uid"`
	Home     string            `json:"home"`
	Writable bool              `json:"writable"`
	Procs    int               `json:"procs"`
	Read     map[string]string `json:"read"`
	List     map[string]string `json:"list"`
	Mint     map[string]string `json:"mint"`
	Canaries []string          `json:"canaries"`
}

// TestUserServersAreSandboxed (issue 10, item 3): under userServers "all",
// a user's own stdio server is a hostile program that tries to read the
// secrets key, the databases and another user's folder, to read another
// user's server's environment (which holds that user's canary token), and
// to mint a token through the control socket. Every attempt fails and no
// canary is seen, while its own tool is listed and callable through the
// host, and its own folder is writable.
func TestUserServersAreSandboxed(t *testing.T) {
	needSandbox(t)
	b := build(t)
	probe := testbin.Build(t, pkg+"examples/internal/probe")
	e := newEnv(t, b, map[string]any{"userServers": "all"})
	nonce := strconv.FormatInt(time.Now().UnixNano(), 16)
	canary := func(u string) string { return "CANARY-" + u + "-" + nonce }
	t.Cleanup(func() { // after the host stopped (cleanups run last first)
		if strings.Contains(e.serveOut.String(), "CANARY-") {
			t.Error("a canary token is in the host's log")
		}
	})
	e.startServe()
	data := filepath.Join(e.dir, "data")
	own, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{"command": probe}}})
	values, _ := json.Marshal(map[string]string{"servers": string(own)})
	for _, u := range []string{"alice", "bob"} {
		e.must(canary(u), "secret", "set", "--user", u, "--ext", "mcp", "token:u_probe")
		e.must("", "settings", "set", "--user", u, "--ext", "mcp", "user-servers", string(values))
	}
	// Bob's server runs, with his canary in its environment.
	if names := e.toolNames("bob"); !strings.Contains(strings.Join(names, " "), "u_probe/probe") {
		t.Fatalf("bob's own server is not listed: %v", names)
	}
	if len(pidsWithEnv("MCP_ACCESS_TOKEN="+canary("bob"))) == 0 {
		t.Fatal("bob's server does not hold his canary: the test would prove nothing")
	}
	// Alice's server is listed, then attacks.
	if names := e.toolNames("alice"); !strings.Contains(strings.Join(names, " "), "u_probe/probe") {
		t.Fatalf("alice's own server is not listed: %v", names)
	}
	var read []string
	ents, _ := os.ReadDir(data)
	for _, d := range ents {
		if d.Type().IsRegular() {
			read = append(read, filepath.Join(data, d.Name())) // settings.db, auth.db, the secrets file and its key
		}
	}
	bobDir := filepath.Join(data, "users", "bob")
	_ = filepath.WalkDir(bobDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			read = append(read, p)
		}
		return nil
	})
	if len(read) < 4 {
		t.Fatalf("only %d files to steal: %v", len(read), read)
	}
	args, _ := json.Marshal(map[string]any{"read": read, "canary": "CANARY-",
		"list": []string{data, filepath.Join(data, "users"), bobDir, filepath.Join(bobDir, "mcp", "sandbox")},
		"mint": []string{filepath.Join(data, "agenthost.sock")}})
	out := e.must("", "call", "--user", "alice", "u_probe/probe", string(args))
	var res struct {
		StructuredContent probeReport `json:"structuredContent"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("the probe's answer: %v\n%s", err, out)
	}
	r := res.StructuredContent
	t.Logf("alice's server: uid %d, home %s, %d processes visible, writable %v", r.UID, r.Home, r.Procs, r.Writable)
	for kind, m := range map[string]map[string]string{"read": r.Read, "list": r.List, "mint": r.Mint} {
		if len(m) == 0 {
			t.Errorf("no %s attempt was reported", kind)
		}
		for target, got := range m {
			// The folders leading to its own are there, holding nothing
			// else.
			if kind == "list" && (target == data && got == "entries: users" || target == filepath.Join(data, "users") && got == "entries: alice") {
				continue
			}
			if !strings.HasPrefix(got, "failed: ") {
				t.Errorf("%s %s: %s", kind, target, got)
			}
		}
	}
	if len(r.Canaries) != 0 {
		t.Errorf("alice's server saw canaries in other processes' environments: %v", r.Canaries)
	}
	if !r.Writable {
		t.Error("alice's server cannot write its own folder")
	}
	if os.Geteuid() == 0 && (r.UID == 0 || r.UID == os.Getuid()) {
		t.Errorf("alice's server runs as uid %d: want one of her own", r.UID)
	}
	if strings.Contains(out, canary("bob")) {
		t.Error("bob's canary leaked into alice's result")
	}
	if toks := e.must("", "token", "list", "--json"); strings.Contains(toks, `"probe"`) {
		t.Errorf("the probe minted a token: %s", toks)
	}
}

// wrapped is an operator stdio server behind a wrapper that leaves a
// child in its group and one out of it (setsid), both holding its stderr;
// every process carries marker.
func wrapped(b bins, marker string) map[string]any {
	return map[string]any{"command": "/bin/sh",
		"args": []string{"-c", `sleep 1000 & setsid sleep 1000 & exec "$0"`, b.notes},
		"env":  map[string]string{"MARKER": marker}}
}

func killMarked(marker string) {
	for _, pid := range pidsWithEnv("MARKER=" + marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL) // this test's own
	}
}

// serveWrapped serves alice a wrapped server (a wrapper whose children
// carry a marker of name) with `agenthost serve`, and waits until the
// wrapper's three processes run; they are killed when the test ends.
func serveWrapped(t *testing.T, name string) (*env, string) {
	t.Helper()
	b := build(t)
	marker := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	t.Cleanup(func() { killMarked(marker) })
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"w": wrapped(b, marker)}})
	e.startServe()
	if names := e.toolNames("alice"); !hasPrefix(names, "w/") {
		t.Fatalf("the wrapped server is not listed: %v", names)
	}
	eventually(t, "the wrapper's children run", func() bool { return len(pidsWithEnv("MARKER="+marker)) == 3 })
	return e, marker
}

// TestKilledHostLeavesNothing (issue 10, item 4): kill -9 of `agenthost
// serve` leaves a wrapped server's grandchildren running (the server dies
// with it); the next start kills them: 0 processes left.
func TestKilledHostLeavesNothing(t *testing.T) {
	e, marker := serveWrapped(t, "killed-host")
	needCgroup(t, pidsWithEnv("MARKER=" + marker)[0])
	_ = e.serve.Process.Kill()
	_, _ = e.serve.Process.Wait()
	eventually(t, "the server died with its host", func() bool { return len(pidsWithEnv("MARKER="+marker)) == 2 })
	time.Sleep(200 * time.Millisecond)
	if n := len(pidsWithEnv("MARKER=" + marker)); n != 2 {
		t.Fatalf("%d processes after the kill, want the 2 grandchildren the host left", n)
	}
	e.startServe()
	eventually(t, "the new host reaped them", func() bool { return len(pidsWithEnv("MARKER="+marker)) == 0 })
}

// TestSIGTERMWithGrandchildHoldingStderr (issue 10, item 4): SIGTERM to
// `agenthost serve` with a running wrapped server whose grandchildren
// hold its stderr ends the host within 3 s, and leaves no process.
func TestSIGTERMWithGrandchildHoldingStderr(t *testing.T) {
	e, marker := serveWrapped(t, "sigterm")
	// Without a cgroup the setsid grandchild outlives the host (and is
	// killed at the next start); the host must exit in time all the same.
	cgErr := inCgroup(pidsWithEnv("MARKER=" + marker)[0])
	start := time.Now()
	_ = e.serve.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { _, err := e.serve.Process.Wait(); done <- err }()
	select {
	case <-done:
		t.Logf("agenthost serve exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		_ = e.serve.Process.Kill()
		<-done
		t.Fatal("agenthost serve did not exit within 3 s of SIGTERM")
	}
	if cgErr != nil {
		t.Logf("no cgroup (%v): not checking what is left", cgErr)
		return
	}
	if left := pidsWithEnv("MARKER=" + marker); len(left) != 0 {
		var cmds bytes.Buffer
		for _, pid := range left {
			c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			fmt.Fprintf(&cmds, "%d %q; ", pid, c)
		}
		t.Errorf("%d processes left after the host stopped: %s", len(left), cmds.String())
	}
}

// TestNoSandbox (issue 10, item 3): where no sandbox works (here: no bwrap
// on the host's PATH), userServers "all" refuses to start, naming the
// reason and services.unsafeSharedUID; with that risk accepted the host
// starts and the users' own servers run as its own user, but the control
// socket still refuses them (same uid: it checks the peer is none of the
// host's processes).
func TestNoSandbox(t *testing.T) {
	b := build(t)
	probe := testbin.Build(t, pkg+"examples/internal/probe")
	noBwrap := []string{"PATH=" + t.TempDir()}
	e := newEnv(t, b, map[string]any{"userServers": "all"})
	cmd := exec.Command(b.agenthost, "--config", e.cfg, "serve")
	cmd.Env = append(os.Environ(), noBwrap...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "services.unsafeSharedUID") || !strings.Contains(string(out), "bubblewrap") {
		t.Fatalf("serve without a sandbox under userServers all: %v\n%s\nwant a refusal naming bubblewrap and services.unsafeSharedUID", err, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(string(out)))

	e = newEnv(t, b, map[string]any{"userServers": "all"}, map[string]any{"services": map[string]any{"unsafeSharedUID": true}})
	e.serveEnv = noBwrap
	e.startServe()
	own, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probe": map[string]any{"command": probe}}})
	values, _ := json.Marshal(map[string]string{"servers": string(own)})
	e.must("", "settings", "set", "--user", "alice", "--ext", "mcp", "user-servers", string(values))
	sock := filepath.Join(e.dir, "data", "agenthost.sock")
	args, _ := json.Marshal(map[string]any{"mint": []string{sock}})
	res := e.must("", "call", "--user", "alice", "u_probe/probe", string(args))
	var r struct {
		StructuredContent probeReport `json:"structuredContent"`
	}
	if err := json.Unmarshal([]byte(res), &r); err != nil {
		t.Fatalf("the probe's answer: %v\n%s", err, res)
	}
	if r.StructuredContent.UID != os.Getuid() {
		t.Errorf("the unsandboxed server runs as uid %d, want the host's %d: the test proves nothing", r.StructuredContent.UID, os.Getuid())
	}
	if got := r.StructuredContent.Mint[sock]; !strings.HasPrefix(got, "failed: ") {
		t.Errorf("a service process of the host's own uid used the control socket: %s", got)
	}
}
