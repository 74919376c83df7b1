package settings_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// allowedModules are the only modules outside the standard library that
// the settings packages may import (DESIGN.md §1: the standard library and
// their own storage and schema libraries). What those import in turn is
// theirs.
var allowedModules = []string{
	"github.com/invopop/jsonschema",   // JSON Schema from Go types
	"github.com/google/jsonschema-go", // JSON Schema validation (the one go-sdk uses)
	"modernc.org/sqlite",              // pure Go SQLite
	"github.com/pressly/goose/v3",     // the stores' migrations
	"golang.org/x/sync",
}

// testOnlyModules may be imported by tests only.
var testOnlyModules = []string{
	"go.uber.org/goleak",
	"github.com/google/go-cmp",
}

const self = "github.com/agenthost/agenthost/settings"

func inModules(path string, mods []string) bool {
	for _, m := range mods {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

// TestDependencies enforces the module's dependency rules with go list.
func TestDependencies(t *testing.T) {
	t.Parallel()
	std := map[string]bool{}
	for _, p := range goList(t, "std") {
		std[p] = true
	}
	ok := func(imp string, extra []string) bool {
		return std[imp] || imp == "C" || imp == self || strings.HasPrefix(imp, self+"/") ||
			inModules(imp, allowedModules) || inModules(imp, extra)
	}

	// What the module's own packages import, in code and in tests.
	for _, line := range goList(t, "-f", `{{.ImportPath}} {{join .Imports ","}} {{join .TestImports ","}},{{join .XTestImports ","}}`, "./...") {
		f := strings.Fields(line + "  ")
		pkg, code, tests := f[0], strings.Split(f[1], ","), strings.Split(f[2], ",")
		for _, imp := range code {
			if imp != "" && !ok(imp, nil) {
				t.Errorf("%s imports %s; allowed are the standard library and %v", pkg, imp, allowedModules)
			}
		}
		for _, imp := range tests {
			if imp != "" && !ok(imp, testOnlyModules) {
				t.Errorf("tests of %s import %s; allowed are the standard library, %v and %v", pkg, imp, allowedModules, testOnlyModules)
			}
		}
	}

	// Everything the non-test packages pull in: no other agenthost module,
	// and no test-only module.
	for _, line := range goList(t, "-deps", "-f", `{{if not .Standard}}{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}{{end}}`, "./...") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pkg, mod := f[0], f[1]
		switch {
		case mod == self:
		case strings.HasPrefix(mod, "github.com/agenthost/agenthost"):
			t.Errorf("settings depends on %s (module %s): it must not import another agenthost module", pkg, mod)
		case inModules(mod, testOnlyModules):
			t.Errorf("settings depends on %s outside tests", pkg)
		}
	}

	// go.mod names only allowed modules as direct requirements; the rest
	// (modernc.org/libc among them) stay indirect, chosen by their users.
	for _, line := range goList(t, "-m", "-f", `{{.Path}} {{.Indirect}} {{.Main}}`, "all") {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == "false" && f[2] == "false" && !inModules(f[0], allowedModules) && !inModules(f[0], testOnlyModules) {
			t.Errorf("go.mod requires %s directly; allowed are %v and, for tests, %v", f[0], allowedModules, testOnlyModules)
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	// Judge this module by its own go.mod, not by the workspace's union.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, msg)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}
