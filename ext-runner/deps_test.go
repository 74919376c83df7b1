package extrunner_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces DESIGN.md §1 for ext-runner: it imports ext,
// go-sdk (the resource watcher's client of the host's /mcp) and
// robfig/cron (schedules) — never the host, the secrets module, ext-mcp,
// the catalog or the examples, and no go-plugin outside ext.
func TestDependencies(t *testing.T) {
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	allowed := []string{
		"github.com/agenthost/agenthost/ext",
		"github.com/modelcontextprotocol/go-sdk/",
		"github.com/robfig/cron/v3",
	}
	for _, imp := range goList(t, "-f", `{{range .Imports}}{{.}}{{"\n"}}{{end}}`, "./...") {
		if std[imp] || strings.HasPrefix(imp, "github.com/agenthost/agenthost/ext-runner") {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || imp == a || strings.HasPrefix(imp, a)
		}
		if !ok || strings.HasPrefix(imp, "github.com/agenthost/agenthost/ext/exttest") {
			t.Errorf("ext-runner imports %s; DESIGN.md §1 allows ext, go-sdk and robfig/cron", imp)
		}
	}
	for _, dep := range goList(t, "-deps", "./...") {
		for _, f := range []string{"github.com/agenthost/agenthost/host", "github.com/agenthost/agenthost/secrets",
			"github.com/agenthost/agenthost/examples", "github.com/agenthost/agenthost/ext-mcp", "github.com/agenthost/agenthost/catalog",
			"github.com/agenthost/agenthost/ext/exttest"} {
			if strings.HasPrefix(dep, f) {
				t.Errorf("ext-runner depends on %s (forbidden by DESIGN.md §1)", dep)
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
