// Package testbin builds the repository's binaries for end-to-end tests.
// Builds are cached per test process; Build is safe for concurrent use.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{}
)

// Build builds the main package pkg (an import path such as
// "github.com/agenthost/agenthost/examples/hello") once per test process
// and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "agenthost-bin-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, path.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// Cleanup removes the built binaries; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	dir = ""
	built = map[string]string{}
}

// Main is a TestMain body that cleans up after the tests.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "testbin: tests failed")
	}
	os.Exit(code)
}

// Processes returns the running processes for which match reports true,
// given each one's /proc folder (Linux; elsewhere none).
func Processes(match func(procDir string) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		var pid int
		if _, err := fmt.Sscanf(d.Name(), "%d", &pid); err != nil {
			continue
		}
		if match(filepath.Join("/proc", d.Name())) {
			pids = append(pids, pid)
		}
	}
	return pids
}
