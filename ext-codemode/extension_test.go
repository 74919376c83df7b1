package codemode_test

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/agenthost/agenthost/ext"
	codemode "github.com/agenthost/agenthost/ext-codemode"
)

// TestConfigureRaisesProcs: Configure leaves a Go P for each script that a
// busy machine may starve at idle priority (GOMAXPROCS at least the CPUs
// plus maxRuns), and never lowers it.
func TestConfigureRaisesProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	if err := codemode.New().Configure(context.Background(), &ext.ConfigureRequest{Name: "code", Config: json.RawMessage(`{"maxRuns":3}`)}); err != nil {
		t.Fatal(err)
	}
	if got, want := runtime.GOMAXPROCS(0), runtime.NumCPU()+3; got != want {
		t.Errorf("GOMAXPROCS after Configure with maxRuns 3 = %d, want %d", got, want)
	}
	runtime.GOMAXPROCS(runtime.NumCPU() + 10)
	if err := codemode.New().Configure(context.Background(), &ext.ConfigureRequest{Name: "code", Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != runtime.NumCPU()+10 {
		t.Errorf("Configure lowered GOMAXPROCS to %d", got)
	}
}
