package codemode

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/agenthost/agenthost/ext"
)

// maxTypeDepth bounds how deep a schema is spelled out; deeper is any.
const maxTypeDepth = 4

// TSType returns a compact TypeScript type for a JSON Schema (raw): objects
// with their properties (optional unless required), arrays, enums and
// consts as literal unions, anyOf/oneOf as unions, nullable types; what it
// cannot say ($ref, patterns, depth past maxTypeDepth) is any.
func TSType(schema json.RawMessage) string {
	var s any
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil {
		return "any"
	}
	return tsType(s, 0)
}

func tsType(v any, depth int) string {
	s, ok := v.(map[string]any)
	if !ok {
		if b, ok := v.(bool); ok && !b {
			return "never"
		}
		return "any"
	}
	if depth > maxTypeDepth {
		return "any"
	}
	if c, ok := s["const"]; ok {
		return literal(c)
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		parts := make([]string, 0, len(e))
		for _, x := range e {
			parts = append(parts, literal(x))
		}
		return strings.Join(parts, " | ")
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			return union(alts, depth)
		}
	}
	switch t := s["type"].(type) {
	case string:
		return typeNamed(t, s, depth)
	case []any:
		parts := make([]string, 0, len(t))
		for _, x := range t {
			if n, ok := x.(string); ok {
				parts = append(parts, typeNamed(n, s, depth))
			}
		}
		if len(parts) > 0 {
			return strings.Join(parts, " | ")
		}
	}
	if _, ok := s["properties"]; ok {
		return typeNamed("object", s, depth)
	}
	return "any"
}

func union(alts []any, depth int) string {
	seen := map[string]bool{}
	var parts []string
	for _, a := range alts {
		t := tsType(a, depth+1)
		if strings.Contains(t, " | ") || strings.HasPrefix(t, "{") {
			t = "(" + t + ")"
		}
		if !seen[t] {
			seen[t] = true
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, " | ")
}

func typeNamed(t string, s map[string]any, depth int) string {
	switch t {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		item := "any"
		if it, ok := s["items"]; ok {
			item = tsType(it, depth+1)
		}
		if strings.ContainsAny(item, " |") && !strings.HasPrefix(item, "{") {
			item = "(" + item + ")"
		}
		return item + "[]"
	case "object":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 {
			if ap, ok := s["additionalProperties"].(map[string]any); ok {
				return "Record<string, " + tsType(ap, depth+1) + ">"
			}
			return "object"
		}
		req := map[string]bool{}
		if r, ok := s["required"].([]any); ok {
			for _, x := range r {
				if n, ok := x.(string); ok {
					req[n] = true
				}
			}
		}
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString("{ ")
		for _, k := range keys {
			name := k
			if Ident(k) != k {
				name = strconv.Quote(k)
			}
			b.WriteString(name)
			if !req[k] {
				b.WriteString("?")
			}
			b.WriteString(": ")
			b.WriteString(tsType(props[k], depth+1))
			b.WriteString("; ")
		}
		b.WriteString("}")
		return b.String()
	}
	return "any"
}

func literal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "any"
	}
	return string(b)
}

// firstLine returns the first line of a description, cut to n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return strings.ReplaceAll(s, "*/", "* /")
}

// Declarations returns the TypeScript declarations of tools as code sees
// them: `declare const tools: { server: { tool(args: In): Promise<Out> } }`
// with each tool's first description line as a comment; Out is the output
// schema's type when the tool has one, else any (its text).
func Declarations(tools []ext.Tool) string {
	d := ext.ScopedDescription{Parts: declParts(tools)}
	s, _ := d.Render(nil)
	return s
}

// declParts returns [Declarations] in parts, each naming the tools it
// declares (a server's opening and closing lines name all its tools), so
// that a scoped view shows the declarations of its tools only.
func declParts(tools []ext.Tool) []ext.DescriptionPart {
	byServer := map[string][]ext.Tool{}
	var servers []string
	for _, t := range tools {
		server, _, _ := strings.Cut(t.Name, "/")
		if byServer[server] == nil {
			servers = append(servers, server)
		}
		byServer[server] = append(byServer[server], t)
	}
	sort.Strings(servers)
	parts := []ext.DescriptionPart{{Text: "declare const tools: {\n"}}
	for _, server := range servers {
		ts := byServer[server]
		sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.Name
		}
		parts = append(parts, ext.DescriptionPart{Text: fmt.Sprintf("  %s: {\n", Ident(server)), Tools: names})
		for _, t := range ts {
			var b strings.Builder
			_, tool, _ := strings.Cut(t.Name, "/")
			if d := firstLine(t.Description, 100); d != "" {
				fmt.Fprintf(&b, "    /** %s */\n", d)
			}
			out := "any"
			if len(t.OutputSchema) > 0 {
				out = TSType(t.OutputSchema)
			}
			fmt.Fprintf(&b, "    %s(args: %s): Promise<%s>;\n", Ident(tool), TSType(t.InputSchema), out)
			parts = append(parts, ext.DescriptionPart{Text: b.String(), Tools: []string{t.Name}})
		}
		parts = append(parts, ext.DescriptionPart{Text: "  };\n", Tools: names})
	}
	return append(parts, ext.DescriptionPart{Text: "  call(name: string, args?: object): Promise<any>;\n};\n"})
}
