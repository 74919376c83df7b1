package catalog_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// BenchmarkActivate10Servers activates one user with ten servers whose
// connects take 5, 10, …, 50 ms, and reports the activation time as a
// ratio of the slowest single connect (target ≤ 1.2).
func BenchmarkActivate10Servers(b *testing.B) {
	const slowest = 50 * time.Millisecond
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		r := &rig{conn: newConnector(), pub: newPublisher(), plan: newPlans()}
		var ds []catalog.ServerDecl
		for i := 1; i <= 10; i++ {
			name := fmt.Sprintf("s%02d", i)
			s := newServer("echo")
			s.connectDelay = time.Duration(i) * slowest / 10
			r.conn.add(name, s)
			ds = append(ds, decl(name))
		}
		r.plan.set("u", ds...)
		e := catalog.New(r.plan, r.conn, r.pub, nil)
		b.StartTimer()
		start := time.Now()
		if err := e.Activate(context.Background(), "u"); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		if n := len(r.pub.names("u")); n != 10 {
			b.Fatalf("%d tools published, want 10", n)
		}
		_ = e.Close(context.Background())
		b.StartTimer()
	}
	avg := total / time.Duration(b.N)
	b.ReportMetric(float64(avg.Microseconds())/1000, "activate-ms")
	b.ReportMetric(float64(slowest.Microseconds())/1000, "slowest-connect-ms")
	b.ReportMetric(float64(avg)/float64(slowest), "ratio")
}

// Benchmark1000Users activates 1,000 users with three servers each
// (instant fake connections), then deactivates them all, twice on one
// engine. It reports the activation time, the heap per user-connection,
// the heap left after the first round and its growth over the second
// (which must stay near zero).
func Benchmark1000Users(b *testing.B) {
	const users, servers = 1000, 3
	var activate time.Duration
	var perConn, retained, growth float64
	for b.Loop() {
		b.StopTimer()
		r := &rig{conn: newConnector(), pub: newPublisher(), plan: newPlans()}
		var ds []catalog.ServerDecl
		for i := range servers {
			name := fmt.Sprintf("s%d", i)
			r.conn.add(name, newServer("a", "b", "c"))
			ds = append(ds, decl(name))
		}
		ids := make([]string, users)
		for i := range ids {
			ids[i] = fmt.Sprintf("user%04d", i)
			r.plan.set(ids[i], ds...)
		}
		e := catalog.New(r.plan, r.conn, r.pub, nil)
		round := func() (activated, retired uint64) {
			before := heap()
			start := time.Now()
			parallel(ids, func(id string) {
				if err := e.Activate(context.Background(), id); err != nil {
					b.Error(err)
				}
			})
			activate += time.Since(start)
			activated = heap() - before
			parallel(ids, func(id string) {
				if err := e.Deactivate(context.Background(), id); err != nil {
					b.Error(err)
				}
			})
			// Closes run in the background: wait for them, then make the
			// fakes forget what they recorded.
			for i := range servers {
				s := r.conn.lookup("", fmt.Sprintf("s%d", i))
				for len(s.live()) > 0 {
					time.Sleep(time.Millisecond)
				}
				s.set(func(s *fakeServer) { s.conns = nil })
			}
			r.pub.mu.Lock()
			r.pub.last, r.pub.count = map[string][]ext.Tool{}, map[string]int{}
			r.pub.mu.Unlock()
			return activated, heap()
		}
		base := heap()
		act, after1 := round()
		_, after2 := round()
		perConn += float64(act) / (users * servers)
		retained += float64(after1) - float64(base)
		growth += float64(after2) - float64(after1)
		_ = e.Close(context.Background())
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(activate.Milliseconds())/n/2, "activate-1000-users-ms")
	b.ReportMetric(perConn/n, "B/user-conn")
	b.ReportMetric(retained/n, "B-retained-after-retire")
	b.ReportMetric(growth/n, "B-growth-2nd-round")
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// parallel runs f for each id with 32 workers.
func parallel(ids []string, f func(string)) {
	ch := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for id := range ch {
				f(id)
			}
		})
	}
	for _, id := range ids {
		ch <- id
	}
	close(ch)
	wg.Wait()
}
