package secrets_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies enforces DESIGN.md §1 for this module: its packages
// import only the standard library, go-keyring and what go-keyring pulls in
// (godbus, wincred), and golang.org/x/{crypto,sys}; tests may add goleak,
// go-cmp and rapid. No other agenthost module is imported.
func TestDependencies(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to list dependencies: %v", err)
	}
	allowed := []string{
		"github.com/agenthost/agenthost/secrets",
		"github.com/zalando/go-keyring",
		"github.com/godbus/dbus/v5",
		"github.com/danieljoos/wincred",
		"golang.org/x/sys/",
		"golang.org/x/crypto/",
	}
	testOnly := []string{
		"go.uber.org/goleak",
		"github.com/google/go-cmp/",
		"pgregory.net/rapid",
	}
	for _, tc := range []struct {
		goos    string
		test    bool
		allowed []string
	}{
		{"linux", false, allowed},
		{"darwin", false, allowed},
		{"windows", false, allowed},
		{"linux", true, append(append([]string{}, allowed...), testOnly...)},
	} {
		name := tc.goos
		if tc.test {
			name += "+tests"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}
			if tc.test {
				args = append(args, "-test")
			}
			cmd := exec.Command(goTool, append(args, "./...")...)
			cmd.Env = append(cmd.Environ(), "GOOS="+tc.goos, "CGO_ENABLED=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go %s: %v", strings.Join(args, " "), err)
			}
			var deps []string
			for dep := range strings.Lines(string(out)) {
				dep = strings.TrimSpace(dep)
				if dep == "" {
					continue
				}
				deps = append(deps, dep)
				if !allowedDep(dep, tc.allowed) {
					t.Errorf("forbidden dependency for GOOS=%s: %s", tc.goos, dep)
				}
			}
			if len(deps) == 0 {
				t.Fatal("go list reported no packages")
			}
		})
	}
}

// allowedDep reports whether pkg is one of allowed: an exact match, a
// package below it, or (for entries ending in "/") anything below it. A
// test binary's synthetic packages ("pkg.test", "pkg [pkg.test]") count as
// pkg.
func allowedDep(pkg string, allowed []string) bool {
	pkg, _, _ = strings.Cut(pkg, " ")
	pkg = strings.TrimSuffix(pkg, ".test")
	pkg = strings.TrimSuffix(pkg, "_test")
	for _, a := range allowed {
		root := strings.TrimSuffix(a, "/")
		if pkg == root || strings.HasPrefix(pkg, root+"/") {
			return true
		}
	}
	return false
}

func TestAllowedDep(t *testing.T) {
	t.Parallel()
	allowed := []string{"github.com/agenthost/agenthost/secrets", "golang.org/x/sys/"}
	for pkg, want := range map[string]bool{
		"github.com/agenthost/agenthost/secrets":                                                    true,
		"github.com/agenthost/agenthost/secrets/secretstest":                                        true,
		"github.com/agenthost/agenthost/secrets.test":                                               true,
		"github.com/agenthost/agenthost/secrets_test [github.com/agenthost/agenthost/secrets.test]": true,
		"golang.org/x/sys/unix":                                                                     true,
		"github.com/agenthost/agenthost/ext":                                                        false,
		"github.com/agenthost/agenthost/secretsbad":                                                 false,
		"golang.org/x/sysfoo":                                                                       false,
		"github.com/stretchr/testify/assert":                                                        false,
	} {
		if got := allowedDep(pkg, allowed); got != want {
			t.Errorf("allowedDep(%q) = %v, want %v", pkg, got, want)
		}
	}
}
