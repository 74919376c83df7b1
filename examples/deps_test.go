package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNothingImportsExamples enforces DESIGN.md §1: examples may import
// anything, and nothing imports examples.
func TestNothingImportsExamples(t *testing.T) {
	mods, err := filepath.Glob("../*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 6 {
		t.Fatalf("found only %d modules beside examples", len(mods))
	}
	for _, m := range mods {
		if filepath.Base(filepath.Dir(m)) == "examples" {
			continue
		}
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "agenthost/agenthost/examples") {
			t.Errorf("%s depends on the examples module", m)
		}
	}
}
