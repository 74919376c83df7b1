package settings_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/settings"
)

type prefs struct {
	Theme    string    `json:"theme,omitempty" jsonschema:"enum=light,enum=dark,default=light" jsonschema_description:"Colour theme."`
	Timeout  int       `json:"timeout" jsonschema:"minimum=1,maximum=600"`
	Advanced *advanced `json:"advanced,omitempty"`
	Secret   string    `json:"-"`
}

type advanced struct {
	Retries int `json:"retries,omitempty" jsonschema:"default=3"`
}

type badDefault struct {
	Advanced *struct {
		Retries int `json:"retries" jsonschema:"default=3"`
	} `json:"advanced,omitempty"`
}

type googleTag struct {
	Path string `json:"path" jsonschema:"file to read"`
}

type nestedGoogleTag struct {
	Items []googleTag `json:"items"`
}

type withChan struct {
	C chan int `json:"c"`
}

func TestSchemaFor(t *testing.T) {
	t.Parallel()
	got, err := settings.SchemaFor(&prefs{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{` +
		`"theme":{"type":"string","enum":["light","dark"],"description":"Colour theme.","default":"light"},` +
		`"timeout":{"type":"integer","maximum":600,"minimum":1},` +
		`"advanced":{"properties":{"retries":{"type":"integer","default":3}},"additionalProperties":false,"type":"object"}},` +
		`"additionalProperties":false,"type":"object","required":["timeout"]}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("SchemaFor (-want +got):\n%s", diff)
	}
	generic, err := settings.SchemaOf[prefs]()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(got), string(generic)); diff != "" {
		t.Errorf("SchemaOf differs from SchemaFor (-want +got):\n%s", diff)
	}
}

func TestSchemaForRefuses(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		v    any
		want string
	}{
		"nil":                 {v: nil, want: "settings: SchemaFor: nil value"},
		"google-style tag":    {v: googleTag{}, want: `field googleTag.Path: jsonschema tag "file to read" looks google-style`},
		"nested google tag":   {v: &nestedGoogleTag{}, want: `field nestedGoogleTag.Items.Path: jsonschema tag`},
		"default on required": {v: badDefault{}, want: "field advanced.retries: a required field of a nested object has a default"},
		"unsupported type":    {v: withChan{}, want: "generating schema for settings_test.withChan"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := settings.SchemaFor(tc.v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SchemaFor(%T) = %v, want an error containing %q", tc.v, err, tc.want)
			}
		})
	}
}

