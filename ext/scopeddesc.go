package ext

import (
	"bytes"
	"encoding/json"
	"strings"
)

// MetaScopedDescription is the key, in a tool's [Tool.Meta], of the
// [ScopedDescription] of a tool that describes other tools (code mode's
// code/run, whose description declares the tools a script may call). The
// host honours it only from an extension with [CapabilityUserTools] (one
// the host tells users' tools), strips it from every listing, and shows a
// scoped token's view the description re-assembled from the parts its
// scope reaches; such a tool is in a scope when at least one tool its
// parts name is, and absent otherwise, as if it did not exist.
const MetaScopedDescription = "agenthost/scopedDescription"

// ScopedDescription is a description in parts, each shown only when the
// scope reaches a tool it names.
type ScopedDescription struct {
	Parts []DescriptionPart `json:"parts"`
}

// DescriptionPart is text shown always (Tools empty) or when a scope
// reaches at least one of Tools ("server/tool" names).
type DescriptionPart struct {
	Text  string   `json:"text"`
	Tools []string `json:"tools,omitempty"`
}

// WithScopedDescription returns t with d under [MetaScopedDescription] in
// its Meta (other keys kept).
func WithScopedDescription(t Tool, d *ScopedDescription) (Tool, error) {
	m := map[string]json.RawMessage{}
	if len(t.Meta) > 0 {
		if err := json.Unmarshal(t.Meta, &m); err != nil {
			return t, err
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return t, err
	}
	m[MetaScopedDescription] = b
	if t.Meta, err = json.Marshal(m); err != nil {
		return t, err
	}
	return t, nil
}

// SplitScopedDescription returns t without [MetaScopedDescription] in its
// Meta, and the description found there (nil when none, or unreadable).
func SplitScopedDescription(t Tool) (Tool, *ScopedDescription) {
	if len(t.Meta) == 0 || !bytes.Contains(t.Meta, []byte(MetaScopedDescription)) {
		return t, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t.Meta, &m) != nil {
		return t, nil
	}
	raw, ok := m[MetaScopedDescription]
	if !ok {
		return t, nil
	}
	delete(m, MetaScopedDescription)
	if len(m) == 0 {
		t.Meta = nil
	} else if b, err := json.Marshal(m); err == nil {
		t.Meta = b
	}
	var d ScopedDescription
	if json.Unmarshal(raw, &d) != nil {
		return t, nil
	}
	return t, &d
}

// Render returns the description as scope s sees it, and whether s reaches
// any tool the parts name (when not, the tool is out of s). A nil scope
// reaches every part.
func (d *ScopedDescription) Render(s *Scope) (string, bool) {
	var b strings.Builder
	reached := false
	for _, p := range d.Parts {
		if len(p.Tools) == 0 {
			b.WriteString(p.Text)
			continue
		}
		for _, n := range p.Tools {
			if s.AllowsTool(n) {
				reached = true
				b.WriteString(p.Text)
				break
			}
		}
	}
	return b.String(), reached
}

// Reaches reports whether s reaches any tool the parts name.
func (d *ScopedDescription) Reaches(s *Scope) bool {
	for _, p := range d.Parts {
		for _, n := range p.Tools {
			if s.AllowsTool(n) {
				return true
			}
		}
	}
	return false
}
