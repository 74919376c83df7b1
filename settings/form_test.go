package settings_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/settings"
)

func ptr(f float64) *float64 { return &f }

func TestValidateForm(t *testing.T) {
	t.Parallel()
	s := settings.Option{Value: "s"}
	for name, tc := range map[string]struct {
		form settings.Form
		want string // "" means valid
	}{
		"every node type": {form: settings.NewForm(
			settings.Toggle("t", "T").WithDefault(false).WithWarning("shared").WithStatus("t"),
			settings.Text("x", "X").WithMaxLength(3).WithPattern(`[a-z]*`).WithDefault("abc").WithPlaceholder("abc"),
			settings.LongText("l", "L").WithSyntax("markdown", "md"),
			settings.JSONEditor("j", "J", json.RawMessage(`{"type":"object"}`)).WithDefault(`{}`),
			settings.Select("s", "S", s, settings.Option{Value: "m", Label: "Medium"}).WithDefault("m"),
			settings.Number("n", "N").WithRange(1, 10).WithStep(1).WithInteger().WithDefault(5),
			settings.Secret("token:github", "Token"),
			settings.Group("", "Flat", settings.Toggle("flat", "Flat")),
			settings.Group("adv", "Advanced", settings.Toggle("t", "T again, in another object")).WithSubmit("Save"),
		)},
		"empty form": {form: settings.NewForm()},
		"version": {
			form: settings.Form{V: 2, Root: &settings.Node{Type: settings.NodeForm}},
			want: `invalid form: form: version 2 is not supported (want 1)`,
		},
		"no root": {
			form: settings.Form{V: 1},
			want: `invalid form: root: missing`,
		},
		"root not a form": {
			form: settings.Form{V: 1, Root: settings.Toggle("a", "A")},
			want: `invalid form: root: type "toggle": the root must be a "form" node`,
		},
		"root bind": {
			form: settings.Form{V: 1, Root: settings.Group("x", "")},
			want: `invalid form: root: bind "x": the root's values are the section object and cannot be bound`,
		},
		"unknown type": {
			form: settings.NewForm(settings.Toggle("a", "A"), settings.Toggle("b", "B"), &settings.Node{Type: "slider", Name: "timeout"}),
			want: `invalid form: root.children[2] ("timeout"): unknown node type "slider"`,
		},
		"null node": {
			form: settings.NewForm(nil),
			want: `invalid form: root.children[0]: node is null`,
		},
		"duplicate name": {
			form: settings.NewForm(settings.Toggle("a", "A"), settings.Text("a", "A")),
			want: `invalid form: root.children[1] ("a"): duplicate name "a" (also used by root.children[0])`,
		},
		"duplicate through a flat group": {
			form: settings.NewForm(settings.Toggle("a", "A"), settings.Group("", "G", settings.Text("a", "A"))),
			want: `invalid form: root.children[1].children[0] ("a"): duplicate name "a" (also used by root.children[0])`,
		},
		"bind collides with a name": {
			form: settings.NewForm(settings.Toggle("adv", "A"), settings.Group("adv", "G", settings.Text("a", "A"))),
			want: `invalid form: root.children[1] (bind "adv"): duplicate name "adv" (also used by root.children[0])`,
		},
		"empty name": {
			form: settings.NewForm(settings.Toggle("", "A")),
			want: `invalid form: root.children[0]: name is empty (every toggle node needs one)`,
		},
		"bad name": {
			form: settings.NewForm(settings.Toggle("a.b", "A")),
			want: `invalid form: root.children[0] ("a.b"): name "a.b" must match ^[A-Za-z0-9_@:/-]{1,128}$`,
		},
		"form with a name": {
			form: settings.NewForm(&settings.Node{Type: settings.NodeForm, Name: "x"}),
			want: `invalid form: root.children[0] ("x"): "name" does not apply to a form node`,
		},
		"select without options": {
			form: settings.NewForm(settings.Select("s", "S")),
			want: `invalid form: root.children[0] ("s"): select has no options`,
		},
		"duplicate option": {
			form: settings.NewForm(settings.Select("s", "S", s, s)),
			want: `invalid form: root.children[0] ("s"): options[1]: duplicate value "s"`,
		},
		"toggle default": {
			form: settings.NewForm(settings.Toggle("t", "T").WithDefault("yes")),
			want: `invalid form: root.children[0] ("t"): default "yes": must be true or false, not a string`,
		},
		"number default out of range": {
			form: settings.NewForm(settings.Number("n", "N").WithRange(1, 10).WithDefault(11)),
			want: `invalid form: root.children[0] ("n"): default 11: must be at most 10 (got 11)`,
		},
		"select default": {
			form: settings.NewForm(settings.Select("s", "S", s).WithDefault("xl")),
			want: `invalid form: root.children[0] ("s"): default "xl": must be one of "s" (got "xl")`,
		},
		"default not JSON": {
			form: settings.NewForm(settings.Toggle("t", "T").WithDefault(json.RawMessage(`{`))),
			want: `invalid form: root.children[0] ("t"): default is not valid JSON: unexpected EOF`,
		},
		"default unencodable": {
			form: settings.NewForm(settings.Toggle("t", "T").WithDefault(make(chan int))),
			want: `invalid form: root.children[0] ("t"): default is not valid JSON: invalid character 'i' looking for beginning of value`,
		},
		"json default against its schema": {
			form: settings.NewForm(settings.JSONEditor("j", "J", json.RawMessage(`{"type":"object","required":["a"]}`)).WithDefault(`{}`)),
			want: `invalid form: root.children[0] ("j"): default "{}": missing required field "a"`,
		},
		"min above max": {
			form: settings.NewForm(settings.Toggle("a", "A"), settings.Toggle("b", "B"), settings.Number("timeout", "T").WithRange(10, 5)),
			want: `invalid form: root.children[2] ("timeout"): min 10 is greater than max 5`,
		},
		"step": {
			form: settings.NewForm(settings.Number("n", "N").WithStep(0)),
			want: `invalid form: root.children[0] ("n"): step 0 must be positive`,
		},
		"invalid schema": {
			form: settings.NewForm(settings.JSONEditor("j", "J", json.RawMessage(`{"type":"foo"}`))),
			want: `invalid form: root.children[0] ("j"): schema: unknown type "foo" at #`,
		},
		"schema not an object": {
			form: settings.NewForm(settings.JSONEditor("j", "J", json.RawMessage(`[]`))),
			want: `invalid form: root.children[0] ("j"): schema: schema must be a JSON object`,
		},
		"schema without json syntax": {
			form: settings.NewForm(&settings.Node{Type: settings.NodeLongText, Name: "l", Schema: json.RawMessage(`{}`)}),
			want: `invalid form: root.children[0] ("l"): schema needs syntax "json" (got "")`,
		},
		"bad pattern": {
			form: settings.NewForm(settings.Text("x", "X").WithPattern(`(`)),
			want: "invalid form: root.children[0] (\"x\"): pattern \"(\": error parsing regexp: missing closing ): `^(?:()$`",
		},
		"negative maxLength": {
			form: settings.NewForm(settings.Text("x", "X").WithMaxLength(-1)),
			want: `invalid form: root.children[0] ("x"): maxLength -1 is negative`,
		},
		"attribute of another type": {
			form: settings.NewForm(&settings.Node{Type: settings.NodeToggle, Name: "t", Options: []settings.Option{s}, Min: ptr(1)}),
			want: `invalid form: root.children[0] ("t"): "options" does not apply to a toggle node; root.children[0] ("t"): "min" does not apply to a toggle node`,
		},
		"status on a value node": {
			form: settings.NewForm(settings.Text("x", "X").WithStatus("x")),
			want: `invalid form: root.children[0] ("x"): "status" does not apply to a text node`,
		},
		"required secret": {
			form: settings.NewForm(settings.Secret("k", "K").WithRequired()),
			want: `invalid form: root.children[0] ("k"): "required" does not apply to a secret node`,
		},
		"children on a value node": {
			form: settings.NewForm(&settings.Node{Type: settings.NodeText, Name: "x", Children: []*settings.Node{settings.Toggle("y", "")}}),
			want: `invalid form: root.children[0] ("x"): "children" does not apply to a text node`,
		},
		"nested problems are all reported": {
			form: settings.NewForm(settings.Group("adv", "A", settings.Toggle("", ""), &settings.Node{Type: "dial", Name: "d"})),
			want: `invalid form: root.children[0].children[0]: name is empty (every toggle node needs one); root.children[0].children[1] ("d"): unknown node type "dial"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := settings.ValidateForm(tc.form)
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, settings.ErrInvalid) {
					t.Errorf("error %v does not match ErrInvalid", err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateForm error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateSection(t *testing.T) {
	t.Parallel()
	good := settings.Section{ID: "servers", Title: "MCP servers", Scope: settings.ScopeUser, Form: settings.NewForm(settings.Toggle("a", "A"))}
	for name, tc := range map[string]struct {
		mutate func(s *settings.Section)
		want   string
	}{
		"valid":        {mutate: func(*settings.Section) {}},
		"system scope": {mutate: func(s *settings.Section) { s.Scope = settings.ScopeSystem }},
		"bad id":       {mutate: func(s *settings.Section) { s.ID = "a b" }, want: `section "a b": id "a b" must match ^[A-Za-z0-9_-]{1,64}$`},
		"no title":     {mutate: func(s *settings.Section) { s.Title = " " }, want: `section "servers": title is empty`},
		"bad scope":    {mutate: func(s *settings.Section) { s.Scope = "global" }, want: `section "servers": scope "global" must be "user" or "system"`},
		"bad form": {
			mutate: func(s *settings.Section) { s.Form.V = 0 },
			want:   `section "servers": invalid form: form: version 0 is not supported (want 1)`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := good
			s.Form = settings.NewForm(settings.Toggle("a", "A"))
			tc.mutate(&s)
			got := ""
			if err := settings.ValidateSection(s); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidateSection error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFormWireShape(t *testing.T) {
	t.Parallel()
	sec := settings.Section{ID: "s", Title: "S", Scope: settings.ScopeUser, Form: settings.NewForm(
		settings.Toggle("notes", "Notes").WithDefault(true).WithWarning("shared credential"),
		settings.Number("timeout", "Timeout").WithRange(1, 600).WithInteger(),
		settings.Select("size", "Size", settings.Option{Value: "s", Label: "Small"}),
		settings.Group("adv", "Advanced", settings.Text("x", "X").WithMaxLength(10)).WithSubmit("Save"),
	)}
	raw, err := sec.MarshalForm()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"root":{"type":"form","children":[` +
		`{"type":"toggle","name":"notes","label":"Notes","default":true,"warning":"shared credential"},` +
		`{"type":"number","name":"timeout","label":"Timeout","min":1,"max":600,"integer":true},` +
		`{"type":"select","name":"size","label":"Size","options":[{"value":"s","label":"Small"}]},` +
		`{"type":"form","label":"Advanced","children":[{"type":"text","name":"x","label":"X","maxLength":10}],"bind":"adv","submit":"Save"}]}}`
	if diff := cmp.Diff(want, string(raw)); diff != "" {
		t.Errorf("MarshalForm (-want +got):\n%s", diff)
	}
	back, err := settings.ParseForm(raw)
	if err != nil {
		t.Fatalf("ParseForm: %v", err)
	}
	if diff := cmp.Diff(sec.Form, back); diff != "" {
		t.Errorf("ParseForm(MarshalForm(f)) (-want +got):\n%s", diff)
	}

	sec.Form.Root.Children[0].Type = "slider"
	if _, err := sec.MarshalForm(); err == nil || !strings.Contains(err.Error(), `section "s": invalid form: root.children[0] ("notes"): unknown node type "slider"`) {
		t.Errorf("MarshalForm of an invalid form = %v", err)
	}
}

func TestParseForm(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		raw  string
		want string
	}{
		"valid":         {raw: `{"v":1,"root":{"type":"form","children":[{"type":"toggle","name":"a"}]}}`},
		"unknown field": {raw: `{"v":1,"root":{"type":"form","chidlren":[]}}`, want: `decoding form: json: unknown field "chidlren"`},
		"unknown type":  {raw: `{"v":1,"root":{"type":"form","children":[{"type":"slider","name":"a"}]}}`, want: `invalid form: root.children[0] ("a"): unknown node type "slider"`},
		"trailing data": {raw: `{"v":1,"root":{"type":"form"}} {}`, want: `decoding form: unexpected data after the form object`},
		"not JSON":      {raw: `nope`, want: `decoding form: invalid character 'o' in literal null (expecting 'u')`},
		"empty":         {raw: ``, want: `decoding form: EOF`},
		"wrong shape":   {raw: `{"v":"1"}`, want: `decoding form: json: cannot unmarshal string into Go struct field Form.v of type int`},
		"null root":     {raw: `{"v":1,"root":null}`, want: `invalid form: root: missing`},
		"option values are strings": {
			raw:  `{"v":1,"root":{"type":"form","children":[{"type":"select","name":"a","options":[{"value":1}]}]}}`,
			want: `decoding form: json: cannot unmarshal number into Go struct field Option.root.children.options.value of type string`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := settings.ParseForm(json.RawMessage(tc.raw))
			got := ""
			if err != nil {
				got = err.Error()
				if !errors.Is(err, settings.ErrInvalid) {
					t.Errorf("error %v does not match ErrInvalid", err)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseForm error (-want +got):\n%s", diff)
			}
		})
	}
}
