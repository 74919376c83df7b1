package mcpendpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/agenthost/ext"
)

// searchTool is the endpoint's own tool, listed to the users who have
// deferred tools.
var searchTool = &mcp.Tool{
	Name:  searchToolName,
	Title: "Search tools",
	Description: "Find more tools by keywords, matched against tool names and descriptions. " +
		"The tools found join your tool list and can then be called by name.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"query":{"type":"string","description":"Keywords, separated by spaces."},` +
		`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"The most tools to return (default 10)."}},` +
		`"required":["query"]}`),
	OutputSchema: json.RawMessage(`{"type":"object","properties":{"tools":{"type":"array","items":{"type":"object",` +
		`"properties":{"name":{"type":"string"},"description":{"type":"string"},"codeOnly":{"type":"boolean"},"inputSchema":{"type":"object"}},"required":["name"]}}},"required":["tools"]}`),
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
}

// searchToolJSON is searchTool as listed.
var searchToolJSON, _ = json.Marshal(searchTool)

const (
	defaultSearchLimit = 10
	maxSearchLimit     = 50
)

// searchIn is search_tools' input.
type searchIn struct {
	Query string `json:"query"`
	Limit int    `json:"limit"`
}

// searchOut is search_tools' structured output.
type searchOut struct {
	Tools []searchHit `json:"tools"`
}

type searchHit struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// CodeOnly marks a codemode tool: Name is its host name, for
	// tools.call in code/run, and InputSchema its arguments.
	CodeOnly    bool            `json:"codeOnly,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// search ranks t's deferred tools by how many of the query's keywords
// they contain. It returns the best ones, or the error result to answer
// with.
func search(t *toolTable, args json.RawMessage) ([]*entry, string, json.RawMessage) {
	var in searchIn
	if len(args) > 0 {
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, "", errorResult(`search_tools takes {"query": string, "limit"?: integer}: ` + err.Error())
		}
	}
	terms := strings.Fields(strings.ToLower(in.Query))
	if len(terms) == 0 {
		return nil, "", errorResult("search_tools needs a query: give one or more keywords")
	}
	limit := in.Limit
	if limit <= 0 {
		limit = defaultSearchLimit
	}
	limit = min(limit, maxSearchLimit)
	type scored struct {
		ent   *entry
		score int
	}
	var hits []scored
	for _, ent := range slices.Concat(t.deferred, t.codeOnly) {
		n := 0
		for _, term := range terms {
			if strings.Contains(ent.search, term) {
				n++
			}
		}
		if n > 0 {
			hits = append(hits, scored{ent, n})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	hits = hits[:min(len(hits), limit)]
	out := make([]*entry, len(hits))
	for i, h := range hits {
		out[i] = h.ent
	}
	return out, in.Query, nil
}

// searchResult is search_tools' answer for the tools found.
func searchResult(found []*entry, query string) json.RawMessage {
	out := searchOut{Tools: make([]searchHit, 0, len(found))}
	var text strings.Builder
	if len(found) == 0 {
		text.WriteString("No tools match " + fmt.Sprintf("%q", clip(query, 200)) + ". Try other keywords.")
	} else {
		fmt.Fprintf(&text, "Found %d tool(s); they are now in your tool list (those marked only from code are called in code/run's scripts):", len(found))
		for _, ent := range found {
			if ent.exposure == ext.ExposureCodemode {
				in := ent.src.InputSchema
				if !present(in) {
					in = defaultSchema
				}
				out.Tools = append(out.Tools, searchHit{Name: ent.original, Description: ent.src.Description, CodeOnly: true, InputSchema: in})
				fmt.Fprintf(&text, "\n- %s (only from code: tools.call(%q, args) in code/run; arguments %s)", ent.original, ent.original, in)
			} else {
				out.Tools = append(out.Tools, searchHit{Name: ent.name, Description: ent.src.Description})
				text.WriteString("\n- " + ent.name)
			}
			if d := ent.src.Description; d != "" {
				text.WriteString(": " + d)
			}
		}
	}
	b, _ := json.Marshal(struct {
		Content           []textBlock `json:"content"`
		StructuredContent searchOut   `json:"structuredContent"`
	}{[]textBlock{{"text", text.String()}}, out})
	return b
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// searchTools serves search_tools on a session: the tools found join
// this session's list, which is then notified.
func (s *session) searchTools(args json.RawMessage) json.RawMessage {
	u := s.u
	u.mu.Lock()
	t := u.table.Load()
	found, query, bad := search(t, args)
	if bad != nil {
		u.mu.Unlock()
		return bad
	}
	changed := false
	for _, ent := range found {
		if ent.exposure == ext.ExposureCodemode {
			continue // callable from code only: never listed
		}
		if !s.found[ent.original] {
			if s.found == nil {
				s.found = map[string]bool{}
			}
			s.found[ent.original] = true
			changed = true
		}
	}
	if changed {
		s.view = t.viewWith(s.found)
	}
	u.mu.Unlock()
	if changed {
		_ = s.push(toolsChanged)
	}
	return searchResult(found, query)
}
