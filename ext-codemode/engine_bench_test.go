package codemode_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	codemode "github.com/agenthost/agenthost/ext-codemode"
)

// BenchmarkInnerCallEngine is the engine's share of an inner call (no
// gRPC, no server: the call returns its arguments): scripts of 20 calls
// and of none, interleaved in the same run; per-inner-call-µs is the
// difference over 20, the part of BenchmarkCodeMode's ×direct that
// QuickJS's promise plumbing and the JSON conversions take.
func BenchmarkInnerCallEngine(b *testing.B) {
	var n atomic.Int32
	// The process's CPU time (user+system), the figure a loaded machine
	// does not skew as it does wall time.
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(code string) (wall, used time.Duration) {
		start, c0 := time.Now(), cpu()
		if o := codemode.Run(context.Background(), code, names, codemode.Limits{}, echo(&n), nil); o.Error != nil {
			b.Fatal(o.Error.Message)
		}
		return time.Since(start), cpu() - c0
	}
	var zero, twenty, zeroCPU, twentyCPU time.Duration
	for range b.N {
		w, c := run(`return 1`)
		zero, zeroCPU = zero+w, zeroCPU+c
		w, c = run(`for (let i = 0; i < 20; i++) await tools.t.echo({text: "hi"}); return 1`)
		twenty, twentyCPU = twenty+w, twentyCPU+c
	}
	per := func(d time.Duration) float64 { return float64(d/time.Duration(b.N)) / 20 / 1e3 }
	b.ReportMetric(per(twenty-zero), "per-inner-call-µs")
	b.ReportMetric(per(twentyCPU-zeroCPU), "per-inner-call-cpu-µs")
	b.ReportMetric(float64(zero/time.Duration(b.N))/1e3, "script-0-µs")
}
