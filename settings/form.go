package settings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// FormVersion is the descriptor version this package reads and writes.
const FormVersion = 1

// Scope says whose values a section holds.
type Scope string

// The scopes a section may have.
const (
	// ScopeUser sections hold one set of values per user.
	ScopeUser Scope = "user"
	// ScopeSystem sections hold values that the operator sets for everyone.
	ScopeSystem Scope = "system"
)

// NodeType is the kind of a form [Node].
type NodeType string

// The node types of descriptor v1. Any other type is an error at
// registration ([ValidateForm]).
const (
	// NodeForm groups children. With Bind set, its children's values nest
	// in an object under that key; without, they sit in the parent object.
	NodeForm NodeType = "form"
	// NodeToggle is an on/off switch; its value is a JSON boolean.
	NodeToggle NodeType = "toggle"
	// NodeText is a one-line string.
	NodeText NodeType = "text"
	// NodeLongText is a multi-line string, optionally in a syntax such as
	// "json" (then the string must hold valid JSON, and with Schema set,
	// JSON that satisfies that JSON Schema).
	NodeLongText NodeType = "longtext"
	// NodeSelect is one string out of Options.
	NodeSelect NodeType = "select"
	// NodeNumber is a JSON number, optionally bounded and integral.
	NodeNumber NodeType = "number"
	// NodeSecret is a write-only string: its value goes to the secrets
	// store, never into settings, and is never read back.
	NodeSecret NodeType = "secret"
)

// SyntaxJSON is the longtext syntax whose value must be valid JSON.
const SyntaxJSON = "json"

// Section is one settings section an extension offers: a titled form whose
// values are stored per user (or once, for system sections). It is the Go
// form of ext.SettingsSection, whose Form field carries [Section.Form] as
// raw JSON.
type Section struct {
	// ID names the section within its extension, e.g. "servers".
	ID string `json:"id"`
	// Title is shown as the section's heading.
	Title string `json:"title"`
	// Description is optional text shown under the title.
	Description string `json:"description,omitempty"`
	// Scope is [ScopeUser] or [ScopeSystem].
	Scope Scope `json:"scope"`
	// Form describes the section's fields.
	Form Form `json:"form"`
}

// Form is a form descriptor: {"v":1,"root":{...}}. Root must be a node of
// type [NodeForm].
type Form struct {
	// V is the descriptor version; it must be [FormVersion].
	V int `json:"v"`
	// Root is the top-level form node.
	Root *Node `json:"root"`
}

// Option is one choice of a [NodeSelect] node.
type Option struct {
	// Value is what is stored when the option is chosen.
	Value string `json:"value"`
	// Label is what the user sees; empty means Value.
	Label string `json:"label,omitempty"`
}

// Node is one element of a form. Which fields apply depends on Type;
// [ValidateForm] refuses fields that do not apply, so a misplaced attribute
// is caught at registration rather than silently ignored.
type Node struct {
	// Type is the kind of node.
	Type NodeType `json:"type"`
	// Name is the key of the node's value in its object. It is required
	// for every node except forms, which use Bind instead.
	Name string `json:"name,omitempty"`
	// Label is the field's caption.
	Label string `json:"label,omitempty"`
	// Help is a longer explanation shown with the field.
	Help string `json:"help,omitempty"`
	// Children are the nodes of a form.
	Children []*Node `json:"children,omitempty"`
	// Bind (forms only) is the key under which the children's values nest;
	// empty means they sit directly in the parent object.
	Bind string `json:"bind,omitempty"`
	// Submit (forms only) is the submit button's label.
	Submit string `json:"submit,omitempty"`
	// Default is the value the field has when the user has set none.
	Default json.RawMessage `json:"default,omitempty"`
	// Required means the value must be present (and, for text, non-empty).
	Required bool `json:"required,omitempty"`
	// Placeholder is hint text shown in an empty field.
	Placeholder string `json:"placeholder,omitempty"`
	// Warning is text the UI shows prominently, e.g. on a toggle that
	// lends the operator's credential to the user's agent.
	Warning string `json:"warning,omitempty"`
	// Syntax (longtext only) names the text's syntax for highlighting;
	// [SyntaxJSON] also means the value must be valid JSON.
	Syntax string `json:"syntax,omitempty"`
	// Lang (longtext only) is the editor language, e.g. "json".
	Lang string `json:"lang,omitempty"`
	// Schema (longtext with syntax "json" only) is a JSON Schema the
	// parsed value must satisfy.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Options (select only) are the allowed values.
	Options []Option `json:"options,omitempty"`
	// Min and Max (number only) bound the value, inclusive.
	Min *float64 `json:"min,omitempty"`
	// Max is the inclusive upper bound of a number.
	Max *float64 `json:"max,omitempty"`
	// Step (number only) is the UI's increment; it is not enforced.
	Step *float64 `json:"step,omitempty"`
	// Integer (number only) means the value must be a whole number.
	Integer bool `json:"integer,omitempty"`
	// MaxLength (text and longtext) limits the value's length in Unicode
	// code points; 0 means no limit.
	MaxLength int `json:"maxLength,omitempty"`
	// Pattern (text only) is a regular expression (RE2 syntax) that the
	// whole value must match, like an HTML input's pattern attribute.
	Pattern string `json:"pattern,omitempty"`
	// Status (toggle only) names an entry of the extension's per-user
	// status (ext.StatusEntry.Name, e.g. the MCP server the switch turns
	// on): a UI shows that entry's state beside the switch.
	Status string `json:"status,omitempty"`
}

