package settings_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/settings"
)

// server and userServers mirror the "Your MCP servers" editor of ext-mcp.
type server struct {
	Command string   `json:"command,omitempty" jsonschema:"title=Command"`
	Args    []string `json:"args,omitempty"`
	URL     string   `json:"url,omitempty" jsonschema:"format=uri"`
	Timeout int      `json:"timeout,omitempty" jsonschema:"minimum=1,maximum=600"`
}

type userServers struct {
	MCPServers map[string]server `json:"mcpServers"`
}

// testForm has every node type, a flat group and a bound group.
func testForm(t testing.TB) settings.Form {
	schema, err := settings.SchemaOf[userServers]()
	if err != nil {
		t.Fatal(err)
	}
	return settings.NewForm(
		settings.Toggle("enabled", "Enabled").WithDefault(true),
		settings.Text("name", "Name").WithMaxLength(5).WithRequired(),
		settings.Text("code", "Code").WithPattern(`[a-z]+`),
		settings.JSONEditor("servers", "Your MCP servers", schema),
		settings.LongText("notes", "Notes"),
		settings.Select("size", "Size", settings.Option{Value: "s", Label: "Small"}, settings.Option{Value: "m", Label: "Medium"}),
		settings.Number("timeout", "Timeout").WithRange(1, 600).WithInteger().WithDefault(30),
		settings.Secret("token", "Token"),
		settings.Group("", "Look", settings.Toggle("dark", "Dark")),
		settings.Group("advanced", "Advanced",
			settings.Number("retries", "Retries").WithRange(0, 10).WithDefault(3),
			settings.Secret("key", "Key"),
		),
	)
}

