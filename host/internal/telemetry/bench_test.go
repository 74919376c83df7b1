package telemetry_test

import (
	"context"
	"testing"

	"github.com/agenthost/agenthost/host/internal/telemetry"
)

// BenchmarkCallMetrics is the metrics path of one tools/call with
// metrics on and traces off: StartCall (the cappers) and End (the
// attribute set and the histogram record).
func BenchmarkCallMetrics(b *testing.B) {
	tel, err := telemetry.New(context.Background(), telemetry.Config{Metrics: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _, sp := tel.StartCall(ctx, telemetry.Call{Tool: "notes/echo"}, nil)
		sp.End("")
	}
}
