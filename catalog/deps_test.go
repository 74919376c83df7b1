package catalog_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces DESIGN.md §1: catalog imports the standard
// library, ext (for contract types) and golang.org/x/sync only; nothing
// else of this repository and no MCP library, directly or not.
func TestDependencies(t *testing.T) {
	allowedDirect := []string{"github.com/agenthost/agenthost/ext", "golang.org/x/sync/"}
	direct := goList(t, "-f", `{{range .Imports}}{{.}}{{"\n"}}{{end}}`, "./...")
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	for _, imp := range direct {
		if std[imp] || strings.HasPrefix(imp, "github.com/agenthost/agenthost/catalog") {
			continue
		}
		ok := false
		for _, a := range allowedDirect {
			if imp == a || strings.HasPrefix(imp, a) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("catalog imports %s; DESIGN.md §1 allows only the standard library, ext and golang.org/x/sync", imp)
		}
	}
	forbidden := []string{
		"github.com/modelcontextprotocol/",
		"github.com/agenthost/agenthost/ext-mcp",
		"github.com/agenthost/agenthost/host",
		"github.com/agenthost/agenthost/settings",
		"github.com/agenthost/agenthost/secrets",
		"github.com/agenthost/agenthost/examples",
		"github.com/agenthost/agenthost/ext/exttest",
	}
	for _, dep := range goList(t, "-deps", "./...") {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("catalog depends on %s (forbidden by DESIGN.md §1)", dep)
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
