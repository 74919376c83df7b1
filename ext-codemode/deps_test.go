package codemode_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: ext-codemode imports ext, the engine (modernc
// QuickJS), esbuild (types stripped), santhosh-tekuri/jsonschema
// (arguments checked), x/text (its messages) and x/sys/unix (the engine's
// thread at idle priority) — never the host, the
// secrets or settings modules, ext-mcp or the examples, and no go-plugin
// outside ext.
func TestDependencies(t *testing.T) {
	allowed := []string{
		"github.com/agenthost/agenthost/ext",
		"modernc.org/quickjs",
		"github.com/evanw/esbuild/",
		"github.com/santhosh-tekuri/jsonschema/v6",
		"github.com/go-sourcemap/sourcemap", // esbuild's source map: TypeScript errors name the user's line
		"golang.org/x/text/",
		"golang.org/x/sys/unix", // the engine's thread at idle priority (SCHED_IDLE)
	}
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	for _, imp := range goList(t, "-f", `{{range .Imports}}{{.}}{{"\n"}}{{end}}`, "./...") {
		if std[imp] || strings.HasPrefix(imp, "github.com/agenthost/agenthost/ext-codemode") {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || imp == a || strings.HasPrefix(imp, a)
		}
		if !ok || strings.HasPrefix(imp, "github.com/agenthost/agenthost/ext-mcp") || imp == "github.com/agenthost/agenthost/ext/exttest" {
			t.Errorf("ext-codemode imports %s; allowed: %v", imp, allowed)
		}
	}
	for _, dep := range goList(t, "-deps", "./...") {
		for _, f := range []string{"github.com/agenthost/agenthost/host", "github.com/agenthost/agenthost/secrets", "github.com/agenthost/agenthost/settings",
			"github.com/agenthost/agenthost/ext-mcp", "github.com/agenthost/agenthost/examples", "github.com/dop251/goja"} {
			if strings.HasPrefix(dep, f) {
				t.Errorf("ext-codemode depends on %s", dep)
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
	return strings.Fields(string(out))
}
