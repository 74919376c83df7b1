package extrunner

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	good := `{"profiles":{"claude":{"command":"claude","args":["-p","{prompt}","--mcp-config","{mcpConfig}"],
		"env":{"ANTHROPIC_API_KEY":{"operatorSecret":"anthropic"}}}},
	  "runners":{
		"ok":{"user":"alice","servers":["notes"],"profile":"claude","prompt":"do it","schedule":"*/5 * * * *","timeLimit":"10m"},
		"noprofile":{"user":"alice","servers":["notes"],"profile":"gpt","prompt":"x"},
		"nouser":{"servers":["notes"],"profile":"claude","prompt":"x"},
		"noservers":{"user":"alice","profile":"claude","prompt":"x"},
		"badcron":{"user":"alice","servers":["notes"],"profile":"claude","prompt":"x","schedule":"every day"},
		"badlimit":{"user":"alice","servers":["notes"],"profile":"claude","prompt":"x","timeLimit":"forever"},
		"badresource":{"user":"alice","servers":["notes"],"profile":"claude","prompt":"x","resource":{"server":"files","uri":"f://x"}},
		"noprompt":{"user":"alice","servers":["notes"],"profile":"claude","prompt":" "}
	  }}`
	cfg, bad, err := ParseConfig(json.RawMessage(good))
	if err != nil {
		t.Fatal(err)
	}
	if bad["ok"] != nil {
		t.Errorf("the good runner: %v", bad["ok"])
	}
	r := cfg.Runners["ok"]
	if r.Concurrency != 1 || r.timeLimit.Minutes() != 10 || r.schedule == nil || cfg.MaxProcesses != DefaultMaxProcesses {
		t.Errorf("defaults: concurrency %d, limit %v, schedule %v, max %d", r.Concurrency, r.timeLimit, r.schedule, cfg.MaxProcesses)
	}
	if p := cfg.Profiles["claude"]; p.MCPConfig != DefaultMCPConfig || p.AllowedTools != "mcp__agenthost" || p.MaxTurns != DefaultMaxTurns {
		t.Errorf("profile defaults: %+v", p)
	}
	for name, want := range map[string]string{
		"noprofile": `profile "gpt": no such profile`, "nouser": "user: required", "noservers": "at least one server",
		"badcron": `schedule "every day"`, "badlimit": `timeLimit "forever"`, "badresource": `server "files" is not one of the runner's servers`,
		"noprompt": "prompt: required",
	} {
		if err := bad[name]; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `runner "`+name+`"`) {
			t.Errorf("runner %s: %v, want an error naming it and %q", name, err, want)
		}
	}

	// A broken profile, or a broken block, refuses the whole config.
	for raw, want := range map[string]string{
		`{"profiles":{"p":{"args":["x"]}}}`:                                       `profile "p": command: required`,
		`{"profiles":{"p":{"command":"c","args":["{promt}"]}}}`:                   "unknown placeholder {promt}",
		`{"profiles":{"p":{"command":"c","env":{"K":{"value":"v","env":"E"}}}}}`:  `env "K": want exactly one`,
		`{"profiles":{"p":{"command":"c","env":{"K":{}}}}}`:                       `env "K": want exactly one`,
		`{"profiles":{"p":{"command":"c","env":{"PATH":{"value":"/"}}}}}`:         `env "PATH"`,
		`{"profiles":{},"runnerz":{}}`:                                            `unknown field "runnerz"`,
		`{"profiles":{"p":{"command":"c","env":{"T":{"value":"{tokn}"}}}}}`:       "unknown placeholder {tokn}",
		`{"maxProcesses":-1}`:                                                     "maxProcesses -1",
		`{"profiles":{"p":{"command":"c","mcpConfig":"{\"url\":\"{mcpUrl}\"}"}}}`: "unknown placeholder {mcpUrl}",
		`{"profiles":{"p":{"command":"c","maxTurns":-2}}}`:                        "maxTurns -2",
	} {
		if _, _, err := ParseConfig(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"prompt": "say {token} hi", "token": "T", "mcpURL": "http://h/mcp"}
	for in, want := range map[string]string{
		"{prompt}":               "say {token} hi", // a value is never expanded again
		"--x={token}":            "--x=T",
		"{unknown} {token}}":     "{unknown} T}",
		`{"a":{"b":"{mcpURL}"}}`: `{"a":{"b":"http://h/mcp"}}`,
		"{":                      "{",
		"no braces":              "no braces",
	} {
		if got := expand(in, vals); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
	// The MCP config is JSON: values are escaped for it.
	got := expand(DefaultMCPConfig, jsonVals(map[string]string{"mcpURL": `http://h/"x`, "token": "t\\k"}))
	var v map[string]any
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatalf("the expanded MCP config is not JSON: %v\n%s", err, got)
	}
	srv := v["mcpServers"].(map[string]any)["agenthost"].(map[string]any)
	if srv["url"] != `http://h/"x` || srv["headers"].(map[string]any)["Authorization"] != `Bearer t\k` || srv["type"] != "http" {
		t.Errorf("the MCP config: %v", srv)
	}
}

func TestTail(t *testing.T) {
	tl := &tail{max: 8}
	_, _ = tl.Write([]byte("0123"))
	if tl.String() != "0123" {
		t.Errorf("%q", tl.String())
	}
	_, _ = tl.Write([]byte("456789ab"))
	if tl.String() != "…456789ab" {
		t.Errorf("%q, want the last 8 bytes marked as cut", tl.String())
	}
}

func TestParseUserRunners(t *testing.T) {
	cfg, _, err := ParseConfig(json.RawMessage(`{"profiles":{"claude":{"command":"claude"}},"allowUserRunners":true,
		"runners":{"ops":{"user":"alice","servers":["notes"],"profile":"claude","prompt":"x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	runners, bad, err := parseUserRunners(cfg, "alice", `{
		"mine":{"servers":["notes"],"profile":"claude","prompt":"p"},
		"asbob":{"user":"bob","servers":["notes"],"profile":"claude","prompt":"p"},
		"ops":{"servers":["notes"],"profile":"claude","prompt":"p"},
		"ownprofile":{"servers":["notes"],"profile":"mine","prompt":"p"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if bad["mine"] != nil || runners["mine"].User != "alice" || runners["mine"].Concurrency != 1 {
		t.Errorf("mine: %v %+v", bad["mine"], runners["mine"])
	}
	for name, want := range map[string]string{"asbob": "act as you", "ops": "the operator has a runner", "ownprofile": `profile "mine": no such profile`} {
		if err := bad[name]; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if _, _, err := parseUserRunners(cfg, "alice", `{"x":{"command":"/bin/sh"}}`); err == nil || !strings.Contains(err.Error(), `unknown field "command"`) {
		t.Errorf("a user's runner with a command of its own: %v, want refused", err)
	}
}
