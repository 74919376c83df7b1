package secrets_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
)

// The benchmarks run one operation against each backend. The memory
// backend is the baseline: file and keychain report, beside their own
// ns/op, the memory figure of the same run ("memory-ns/op") and their
// ratio to it ("x-memory").
//
//	go test -run '^$' -bench . -benchmem ./
func BenchmarkGet(b *testing.B) {
	benchBackends(b, "Get", func(b *testing.B, s secrets.Store) {
		ctx := context.Background()
		k := secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}
		if err := s.Set(ctx, k, secrets.NewValue(benchValue)); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := s.Get(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSet(b *testing.B) {
	benchBackends(b, "Set", func(b *testing.B, s secrets.Store) {
		ctx := context.Background()
		k := secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}
		v := secrets.NewValue(benchValue)
		for b.Loop() {
			if err := s.Set(ctx, k, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchValue is the size of a typical OAuth access token.
var benchValue = fmt.Sprintf("%064d", 42)

var (
	baselineMu sync.Mutex
	baseline   = map[string]time.Duration{} // op → memory ns/op
)

// memoryBaseline returns the memory backend's time per op from the
// "memory" sub-benchmark of this run, or false when -bench filtered it out.
// (testing.Benchmark cannot measure it here: it deadlocks inside a running
// benchmark.)
func memoryBaseline(op string) (time.Duration, bool) {
	baselineMu.Lock()
	defer baselineMu.Unlock()
	d, ok := baseline[op]
	return d, ok
}

func benchBackends(b *testing.B, op string, run func(*testing.B, secrets.Store)) {
	b.Run("memory", func(b *testing.B) {
		run(b, secrets.NewMemory())
		baselineMu.Lock()
		baseline[op] = b.Elapsed() / time.Duration(b.N)
		baselineMu.Unlock()
	})
	for _, be := range []struct {
		name string
		open func(b *testing.B) secrets.Store
	}{
		{"file", func(b *testing.B) secrets.Store {
			f, err := secrets.OpenFile(filepath.Join(b.TempDir(), "secrets.enc"), nil)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}},
		{"keychain", func(b *testing.B) secrets.Store { return openRealKeychain(b) }},
	} {
		b.Run(be.name, func(b *testing.B) {
			s := be.open(b)
			defer s.Close()
			run(b, s)
			own := b.Elapsed() / time.Duration(b.N)
			if mem, ok := memoryBaseline(op); ok && mem > 0 {
				b.ReportMetric(float64(mem.Nanoseconds()), "memory-ns/op")
				b.ReportMetric(float64(own)/float64(mem), "x-memory")
			}
		})
	}
}
