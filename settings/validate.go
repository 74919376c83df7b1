package settings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// nameRE is what a value name or a bind key may look like. The dot and
// brackets are kept out because error paths use them ("advanced.retries").
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_@:/-]{1,128}$`)

// sectionIDRE is what a section ID may look like.
var sectionIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateSection checks a section: its ID, title and scope, then its form
// with [ValidateForm]. The error matches [ErrInvalid] and names the section.
func ValidateSection(s Section) error {
	var problems []string
	if !sectionIDRE.MatchString(s.ID) {
		problems = append(problems, fmt.Sprintf("id %q must match %s", s.ID, sectionIDRE))
	}
	if strings.TrimSpace(s.Title) == "" {
		problems = append(problems, "title is empty")
	}
	if s.Scope != ScopeUser && s.Scope != ScopeSystem {
		problems = append(problems, fmt.Sprintf("scope %q must be %q or %q", s.Scope, ScopeUser, ScopeSystem))
	}
	if err := ValidateForm(s.Form); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return invalidf("section %q: %s", s.ID, strings.Join(problems, "; "))
	}
	return nil
}

// ValidateForm checks a form descriptor: the version is 1; the root is a
// form; every node has a known type, the fields its type allows, and a
// valid name; names are unique within each object level; selects have
// options; number bounds are ordered; patterns compile; longtext schemas
// are valid JSON Schemas; defaults fit their nodes. It reports every
// problem it finds, each prefixed with the node's path, e.g.
// `root.children[2] ("timeout"): min 10 is greater than max 5`. The error
// matches [ErrInvalid].
func ValidateForm(f Form) error {
	v := formValidator{}
	if f.V != FormVersion {
		v.addf("form", "version %d is not supported (want %d)", f.V, FormVersion)
	}
	switch {
	case f.Root == nil:
		v.addf("root", "missing")
	case f.Root.Type != NodeForm:
		v.addf("root", "type %q: the root must be a %q node", f.Root.Type, NodeForm)
	default:
		if f.Root.Bind != "" {
			v.addf("root", "bind %q: the root's values are the section object and cannot be bound", f.Root.Bind)
		}
		v.node(f.Root, "root", map[string]string{})
	}
	if len(v.problems) > 0 {
		return invalidf("invalid form: %s", strings.Join(v.problems, "; "))
	}
	return nil
}

type formValidator struct {
	problems []string
}

func (v *formValidator) addf(path, format string, args ...any) {
	v.problems = append(v.problems, path+": "+fmt.Sprintf(format, args...))
}

// nodeLabel is the path of n as shown in errors: `root.children[2] ("x")`.
func nodeLabel(path string, n *Node) string {
	switch {
	case n == nil:
		return path
	case n.Name != "":
		return fmt.Sprintf("%s (%q)", path, n.Name)
	case n.Bind != "":
		return fmt.Sprintf("%s (bind %q)", path, n.Bind)
	}
	return path
}

// attr is one type-specific attribute of a Node.
type attr struct {
	name string
	set  func(n *Node) bool
}

var attrs = []attr{
	{"name", func(n *Node) bool { return n.Name != "" }},
	{"children", func(n *Node) bool { return len(n.Children) > 0 }},
	{"bind", func(n *Node) bool { return n.Bind != "" }},
	{"submit", func(n *Node) bool { return n.Submit != "" }},
	{"default", func(n *Node) bool { return n.Default != nil }},
	{"required", func(n *Node) bool { return n.Required }},
	{"placeholder", func(n *Node) bool { return n.Placeholder != "" }},
	{"options", func(n *Node) bool { return len(n.Options) > 0 }},
	{"min", func(n *Node) bool { return n.Min != nil }},
	{"max", func(n *Node) bool { return n.Max != nil }},
	{"step", func(n *Node) bool { return n.Step != nil }},
	{"integer", func(n *Node) bool { return n.Integer }},
	{"maxLength", func(n *Node) bool { return n.MaxLength != 0 }},
	{"pattern", func(n *Node) bool { return n.Pattern != "" }},
	{"syntax", func(n *Node) bool { return n.Syntax != "" }},
	{"lang", func(n *Node) bool { return n.Lang != "" }},
	{"schema", func(n *Node) bool { return n.Schema != nil }},
	{"status", func(n *Node) bool { return n.Status != "" }},
}

// allowed lists, per node type, the type-specific attributes it may carry.
// Label, help and warning suit every node.
var allowed = map[NodeType][]string{
	NodeForm:     {"children", "bind", "submit"},
	NodeToggle:   {"name", "default", "required", "status"},
	NodeText:     {"name", "default", "required", "placeholder", "maxLength", "pattern"},
	NodeLongText: {"name", "default", "required", "placeholder", "maxLength", "syntax", "lang", "schema"},
	NodeSelect:   {"name", "default", "required", "placeholder", "options"},
	NodeNumber:   {"name", "default", "required", "placeholder", "min", "max", "step", "integer"},
	NodeSecret:   {"name", "placeholder"},
}

// node checks n and its children. level maps each value key taken in the
// current object to the path of the node that took it.
func (v *formValidator) node(n *Node, path string, level map[string]string) {
	label := nodeLabel(path, n)
	if n == nil {
		v.addf(path, "node is null")
		return
	}
	ok, known := allowed[n.Type]
	if !known {
		v.addf(label, "unknown node type %q", n.Type)
		return
	}
	for _, a := range attrs {
		if a.set(n) && !contains(ok, a.name) {
			v.addf(label, "%q does not apply to a %s node", a.name, n.Type)
		}
	}
	if n.Type == NodeForm {
		v.form(n, path, label, level)
		return
	}

	// A value node.
	switch {
	case n.Name == "":
		v.addf(label, "name is empty (every %s node needs one)", n.Type)
	case !nameRE.MatchString(n.Name):
		v.addf(label, "name %q must match %s", n.Name, nameRE)
	default:
		if prev, dup := level[n.Name]; dup {
			v.addf(label, "duplicate name %q (also used by %s)", n.Name, prev)
		} else {
			level[n.Name] = path
		}
	}
	switch n.Type {
	case NodeSelect:
		if len(n.Options) == 0 {
			v.addf(label, "select has no options")
		}
		seen := map[string]bool{}
		for i, o := range n.Options {
			if seen[o.Value] {
				v.addf(label, "options[%d]: duplicate value %q", i, o.Value)
			}
			seen[o.Value] = true
		}
	case NodeNumber:
		if n.Min != nil && n.Max != nil && *n.Min > *n.Max {
			v.addf(label, "min %g is greater than max %g", *n.Min, *n.Max)
		}
		if n.Step != nil && *n.Step <= 0 {
			v.addf(label, "step %g must be positive", *n.Step)
		}
	case NodeText, NodeLongText:
		if n.MaxLength < 0 {
			v.addf(label, "maxLength %d is negative", n.MaxLength)
		}
		if n.Pattern != "" {
			if _, err := compilePattern(n.Pattern); err != nil {
				v.addf(label, "pattern %q: %v", n.Pattern, err)
			}
		}
		if n.Schema != nil {
			if n.Syntax != SyntaxJSON {
				v.addf(label, "schema needs syntax %q (got %q)", SyntaxJSON, n.Syntax)
			} else if _, err := compileCached(n.Schema); err != nil {
				v.addf(label, "schema: %v", err)
			}
		}
	}
	if n.Default != nil {
		v.defaultValue(n, label)
	}
}

func (v *formValidator) form(n *Node, path, label string, level map[string]string) {
	childLevel := level
	if n.Bind != "" {
		if !nameRE.MatchString(n.Bind) {
			v.addf(label, "bind %q must match %s", n.Bind, nameRE)
		}
		if prev, dup := level[n.Bind]; dup {
			v.addf(label, "duplicate name %q (also used by %s)", n.Bind, prev)
		} else {
			level[n.Bind] = path
		}
		childLevel = map[string]string{}
	}
	for i, c := range n.Children {
		v.node(c, fmt.Sprintf("%s.children[%d]", path, i), childLevel)
	}
}

// defaultValue checks that n's default is JSON that fits n.
func (v *formValidator) defaultValue(n *Node, label string) {
	val, err := decodeJSON(n.Default)
	if err != nil {
		v.addf(label, "default is not valid JSON: %v", err)
		return
	}
	if val == nil {
		v.addf(label, "default is null")
		return
	}
	if msg := checkValue(n, val); msg != "" {
		v.addf(label, "default %s: %s", bytes.TrimSpace(n.Default), msg)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// compilePattern compiles a text pattern so that it must match the whole
// value.
func compilePattern(p string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + p + `)$`)
}

// decodeJSON decodes one JSON value, keeping numbers as json.Number, and
// refuses trailing data.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the value")
	}
	return v, nil
}
