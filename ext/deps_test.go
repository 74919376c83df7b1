package ext_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencyRules enforces DESIGN.md §1 for ext: its packages import
// only the standard library, go-plugin, grpc, protobuf and ext itself, and
// ext builds on its own (GOWORK=off), so third parties can depend on it
// alone.
func TestDependencyRules(t *testing.T) {
	allowed := []string{
		"github.com/agenthost/agenthost/ext",
		"github.com/hashicorp/go-plugin",
		"github.com/hashicorp/go-hclog", // go-plugin's logger type, in its API
		"google.golang.org/grpc",
		"google.golang.org/protobuf",
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		for _, imp := range strings.Fields(imports) {
			if isStd(imp) || hasAnyPrefix(imp, allowed) {
				continue
			}
			t.Errorf("%s imports %s: ext may import only the standard library, go-plugin, grpc and protobuf", pkg, imp)
		}
	}
	// No exported identifier of a public package carries a proto type: the
	// generated code is imported only by package ext itself.
	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, "./exttest").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "internal/extpb") {
		t.Errorf("exttest imports the generated wire code: %s", out)
	}
}

func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func hasAnyPrefix(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
