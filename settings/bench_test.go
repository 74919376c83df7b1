package settings_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agenthost/agenthost/settings"
)

// The SQLite benchmarks each follow their in-memory baseline, so that
// `go test -bench .` prints each figure beside the one it is measured
// against. Every benchmark reports ops/s.

// benchValue is a typical section: a handful of toggles and a short JSON
// editor text.
var benchValue = json.RawMessage(`{"notes":true,"search":false,"team":true,"timeout":30,` +
	`"mine":"{\"mcpServers\":{\"docs\":{\"url\":\"https://docs.example.com/mcp\"}}}"}`)

func reportOps(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func memoryStore(b *testing.B) settings.Store {
	s := settings.NewMemoryStore()
	b.Cleanup(func() { s.Close() })
	return s
}

func sqliteStore(b *testing.B) settings.Store {
	return openSQLite(b, filepath.Join(b.TempDir(), "settings.db"))
}

func benchGet(b *testing.B, s settings.Store) {
	ctx := context.Background()
	// Other users' rows make the lookup honest.
	for i := range 100 {
		if err := s.Set(ctx, "mcp", "user"+strconv.Itoa(i), "servers", benchValue); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := s.Get(ctx, "mcp", "user42", "servers"); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
}

func benchSet(b *testing.B, s settings.Store) {
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		if err := s.Set(ctx, "mcp", "user"+strconv.Itoa(i%100), "servers", benchValue); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
}

// benchUpdateParallel has every goroutine increment one counter in one
// user's section: the worst case for a read-modify-write.
func benchUpdateParallel(b *testing.B, s settings.Store) {
	ctx := context.Background()
	inc := func(old json.RawMessage) (json.RawMessage, error) {
		var v struct {
			N int `json:"n"`
		}
		if err := json.Unmarshal(old, &v); err != nil {
			return nil, err
		}
		v.N++
		return json.Marshal(v)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Update(ctx, "mcp", "alice", "counter", inc); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportOps(b)
	b.StopTimer()
	got, err := s.Get(ctx, "mcp", "alice", "counter")
	if err != nil {
		b.Fatal(err)
	}
	if want := fmt.Sprintf(`{"n":%d}`, b.N); string(got) != want {
		b.Fatalf("counter = %s after %d updates, want %s", got, b.N, want)
	}
}

func BenchmarkMemoryGet(b *testing.B) { benchGet(b, memoryStore(b)) }
func BenchmarkSQLiteGet(b *testing.B) { benchGet(b, sqliteStore(b)) }

func BenchmarkMemorySet(b *testing.B) { benchSet(b, memoryStore(b)) }
func BenchmarkSQLiteSet(b *testing.B) { benchSet(b, sqliteStore(b)) }

func BenchmarkMemoryUpdateParallel(b *testing.B) { benchUpdateParallel(b, memoryStore(b)) }
func BenchmarkSQLiteUpdateParallel(b *testing.B) { benchUpdateParallel(b, sqliteStore(b)) }

func BenchmarkValidateValues(b *testing.B) {
	form := testForm(b)
	values := json.RawMessage(`{"name":"bob","enabled":false,"timeout":30,"size":"m",` +
		`"servers":"{\"mcpServers\":{\"x\":{\"command\":\"run\",\"args\":[\"a\"]}}}","advanced":{"retries":2}}`)
	for b.Loop() {
		if _, err := settings.ValidateValues(form, values); err != nil {
			b.Fatal(err)
		}
	}
	reportOps(b)
}