// NewForm returns a form descriptor whose root form holds children.
func NewForm(children ...*Node) Form {
	return Form{V: FormVersion, Root: &Node{Type: NodeForm, Children: children}}
}

// Group returns a nested form node. With bind non-empty its children's
// values nest under that key; with bind empty they sit in the parent
// object, and the group only groups them visually.
func Group(bind, label string, children ...*Node) *Node {
	return &Node{Type: NodeForm, Bind: bind, Label: label, Children: children}
}

// Toggle returns a boolean switch stored under name.
func Toggle(name, label string) *Node {
	return &Node{Type: NodeToggle, Name: name, Label: label}
}

// Text returns a one-line text field stored under name.
func Text(name, label string) *Node {
	return &Node{Type: NodeText, Name: name, Label: label}
}

// LongText returns a multi-line text field stored under name.
func LongText(name, label string) *Node {
	return &Node{Type: NodeLongText, Name: name, Label: label}
}

// JSONEditor returns a longtext field whose value must be JSON satisfying
// schema (a JSON Schema, e.g. from [SchemaFor]); a nil schema only
// requires valid JSON.
func JSONEditor(name, label string, schema json.RawMessage) *Node {
	return &Node{Type: NodeLongText, Name: name, Label: label, Syntax: SyntaxJSON, Lang: "json", Schema: schema}
}

// Select returns a choice of one of options, stored under name.
func Select(name, label string, options ...Option) *Node {
	return &Node{Type: NodeSelect, Name: name, Label: label, Options: options}
}

// Number returns a numeric field stored under name.
func Number(name, label string) *Node {
	return &Node{Type: NodeNumber, Name: name, Label: label}
}

// Secret returns a write-only field: its value goes to the secrets store
// under name (see [SplitSecrets]) and is never read back.
func Secret(name, label string) *Node {
	return &Node{Type: NodeSecret, Name: name, Label: label}
}

// WithHelp sets the node's help text and returns n.
func (n *Node) WithHelp(help string) *Node { n.Help = help; return n }

// WithPlaceholder sets the node's placeholder and returns n.
func (n *Node) WithPlaceholder(p string) *Node { n.Placeholder = p; return n }

// WithWarning sets the node's warning text and returns n.
func (n *Node) WithWarning(w string) *Node { n.Warning = w; return n }

// WithStatus (toggles) names the status entry shown beside the switch.
func (n *Node) WithStatus(name string) *Node { n.Status = name; return n }

// WithRequired marks the node's value as required and returns n.
func (n *Node) WithRequired() *Node { n.Required = true; return n }

// WithSubmit sets a form's submit button label and returns n.
func (n *Node) WithSubmit(label string) *Node { n.Submit = label; return n }

// WithDefault sets the node's default to v encoded as JSON and returns n.
// v is normally a bool, string or number. A value that cannot be encoded
// leaves an invalid default that [ValidateForm] reports, so the builder
// never panics.
func (n *Node) WithDefault(v any) *Node {
	if raw, ok := v.(json.RawMessage); ok {
		n.Default = bytes.Clone(raw)
		return n
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = fmt.Appendf(nil, "invalid default: %v", err)
	}
	n.Default = b
	return n
}

// WithRange bounds a number node to [min, max] and returns n.
func (n *Node) WithRange(min, max float64) *Node { n.Min, n.Max = &min, &max; return n }

// WithStep sets a number node's UI increment and returns n.
func (n *Node) WithStep(step float64) *Node { n.Step = &step; return n }

// WithInteger makes a number node accept whole numbers only and returns n.
func (n *Node) WithInteger() *Node { n.Integer = true; return n }

// WithMaxLength limits a text or longtext node to max code points and
// returns n.
func (n *Node) WithMaxLength(max int) *Node { n.MaxLength = max; return n }

// WithPattern sets a text node's pattern (see [Node.Pattern]) and returns n.
func (n *Node) WithPattern(re string) *Node { n.Pattern = re; return n }

// WithSyntax sets a longtext node's syntax and editor language and
// returns n.
func (n *Node) WithSyntax(syntax, lang string) *Node { n.Syntax, n.Lang = syntax, lang; return n }

// MarshalForm validates the section's form and returns it as the raw JSON
// that travels in ext.SettingsSection.Form.
func (s Section) MarshalForm() (json.RawMessage, error) {
	if err := ValidateForm(s.Form); err != nil {
		return nil, fmt.Errorf("section %q: %w", s.ID, err)
	}
	b, err := json.Marshal(s.Form)
	if err != nil {
		return nil, fmt.Errorf("section %q: encoding form: %w", s.ID, err)
	}
	return b, nil
}

// ParseForm decodes a form descriptor (as found in
// ext.SettingsSection.Form) and validates it with [ValidateForm]. Unknown
// fields are refused, so a typo such as "chidlren" is an error rather than
// a silently empty form.
func ParseForm(raw json.RawMessage) (Form, error) {
	var f Form
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Form{}, invalidf("decoding form: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Form{}, invalidf("decoding form: unexpected data after the form object")
	}
	if err := ValidateForm(f); err != nil {
		return Form{}, err
	}
	return f, nil
}