func TestCompileSchema(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		schema string
		want   string
	}{
		"empty":              {schema: `{}`},
		"draft-07":           {schema: `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`},
		"local ref":          {schema: `{"$defs":{"s":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/s"}}}`},
		"not an object":      {schema: `true`, want: "schema must be a JSON object"},
		"not JSON":           {schema: `{`, want: "decoding schema: unexpected end of JSON input"},
		"unknown type":       {schema: `{"properties":{"a":{"type":"strin"}}}`, want: `unknown type "strin" at #/properties/a`},
		"dangling ref":       {schema: `{"$ref":"#/nope"}`, want: `resolving schema: JSON Pointer "/nope": no schema field "nope"`},
		"remote ref":         {schema: `{"$ref":"https://example.com/s.json"}`, want: "resolving schema: loading https://example.com/s.json: cannot resolve remote schemas"},
		"bad default":        {schema: `{"properties":{"a":{"type":"string","default":1}}}`, want: "resolving schema: "},
		"bad pattern":        {schema: `{"pattern":"("}`, want: "error parsing regexp"},
		"wrong keyword type": {schema: `{"minimum":"1"}`, want: "decoding schema: "},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := settings.CompileSchema(json.RawMessage(tc.schema))
			if tc.want == "" {
				if err != nil {
					t.Errorf("CompileSchema: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, settings.ErrInvalid) {
				t.Errorf("CompileSchema = %v, want an ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestSchemaValidate(t *testing.T) {
	t.Parallel()
	raw, err := settings.SchemaOf[userServers]()
	if err != nil {
		t.Fatal(err)
	}
	servers, err := settings.CompileSchema(raw)
	if err != nil {
		t.Fatal(err)
	}
	withRefs, err := settings.CompileSchema(json.RawMessage(`{
		"type":"object",
		"$defs":{"port":{"type":"integer","minimum":1}},
		"properties":{"port":{"$ref":"#/$defs/port"},"list":{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"boolean"}}},
		"patternProperties":{"^x-":{"type":"string"}},
		"additionalProperties":false
	}`))
	if err != nil {
		t.Fatal(err)
	}
	// The shape invopop's default Reflector emits: a root $ref into $defs.
	rootRef, err := settings.CompileSchema(json.RawMessage(`{"$ref":"#/$defs/A","$defs":{
		"A":{"type":"object","properties":{"a":{"$ref":"#/$defs/B"}}},
		"B":{"type":"object","properties":{"b":{"$ref":"#/$defs/N"}}},
		"N":{"type":"object","properties":{"n":{"type":"number"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := settings.CompileSchema(json.RawMessage(`{"$defs":{"node":{"type":"object",
		"properties":{"name":{"type":"string"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},
		"$ref":"#/$defs/node"}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		schema *settings.Schema
		value  string
		want   *settings.FieldError
	}{
		"valid":              {schema: servers, value: `{"mcpServers":{"x":{"command":"run","args":["a"]}}}`},
		"unknown field":      {schema: servers, value: `{"mcpServers":{"x":{"comand":"run"}}}`, want: &settings.FieldError{Field: "mcpServers.x", Msg: `unknown field "comand"`}},
		"unknown fields":     {schema: servers, value: `{"mcpServers":{"x":{"b":1,"a":2}}}`, want: &settings.FieldError{Field: "mcpServers.x", Msg: `unknown fields "a", "b"`}},
		"first bad server":   {schema: servers, value: `{"mcpServers":{"b":{"url":1},"a":{"args":"x"}}}`, want: &settings.FieldError{Field: "mcpServers.a.args", Msg: "must be an array, not a string"}},
		"array item":         {schema: servers, value: `{"mcpServers":{"x":{"args":["a",2]}}}`, want: &settings.FieldError{Field: "mcpServers.x.args[1]", Msg: "must be a string, not an integer"}},
		"odd key":            {schema: servers, value: `{"mcpServers":{"a b.c":{"timeout":700}}}`, want: &settings.FieldError{Field: `mcpServers["a b.c"].timeout`, Msg: "must be at most 600 (got 700)"}},
		"missing required":   {schema: servers, value: `{}`, want: &settings.FieldError{Msg: `missing required field "mcpServers"`}},
		"root type":          {schema: servers, value: `[]`, want: &settings.FieldError{Msg: "must be an object, not an array"}},
		"not JSON":           {schema: servers, value: `{`, want: &settings.FieldError{Msg: "not valid JSON: unexpected end of JSON input"}},
		"through a ref":      {schema: withRefs, value: `{"port":0}`, want: &settings.FieldError{Field: "port", Msg: "must be at least 1 (got 0)"}},
		"root ref":           {schema: rootRef, value: `{"a":{"b":{"n":"x"}}}`, want: &settings.FieldError{Field: "a.b.n", Msg: "must be a number, not a string"}},
		"recursive, shallow": {schema: tree, value: `{"kids":[{"kids":[{"name":1}]}]}`, want: &settings.FieldError{Field: "kids[0].kids[0].name", Msg: "must be a string, not an integer"}},
		"prefix item":        {schema: withRefs, value: `{"list":[1]}`, want: &settings.FieldError{Field: "list[0]", Msg: "must be a string, not an integer"}},
		"later item":         {schema: withRefs, value: `{"list":["a",true,"b"]}`, want: &settings.FieldError{Field: "list[2]", Msg: "must be a boolean, not a string"}},
		"pattern property":   {schema: withRefs, value: `{"x-a":1}`, want: &settings.FieldError{Field: "x-a", Msg: "must be a string, not an integer"}},
		"not a pattern prop": {schema: withRefs, value: `{"y-a":1}`, want: &settings.FieldError{Msg: `unknown field "y-a"`}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.schema.Validate(json.RawMessage(tc.value))
			var got *settings.FieldError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("Validate error %v is not a *FieldError", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSchemaValidateDeepRecursion(t *testing.T) {
	t.Parallel()
	tree, err := settings.CompileSchema(json.RawMessage(`{"$defs":{"node":{"type":"object",
		"properties":{"name":{"type":"string"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},
		"$ref":"#/$defs/node"}`))
	if err != nil {
		t.Fatal(err)
	}
	value := `{"name":1}`
	for range 12 {
		value = `{"kids":[` + value + `]}`
	}
	var fe *settings.FieldError
	if err := tree.Validate(json.RawMessage(value)); !errors.As(err, &fe) || fe.Msg == "" {
		t.Fatalf("Validate of a deep bad value = %v, want a *FieldError", err)
	}
	want := &settings.FieldError{Field: strings.Repeat("kids[0].", 12) + "name", Msg: "must be a string, not an integer"}
	if diff := cmp.Diff(want, fe); diff != "" {
		t.Errorf("Validate (-want +got):\n%s", diff)
	}
}

type treeNode struct {
	Name string     `json:"name"`
	Kids []treeNode `json:"kids,omitempty"`
}

func TestSchemaForRecursiveType(t *testing.T) {
	t.Parallel()
	raw, err := settings.SchemaOf[treeNode]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"$ref"`) {
		t.Errorf("schema of a recursive type has no $ref: %s", raw)
	}
	s, err := settings.CompileSchema(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(json.RawMessage(`{"name":"a","kids":[{"name":"b","kids":[{"name":"c"}]}]}`)); err != nil {
		t.Errorf("Validate of a good tree: %v", err)
	}
	err = s.Validate(json.RawMessage(`{"name":"a","kids":[{"name":"b","kids":[{"nam":"c"}]}]}`))
	if diff := cmp.Diff(`kids[0].kids[0]: unknown field "nam"`, fmt.Sprint(err)); diff != "" {
		t.Errorf("Validate of a bad tree (-want +got):\n%s", diff)
	}
}
