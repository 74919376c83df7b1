package host_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDependencyRules enforces DESIGN.md §1 for host: it imports ext,
// settings and secrets among our modules (never catalog, ext-mcp or
// examples); go-plugin only inside the supervisor package; go-sdk only in
// the agent-facing MCP endpoint, but for its OAuth packages (auth,
// oauthex), which the OAuth server may use too; fosite only in the OAuth
// server; go-oidc only in the OpenID Connect sign-in; and only cmd/ packages call os.Exit.
func TestDependencyRules(t *testing.T) {
	const mod = "github.com/agenthost/agenthost/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		pkg, imports, deps := parts[0], strings.Fields(parts[1]), strings.Fields(parts[2])
		for _, d := range deps {
			if !strings.HasPrefix(d, mod) {
				continue
			}
			m := strings.SplitN(strings.TrimPrefix(d, mod), "/", 2)[0]
			switch m {
			case "host", "ext", "settings", "secrets":
			default:
				t.Errorf("%s depends on %s: host may use only ext, settings and secrets among our modules", pkg, d)
			}
		}
		for _, imp := range imports {
			switch {
			case strings.HasPrefix(imp, "github.com/hashicorp/go-plugin") && !strings.HasSuffix(pkg, "/internal/supervisor"):
				t.Errorf("%s imports %s: go-plugin belongs in host/internal/supervisor only", pkg, imp)
			case strings.HasPrefix(imp, "github.com/modelcontextprotocol/go-sdk/auth") || strings.HasPrefix(imp, "github.com/modelcontextprotocol/go-sdk/oauthex"):
				if !strings.Contains(pkg, "/internal/mcpendpoint") && !strings.HasSuffix(pkg, "/internal/oauthserver") {
					t.Errorf("%s imports %s: go-sdk's OAuth packages belong in the MCP endpoint and the OAuth server only", pkg, imp)
				}
			case strings.HasPrefix(imp, "github.com/modelcontextprotocol/go-sdk") && !strings.Contains(pkg, "/internal/mcpendpoint"):
				t.Errorf("%s imports %s: go-sdk belongs in the agent-facing MCP endpoint only", pkg, imp)
			case strings.HasPrefix(imp, "github.com/coreos/go-oidc") && !strings.HasSuffix(pkg, "/internal/oidclogin"):
				t.Errorf("%s imports %s: go-oidc (the OpenID Connect sign-in) belongs in host/internal/oidclogin only", pkg, imp)
			case strings.HasPrefix(imp, "github.com/ory/") && !strings.HasSuffix(pkg, "/internal/oauthserver"):
				t.Errorf("%s imports %s: fosite (the authorization server's library) belongs in host/internal/oauthserver only", pkg, imp)
			case (strings.HasPrefix(imp, "go.opentelemetry.io/") || strings.HasPrefix(imp, "github.com/prometheus/")) && !strings.HasSuffix(pkg, "/internal/telemetry"):
				t.Errorf("%s imports %s: OpenTelemetry and Prometheus belong in host/internal/telemetry only", pkg, imp)
			}
		}
	}
	// os.Exit lives in cmd/ only.
	_ = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if strings.HasPrefix(path, "cmd"+string(filepath.Separator)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "os.Exit(") || strings.Contains(string(b), "log.Fatal") {
			t.Errorf("%s calls os.Exit or log.Fatal: only cmd/ packages own the exit", path)
		}
		return nil
	})
}
