package codemode_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/ext"
	codemode "github.com/agenthost/agenthost/ext-codemode"
	"github.com/evanw/esbuild/pkg/api"
)

func TestTSType(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"object","properties":{"a":{"type":"string"},"b-c":{"type":"integer"}},"required":["a"]}`: `{ a: string; "b-c"?: number; }`,
		`{"type":"array","items":{"enum":["x","y"]}}`:                                                      `("x" | "y")[]`,
		`{"anyOf":[{"type":"string"},{"type":"null"}]}`:                                                    `string | null`,
		`{"type":["string","number"]}`:                                                                     `string | number`,
		`{"type":"object","additionalProperties":{"type":"boolean"}}`:                                      `Record<string, boolean>`,
		`{"$ref":"#/$defs/x"}`:                                                                             `any`,
		``:                                                                                                 `any`,
	} {
		if got := codemode.TSType(json.RawMessage(schema)); got != want {
			t.Errorf("TSType(%s) = %s, want %s", schema, got, want)
		}
	}
}

// checkTS fails when decls is not valid TypeScript (esbuild parses it).
func checkTS(t *testing.T, decls string) {
	t.Helper()
	if r := api.Transform(decls, api.TransformOptions{Loader: api.LoaderTS}); len(r.Errors) > 0 {
		t.Errorf("declarations are not valid TypeScript: %v\n%s", r.Errors[0].Text, decls)
	}
}

func TestDeclarationsAndBudget(t *testing.T) {
	tools := []ext.Tool{
		{Name: "notes/add", Description: "Add a note.\nMore.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"}}}`)},
		{Name: "my-srv/get.it", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	d := codemode.Declarations(tools)
	for _, want := range []string{"notes: {", "/** Add a note. */", "add(args: { text: string; }): Promise<{ id?: number; }>;", "my_srv: {", "get_it(args: object): Promise<any>;", "call(name: string"} {
		if !strings.Contains(d, want) {
			t.Errorf("declarations lack %q:\n%s", want, d)
		}
	}
	checkTS(t, d)
	big := codemode.RunTool(tools, 100000, codemode.DefaultLimits)
	if !strings.Contains(big.Description, "add(args") {
		t.Errorf("within the budget the declarations are in the description")
	}
	small := codemode.RunTool(tools, 900, codemode.DefaultLimits)
	if len(small.Description) > 900 || strings.Contains(small.Description, "add(args") || !strings.Contains(small.Description, "search_tools") || !strings.Contains(small.Description, "notes/add") {
		t.Errorf("past the budget: %d bytes %q", len(small.Description), small.Description)
	}
}

func TestStripTypes(t *testing.T) {
	js, err := codemode.StripTypes("interface N { id: number }\nconst n: N = await tools.t.echo({id: 1}) as N;\nreturn n.id as number;")
	if err != nil || strings.Contains(js, "interface") || !strings.Contains(js, "return n.id") {
		t.Errorf("StripTypes = %q, %v", js, err)
	}
	if _, err := codemode.StripTypes("const = ;"); err == nil {
		t.Error("StripTypes of broken code: no error")
	}
}

// TestTypeScriptErrorLine: an error in a TypeScript script names the
// line of the user's source, not of the stripped code (esbuild reformats
// it: interfaces and type-only lines vanish, statements move).
func TestTypeScriptErrorLine(t *testing.T) {
	code := `interface Note {
  id: number;
  text: string;
}
type Id = number;
const a: Id = 1;


const b = <Note>{ id: a, text: "x" };
if (b.id === 1) {
  throw new Error("boom"); // line 11
}
return b;`
	o := codemode.RunCode(context.Background(), code, []string{"t/echo"}, codemode.Limits{}, nil, nil)
	if o.Error == nil || !strings.Contains(o.Error.Message, "boom") || o.Error.Line != 11 {
		t.Errorf("error %+v, want boom at line 11", o.Error)
	}
	// A plain JavaScript script keeps its lines as they are.
	o = codemode.RunCode(context.Background(), "const x = 1;\n\nthrow new Error('js');", []string{"t/echo"}, codemode.Limits{}, nil, nil)
	if o.Error == nil || o.Error.Line != 3 {
		t.Errorf("JavaScript error %+v, want line 3", o.Error)
	}
}

// TestFailedCallLine: an error a failed inner call throws names the
// script's line where the script awaits it (the engine writes its stack
// there: no stack is captured per call), in JavaScript and through
// TypeScript's source map, also through Promise.all.
func TestFailedCallLine(t *testing.T) {
	var n atomic.Int32
	for _, tc := range []struct {
		name, code string
		line       int
	}{
		{"js", "const a = await tools.t.echo({});\n\nconst b = await tools.t.fail({});", 3},
		{"awaited later", "const p = tools.t.fail({});\nawait tools.t.echo({});\nawait p;", 3},
		{"Promise.all", "const r = await Promise.all([\n  tools.t.echo({}),\n  tools.t.fail({}),\n]);", 1},
		{"in a function", "async function get(id: number): Promise<any> {\n  return await tools.t.fail({id});\n}\n\nawait get(1);", 2},
		{"ts", "interface Note {\n  id: number;\n}\ntype Id = number;\nconst id: Id = 1;\n\nconst n = <Note>await tools.t.echo({id});\nconst m: Note = await tools.t.fail({id: n.id}); // line 8\nreturn m;", 8},
	} {
		o := codemode.RunCode(context.Background(), tc.code, names, codemode.Limits{}, echo(&n), nil)
		if o.Error == nil || !strings.Contains(o.Error.Message, "no such note") || o.Error.Line != tc.line {
			t.Errorf("%s: error %+v, want no such note at line %d", tc.name, o.Error, tc.line)
		}
	}
}
