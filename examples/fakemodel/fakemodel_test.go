package fakemodel_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agenthost/agenthost/examples/fakemodel"
)

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	res, err := http.Post(url+"/v1/messages?beta=true", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

// TestTurns: a request offering the tool gets a tool_use of it (streamed
// as input_json_delta), one carrying its tool_result gets the final text
// (not streamed here), one without the tool the no-tool text; each is
// recorded with its tools and results, and an unknown path is a 404
// recorded as other.
func TestTurns(t *testing.T) {
	fm := fakemodel.New(fakemodel.Script{Tool: "mcp__a__notes__add_note", Input: map[string]any{"text": "hi"}, Final: "done"})
	srv := httptest.NewServer(fm)
	defer srv.Close()

	res := post(t, srv.URL, `{"model":"m","stream":true,"tools":[{"name":"Bash"},{"name":"mcp__a__notes__add_note"}],
		"messages":[{"role":"user","content":"add hi"}]}`)
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("streamed answer has Content-Type %q", ct)
	}
	var events []string
	var partial string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, "input_json_delta") {
			var d struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				}
			}
			_ = json.Unmarshal([]byte(data), &d)
			partial = d.Delta.PartialJSON
		}
	}
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if !slices.Equal(events, want) || partial != `{"text":"hi"}` {
		t.Errorf("events %v input %q; want %v and the script's input", events, partial, want)
	}

	res = post(t, srv.URL, `{"model":"m","tools":[{"name":"mcp__a__notes__add_note"}],"messages":[
		{"role":"user","content":"add hi"},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"mcp__a__notes__add_note","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"{\"count\":1}"}]}]},
		{"role":"user","content":[{"type":"text","text":"<system-reminder>the CLI's own</system-reminder>"}]}]}`)
	var msg struct {
		Content    []struct{ Type, Text string }
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(res.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "done" || msg.StopReason != "end_turn" {
		t.Errorf("after the tool result: %+v", msg)
	}
	post(t, srv.URL, `{"model":"m","tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"x"}]}`)
	if res, err := http.Get(srv.URL + "/v1/models"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/models: %v %v, want 404", err, res)
	} else {
		_ = res.Body.Close()
	}

	reqs := fm.Requests()
	if len(reqs) != 3 {
		t.Fatalf("recorded %d requests, want 3", len(reqs))
	}
	if reqs[0].Answer != "tool_use" || !reqs[0].Stream || !slices.Equal(reqs[0].Tools, []string{"Bash", "mcp__a__notes__add_note"}) {
		t.Errorf("first request recorded as %+v", reqs[0])
	}
	if reqs[1].Answer != "final" || len(reqs[1].ToolResults) != 1 || reqs[1].ToolResults[0].Text != `{"count":1}` || reqs[1].ToolResults[0].ToolUseID != "toolu_1" {
		t.Errorf("second request recorded as %+v", reqs[1])
	}
	if reqs[2].Answer != "no-tool" {
		t.Errorf("third request recorded as %+v", reqs[2])
	}
	if o := fm.Other(); !slices.Equal(o, []string{"GET /v1/models"}) {
		t.Errorf("other requests %v", o)
	}
}

// TestLoop: with Loop, an answer after a tool result calls the tool
// again, reporting the scripted usage.
func TestLoop(t *testing.T) {
	fm := fakemodel.New(fakemodel.Script{Tool: "t", Loop: true, OutputTokens: 5000})
	srv := httptest.NewServer(fm)
	defer srv.Close()
	res := post(t, srv.URL, `{"model":"m","tools":[{"name":"t"}],"messages":[
		{"role":"user","content":"go"},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"t","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}]}`)
	var msg struct {
		Content []struct{ Type, Name string }
		Usage   struct {
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Usage.OutputTokens != 5000 {
		t.Errorf("looping answer after a result: %+v", msg)
	}
	if r := fm.Requests(); len(r) != 1 || r[0].Answer != "tool_use" || len(r[0].ToolResults) != 1 || r[0].ToolResults[0].Text != "ok" {
		t.Errorf("recorded %+v", r)
	}
}
