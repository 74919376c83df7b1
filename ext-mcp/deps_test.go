package extmcp_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces DESIGN.md §1: ext-mcp imports ext, catalog,
// settings (form types), go-sdk and invopop/jsonschema — plus
// buger/jsonparser, already in the graph through invopop, which reads the
// top level of a server's answer in place on the raw call path, and
// golang.org/x/sync for bounded fan-outs (as catalog), golang.org/x/oauth2
// (go-sdk's auth package is built on it), golang-jwt/jwt/v5 (a go-sdk
// dependency) for signing client assertions — never the host,
// the secrets module or the examples, and no go-plugin outside ext.
func TestDependencies(t *testing.T) {
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	allowed := []string{
		"github.com/agenthost/agenthost/ext",
		"github.com/agenthost/agenthost/catalog",
		"github.com/agenthost/agenthost/settings",
		"github.com/modelcontextprotocol/go-sdk/",
		"github.com/invopop/jsonschema",
		"github.com/buger/jsonparser",
		"golang.org/x/sync/",           // bounded fan-outs (errgroup), as in catalog
		"golang.org/x/oauth2",          // go-sdk's auth API speaks its TokenSource and Config; refreshes of OAuth grants
		"github.com/golang-jwt/jwt/v5", // go-sdk's own dependency: RFC 7523 client assertions (private_key_jwt)
		"go.opentelemetry.io/otel",     // the client span and histogram of calls to servers (telemetry.go, issue 21)
	}
	for _, imp := range goList(t, "-f", `{{range .Imports}}{{.}}{{"\n"}}{{end}}`, "./...") {
		if std[imp] || strings.HasPrefix(imp, "github.com/agenthost/agenthost/ext-mcp") {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || imp == a || strings.HasPrefix(imp, a)
		}
		if !ok || imp == "github.com/agenthost/agenthost/ext/exttest" {
			t.Errorf("ext-mcp imports %s; DESIGN.md §1 allows ext, catalog, settings, go-sdk (and invopop for schemas, jsonparser for the raw path, x/sync for fan-outs, x/oauth2 for OAuth grants, golang-jwt for client assertions, otel for telemetry)", imp)
		}
	}
	for _, dep := range goList(t, "-deps", "./...") {
		for _, f := range []string{"github.com/agenthost/agenthost/host", "github.com/agenthost/agenthost/secrets",
			"github.com/agenthost/agenthost/examples", "github.com/agenthost/agenthost/ext/exttest"} {
			if strings.HasPrefix(dep, f) {
				t.Errorf("ext-mcp depends on %s (forbidden by DESIGN.md §1)", dep)
			}
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
