package e2e_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoBannerInspectorCommand runs the MCP Inspector command that
// `agenthost serve --demo-user` prints, as printed, against that host: the
// package it names must be the one examples/e2e/testdata/inspector pins
// (installed there by `npm ci`, so the test runs it without the network),
// and the inspector must list the demo user's tools through the printed
// URL, transport and bearer header on the machine's Node (20, as the
// README asks).
func TestDemoBannerInspectorCommand(t *testing.T) {
	bin := inspectorBin(t)
	b := build(t)
	e := newEnv(t, b, map[string]any{"mcpServers": map[string]any{"notes": map[string]any{"command": b.notes}}})

	out := &lockedBuffer{}
	logs := &lockedBuffer{}
	cmd := exec.Command(b.agenthost, "--config", e.cfg, "--log-level", "warn", "serve", "--demo-user", "demo")
	cmd.Stdout, cmd.Stderr = out, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopServeProcess(t, cmd)
		if t.Failed() {
			t.Logf("serve's output:\n%s\nhost log:\n%s", out.String(), logs.String())
		}
	})
	eventually(t, "the demo banner prints the inspector command", func() bool {
		return strings.Contains(out.String(), "--method tools/list\n")
	})

	var line string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, "npx ") {
			line = strings.TrimSpace(l)
		}
	}
	args := shellWords(t, line)
	// npx -y @modelcontextprotocol/inspector@V --cli URL ...
	if len(args) < 4 || args[0] != "npx" || args[1] != "-y" || args[3] != "--cli" {
		t.Fatalf("the banner's inspector command is not `npx -y PACKAGE@VERSION --cli ...`: %q", line)
	}
	name, version, ok := strings.Cut(strings.TrimPrefix(args[2], "@"), "@")
	if !ok || "@"+name != "@modelcontextprotocol/inspector" {
		t.Fatalf("the banner's command does not pin @modelcontextprotocol/inspector: %q", line)
	}
	if pinned := lockedVersion(t, "@modelcontextprotocol/inspector"); pinned != version {
		t.Fatalf("the banner names inspector %s; testdata/inspector/package-lock.json pins %s", version, pinned)
	}
	for _, want := range []string{e.url + "/mcp", "--transport", "http", "--header", "--method", "tools/list"} {
		if !strings.Contains(strings.Join(args, " "), want) {
			t.Errorf("the banner's command lacks %q: %q", want, line)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	insp := exec.CommandContext(ctx, bin, args[3:]...)
	res, err := insp.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the banner's inspector command failed: %v\n%s\n%s", err, res, stderr)
	}
	var listed struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(res, &listed); err != nil {
		t.Fatalf("the inspector printed no tool list: %v\n%s", err, res)
	}
	var names []string
	for _, tl := range listed.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "notes__add_note") {
		t.Errorf("the inspector listed %v, want notes__add_note among them", names)
	}
}

// inspectorBin returns the pinned MCP Inspector installed in
// testdata/inspector. Missing, the test is skipped loudly, except under
// CI=true, where it fails.
func inspectorBin(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("testdata/inspector/node_modules/.bin/mcp-inspector")
	if err == nil {
		if _, err = os.Stat(bin); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and @modelcontextprotocol/inspector is missing (%v): .ci/run installs it with `npm ci` in examples/e2e/testdata/inspector", err)
	}
	t.Skipf("SKIPPING THE INSPECTOR END-TO-END TEST: @modelcontextprotocol/inspector is missing (%v): run `npm ci` in examples/e2e/testdata/inspector; under CI=true this fails", err)
	return ""
}

// lockedVersion is the version testdata/inspector/package-lock.json pins
// for pkg.
func lockedVersion(t *testing.T, pkg string) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/inspector/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct{ Version string }
	}
	if err := json.Unmarshal(raw, &lock); err != nil {
		t.Fatalf("testdata/inspector/package-lock.json: %v", err)
	}
	return lock.Packages["node_modules/"+pkg].Version
}

// shellWords splits a command line printed for a POSIX shell: words
// separated by spaces, double quotes grouping (the banner quotes nothing
// else).
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
