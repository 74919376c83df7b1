package fakemodel

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Script is what the stand-in answers.
type Script struct {
	// Tool is the tool the first model turn calls, by the name the agent
	// CLI gives it (for Claude Code: mcp__agenthost__notes__add_note).
	Tool string
	// Input is the tool call's arguments.
	Input map[string]any
	// Final is the text of the last turn, after a tool_result came back.
	Final string
	// NoTool is the text answered when the request's tools list lacks
	// Tool (the agent could not list it); empty, "no tool TOOL was
	// offered".
	NoTool string
	// Loop makes every answer a call of Tool, also after its results
	// came back: a runaway agent, for testing the agent's turn limit.
	Loop bool
	// OutputTokens is the usage each answer reports (default 1), for
	// testing the agent's budget limit, which it computes from usage.
	OutputTokens int
}

// Request is what the stand-in recorded of one POST /v1/messages.
type Request struct {
	Model  string
	Stream bool
	// Tools are the names of the tools the agent offered the model, in
	// its order (built-in tools such as Bash appear here when offered).
	Tools []string
	// ToolResults are the tool_result blocks of the request's
	// conversation, oldest first.
	ToolResults []ToolResult
	// Answer is what the stand-in answered: "tool_use", "final" or
	// "no-tool".
	Answer string
}

// ToolResult is a tool_result block the agent sent back.
type ToolResult struct {
	ToolUseID string
	IsError   bool
	// Text is the text of the result's content (its text blocks joined
	// by newlines, or the content itself when it is a string).
	Text string
}

// Server is the stand-in, an http.Handler. Serve it on loopback and point
// the agent at it (ANTHROPIC_BASE_URL). Safe for concurrent use.
type Server struct {
	script Script

	ids atomic.Int64

	mu       sync.Mutex
	requests []Request
	other    []string
}

// New returns a stand-in answering per s.
func New(s Script) *Server {
	if s.NoTool == "" {
		s.NoTool = "no tool " + s.Tool + " was offered"
	}
	if s.OutputTokens <= 0 {
		s.OutputTokens = 1
	}
	return &Server{script: s}
}

// Requests returns the POST /v1/messages requests recorded so far, in
// order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Other returns the other requests recorded so far ("METHOD /path"),
// those the Messages API does not define and the stand-in answered with
// 404 (or 200 for the CLI's HEAD /api/hello reachability probe).
func (s *Server) Other() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.other)
}

// wire types: only the fields the stand-in reads.
type messagesRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
}

// ServeHTTP answers POST /v1/messages (streamed as server-sent events
// when the request asks for it), POST /v1/messages/count_tokens, and HEAD
// or GET /api/hello; anything else is 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.messages(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		s.note(r)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"input_tokens":1}`)
	case r.URL.Path == "/api/hello" && (r.Method == http.MethodHead || r.Method == http.MethodGet):
		s.note(r)
		w.WriteHeader(http.StatusOK)
	default:
		s.note(r)
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"not in the stand-in"}}`, http.StatusNotFound)
	}
}

func (s *Server) note(r *http.Request) {
	s.mu.Lock()
	s.other = append(s.other, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"body is not a Messages request"}}`, http.StatusBadRequest)
		return
	}
	rec := Request{Model: req.Model, Stream: req.Stream}
	for _, t := range req.Tools {
		rec.Tools = append(rec.Tools, t.Name)
	}
	for _, m := range req.Messages {
		rec.ToolResults = append(rec.ToolResults, toolResults(m.Content)...)
	}
	var content []block
	stop := "end_turn"
	switch {
	case len(rec.ToolResults) > 0 && !s.script.Loop:
		rec.Answer = "final"
		content = []block{{Type: "text", Text: s.script.Final}}
	case slices.Contains(rec.Tools, s.script.Tool):
		rec.Answer = "tool_use"
		in, _ := json.Marshal(s.script.Input)
		if s.script.Input == nil {
			in = []byte("{}")
		}
		content = []block{{Type: "tool_use", ID: fmt.Sprintf("toolu_fake%04d", s.ids.Add(1)), Name: s.script.Tool, Input: in}}
		stop = "tool_use"
	default:
		rec.Answer = "no-tool"
		content = []block{{Type: "text", Text: s.script.NoTool}}
	}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()

	id := fmt.Sprintf("msg_fake%04d", s.ids.Add(1))
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 1, "output_tokens": s.script.OutputTokens},
		})
		return
	}
	stream(w, id, req.Model, content, stop, s.script.OutputTokens)
}

// stream writes the answer as the Messages API's server-sent events:
// message_start, per block content_block_start/delta/stop, message_delta,
// message_stop.
func stream(w http.ResponseWriter, id, model string, content []block, stop string, outTokens int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	event := func(name string, data any) {
		b, _ := json.Marshal(data)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1},
	}})
	for i, b := range content {
		switch b.Type {
		case "text":
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "text_delta", "text": b.Text}})
		case "tool_use":
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": string(b.Input)}})
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": outTokens}})
	event("message_stop", map[string]any{"type": "message_stop"})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// toolResults returns the tool_result blocks of a message's content.
func toolResults(raw json.RawMessage) []ToolResult {
	var blocks []block
	if json.Unmarshal(raw, &blocks) != nil {
		return nil // a plain string: no blocks
	}
	var out []ToolResult
	for _, b := range blocks {
		if b.Type != "tool_result" {
			continue
		}
		out = append(out, ToolResult{ToolUseID: b.ToolUseID, IsError: b.IsError, Text: contentText(b.Content)})
	}
	return out
}

// contentText is a tool_result's content as text: a string as it is, a
// list of blocks as their texts joined by newlines.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []block
	_ = json.Unmarshal(raw, &blocks)
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}