func TestValidateValues(t *testing.T) {
	t.Parallel()
	form := testForm(t)
	for name, tc := range map[string]struct {
		values string
		want   string
		errs   settings.FieldErrors
	}{
		"minimal": {values: `{"name":"bob"}`, want: `{"name":"bob"}`},
		"everything, normalized": {
			values: `{ "timeout": 30, "name": "<&é>", "enabled": false, "code": "abc",
				"servers": "{\"mcpServers\": {\"x\": {\"command\": \"run\"}}}", "notes": "a\nb",
				"size": "m", "token": "s3cret", "dark": true,
				"advanced": {"retries": 2, "key": null} }`,
			want: `{"advanced":{"retries":2},"code":"abc","dark":true,"enabled":false,"name":"<&é>","notes":"a\nb",` +
				`"servers":"{\"mcpServers\": {\"x\": {\"command\": \"run\"}}}","size":"m","timeout":30}`,
		},
		"nulls are dropped":    {values: `{"name":"bob","size":null,"advanced":null}`, want: `{"name":"bob"}`},
		"number literals kept": {values: `{"name":"bob","timeout":1e1}`, want: `{"name":"bob","timeout":1e1}`},
		"empty json editor":    {values: `{"name":"bob","servers":""}`, want: `{"name":"bob","servers":""}`},
		"empty bound object":   {values: `{"name":"bob","advanced":{}}`, want: `{"advanced":{},"name":"bob"}`},
		"unknown field": {
			values: `{"name":"bob","colour":"red"}`,
			errs:   settings.FieldErrors{{Field: "", Msg: `unknown field "colour"`}},
		},
		"unknown nested field": {
			values: `{"name":"bob","advanced":{"retry":1}}`,
			errs:   settings.FieldErrors{{Field: "advanced", Msg: `unknown field "retry"`}},
		},
		"required missing": {values: `{}`, errs: settings.FieldErrors{{Field: "name", Msg: "required"}}},
		"required null":    {values: `{"name":null}`, errs: settings.FieldErrors{{Field: "name", Msg: "required"}}},
		"required empty":   {values: `{"name":""}`, errs: settings.FieldErrors{{Field: "name", Msg: "required"}}},
		"toggle type": {
			values: `{"name":"bob","enabled":"yes"}`,
			errs:   settings.FieldErrors{{Field: "enabled", Msg: "must be true or false, not a string"}},
		},
		"text type": {values: `{"name":5}`, errs: settings.FieldErrors{{Field: "name", Msg: "must be a string, not a number"}}},
		"text too long": {
			values: `{"name":"ééééé!"}`,
			errs:   settings.FieldErrors{{Field: "name", Msg: "must be at most 5 characters (got 6)"}},
		},
		"pattern": {
			values: `{"name":"bob","code":"abc1"}`,
			errs:   settings.FieldErrors{{Field: "code", Msg: `must match the pattern "[a-z]+"`}},
		},
		"select": {
			values: `{"name":"bob","size":"xl"}`,
			errs:   settings.FieldErrors{{Field: "size", Msg: `must be one of "s", "m" (got "xl")`}},
		},
		"number type": {
			values: `{"name":"bob","timeout":"30"}`,
			errs:   settings.FieldErrors{{Field: "timeout", Msg: "must be a number, not a string"}},
		},
		"number not integer": {
			values: `{"name":"bob","timeout":1.5}`,
			errs:   settings.FieldErrors{{Field: "timeout", Msg: "must be a whole number (got 1.5)"}},
		},
		"number below min": {
			values: `{"name":"bob","timeout":0}`,
			errs:   settings.FieldErrors{{Field: "timeout", Msg: "must be at least 1 (got 0)"}},
		},
		"number above max": {
			values: `{"name":"bob","advanced":{"retries":11}}`,
			errs:   settings.FieldErrors{{Field: "advanced.retries", Msg: "must be at most 10 (got 11)"}},
		},
		"number out of range": {
			values: `{"name":"bob","timeout":1e400}`,
			errs:   settings.FieldErrors{{Field: "timeout", Msg: "1e400 is out of range"}},
		},
		"json editor not JSON": {
			values: `{"name":"bob","servers":"{nope"}`,
			errs:   settings.FieldErrors{{Field: "servers", Msg: "must be valid JSON: invalid character 'n' looking for beginning of object key string"}},
		},
		"json editor against its schema": {
			values: `{"name":"bob","servers":"{\"mcpServers\": {\"x\": {\"comand\": \"run\"}}}"}`,
			errs:   settings.FieldErrors{{Field: "servers", Msg: `mcpServers.x: unknown field "comand"`}},
		},
		"json editor deep in its schema": {
			values: `{"name":"bob","servers":"{\"mcpServers\": {\"x\": {\"timeout\": 0}}}"}`,
			errs:   settings.FieldErrors{{Field: "servers", Msg: `mcpServers.x.timeout: must be at least 1 (got 0)`}},
		},
		"secret type": {
			values: `{"name":"bob","advanced":{"key":7}}`,
			errs:   settings.FieldErrors{{Field: "advanced.key", Msg: "must be a string or null, not a number"}},
		},
		"bound value not an object": {
			values: `{"name":"bob","advanced":[1]}`,
			errs:   settings.FieldErrors{{Field: "advanced", Msg: "must be an object, not an array"}},
		},
		"not an object": {values: `[]`, errs: settings.FieldErrors{{Msg: "values must be a JSON object, not an array"}}},
		"null":          {values: `null`, errs: settings.FieldErrors{{Msg: "values must be a JSON object, not null"}}},
		"not JSON":      {values: `{"name":`, errs: settings.FieldErrors{{Msg: "values are not valid JSON: unexpected EOF"}}},
		"trailing data": {values: `{} {}`, errs: settings.FieldErrors{{Msg: "values are not valid JSON: unexpected data after the value"}}},
		"every problem, sorted by field": {
			values: `{"zzz":1,"enabled":1,"timeout":0,"advanced":{"retries":-1}}`,
			errs: settings.FieldErrors{
				{Field: "", Msg: `unknown field "zzz"`},
				{Field: "advanced.retries", Msg: "must be at least 0 (got -1)"},
				{Field: "enabled", Msg: "must be true or false, not a number"},
				{Field: "name", Msg: "required"},
				{Field: "timeout", Msg: "must be at least 1 (got 0)"},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := settings.ValidateValues(form, json.RawMessage(tc.values))
			var errs settings.FieldErrors
			if err != nil && !errors.As(err, &errs) {
				t.Fatalf("ValidateValues error %v is not FieldErrors", err)
			}
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("ValidateValues errors (-want +got):\n%s", diff)
			}
			if err != nil {
				if !errors.Is(err, settings.ErrInvalid) {
					t.Errorf("error %v does not match ErrInvalid", err)
				}
				var fe *settings.FieldError
				if !errors.As(err, &fe) || fe != errs[0] {
					t.Errorf("errors.As(*FieldError) = %v, want the first error", fe)
				}
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("ValidateValues (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateValuesInvalidForm(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]settings.Form{
		"zero":         {},
		"unknown type": settings.NewForm(&settings.Node{Type: "slider", Name: "x"}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := settings.ValidateValues(f, json.RawMessage(`{}`))
			var errs settings.FieldErrors
			if err == nil || errors.As(err, &errs) || !errors.Is(err, settings.ErrInvalid) {
				t.Errorf("ValidateValues with an invalid form = %v, want a form error", err)
			}
		})
	}
}

func TestFieldErrorsMessage(t *testing.T) {
	t.Parallel()
	err := settings.FieldErrors{{Msg: `unknown field "x"`}, {Field: "a.b", Msg: "required"}}
	if diff := cmp.Diff(`unknown field "x"; a.b: required`, err.Error()); diff != "" {
		t.Errorf("FieldErrors.Error (-want +got):\n%s", diff)
	}
}

func TestSplitSecrets(t *testing.T) {
	t.Parallel()
	form := testForm(t)
	str := func(s string) *string { return &s }
	for name, tc := range map[string]struct {
		values  string
		plain   string
		secrets map[string]*string
		err     string
	}{
		"none":   {values: `{"name":"bob"}`, plain: `{"name":"bob"}`, secrets: map[string]*string{}},
		"set":    {values: `{"name":"bob","token":"t0k"}`, plain: `{"name":"bob"}`, secrets: map[string]*string{"token": str("t0k")}},
		"delete": {values: `{"token":null}`, plain: `{}`, secrets: map[string]*string{"token": nil}},
		"nested": {
			values:  `{"advanced":{"retries":1,"key":"k"},"token":""}`,
			plain:   `{"advanced":{"retries":1}}`,
			secrets: map[string]*string{"advanced.key": str("k"), "token": str("")},
		},
		"unknown fields stay for ValidateValues": {values: `{"x":1}`, plain: `{"x":1}`, secrets: map[string]*string{}},
		"wrong type":                             {values: `{"token":1,"advanced":{"key":true}}`, err: "advanced.key: must be a string or null, not a boolean; token: must be a string or null, not a number"},
		"not an object":                          {values: `"x"`, err: "values must be a JSON object, not a string"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			plain, secrets, err := settings.SplitSecrets(form, json.RawMessage(tc.values))
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.err, gotErr); diff != "" {
				t.Errorf("SplitSecrets error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.plain, string(plain)); diff != "" {
				t.Errorf("SplitSecrets plain (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.secrets, secrets); diff != "" {
				t.Errorf("SplitSecrets secrets (-want +got):\n%s", diff)
			}
		})
	}
	if _, _, err := settings.SplitSecrets(settings.Form{}, json.RawMessage(`{}`)); !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("SplitSecrets with no root = %v, want ErrInvalid", err)
	}
}

func TestSecretNamesAndDefaults(t *testing.T) {
	t.Parallel()
	form := testForm(t)
	if diff := cmp.Diff([]string{"token", "advanced.key"}, settings.SecretNames(form)); diff != "" {
		t.Errorf("SecretNames (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(`{"advanced":{"retries":3},"enabled":true,"timeout":30}`, string(settings.Defaults(form))); diff != "" {
		t.Errorf("Defaults (-want +got):\n%s", diff)
	}
	if got := string(settings.Defaults(settings.Form{})); got != "{}" {
		t.Errorf("Defaults of an empty form = %s, want {}", got)
	}
	if got := settings.SecretNames(settings.Form{}); len(got) != 0 {
		t.Errorf("SecretNames of an empty form = %v", got)
	}
	// Defaults are valid values (minus required fields the user must fill).
	withName := bytes.Replace(settings.Defaults(form), []byte("{"), []byte(`{"name":"x",`), 1)
	if _, err := settings.ValidateValues(form, withName); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func FuzzValidateValues(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"name":"bob"}`, `[]`, `null`, `"x"`, `{"name":"bob","timeout":30,"advanced":{"retries":2}}`,
		`{"name":"bob","servers":"{\"mcpServers\":{\"x\":{\"comand\":1}}}"}`,
		`{"name":"bob","servers":"{\"mcpServers\":{\"x\":{\"args\":[1,2]}}}"}`,
		`{"name":"bob","token":"t","advanced":{"key":null}}`,
		`{"name":"<&>","size":"m","enabled":true,"dark":false,"code":"abc"}`,
		`{"timeout":1e400}`, `{"name":"\ud800"}`, `{"advanced":[]}`, `{"a":{"b":{"c":[{}]}}}`,
	} {
		f.Add([]byte(seed))
	}
	form := testForm(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := settings.ValidateValues(form, data)
		if err != nil {
			var errs settings.FieldErrors
			if !errors.As(err, &errs) || len(errs) == 0 || !errors.Is(err, settings.ErrInvalid) {
				t.Fatalf("error %v is not a non-empty FieldErrors", err)
			}
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(out, &obj); err != nil {
			t.Fatalf("normalized values %q are not a JSON object: %v", out, err)
		}
		if _, ok := obj["token"]; ok {
			t.Fatalf("normalized values %s hold a secret", out)
		}
		again, err := settings.ValidateValues(form, out)
		if err != nil {
			t.Fatalf("normalized values %s do not validate: %v", out, err)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("normalizing is not idempotent: %s, then %s", out, again)
		}
		if strings.Contains(string(out), "\n") {
			t.Fatalf("normalized values %q are not compact", out)
		}
	})
}

func TestValidateValuesNestedRequired(t *testing.T) {
	t.Parallel()
	form := settings.NewForm(settings.Group("adv", "Advanced", settings.Text("host", "Host").WithRequired()))
	for name, tc := range map[string]struct {
		values string
		errs   settings.FieldErrors
	}{
		"absent group": {values: `{}`, errs: settings.FieldErrors{{Field: "adv.host", Msg: "required"}}},
		"empty group":  {values: `{"adv":{}}`, errs: settings.FieldErrors{{Field: "adv.host", Msg: "required"}}},
		"present":      {values: `{"adv":{"host":"h"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := settings.ValidateValues(form, json.RawMessage(tc.values))
			var errs settings.FieldErrors
			errors.As(err, &errs)
			if diff := cmp.Diff(tc.errs, errs); diff != "" {
				t.Errorf("ValidateValues errors (-want +got):\n%s", diff)
			}
		})
	}
	var zero *settings.Schema
	if err := zero.Validate(json.RawMessage(`{}`)); err == nil {
		t.Error("Validate on a nil *Schema succeeded")
	}
}
