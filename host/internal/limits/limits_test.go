package limits_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host/internal/limits"
)

// clock is a test clock moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newLimiter(t *testing.T, cfg limits.Config, groups map[string][]string) (*limits.Limiter, *clock) {
	t.Helper()
	if err := cfg.Validate("limits"); err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := limits.New(&cfg, &limits.Options{Now: c.now, Groups: func(u string) []string { return groups[u] }})
	if l == nil {
		t.Fatal("no limiter for a config with limits")
	}
	return l, c
}

// calls makes n calls (released at once) and returns how many were
// admitted and the last refusal.
func calls(l *limits.Limiter, user, tool string, n int) (ok int, last *limits.Refusal) {
	for range n {
		rel, err := l.Acquire(user, tool)
		if err != nil {
			if !errors.As(err, &last) {
				panic(err)
			}
			continue
		}
		rel()
		ok++
	}
	return ok, last
}

func lim(perMinute float64, concurrent int) *limits.Limit {
	return &limits.Limit{PerMinute: perMinute, Concurrent: concurrent}
}

// TestBucketPerUser: each user has their own bucket; a refusal says which
// limit and when to retry, matches ext.ErrBusy, and the bucket refills.
func TestBucketPerUser(t *testing.T) {
	l, c := newLimiter(t, limits.Config{Set: limits.Set{User: lim(60, 0)}}, nil)
	ok, r := calls(l, "alice", "notes/echo", 100)
	if ok != 60 || r == nil {
		t.Fatalf("alice: %d admitted of 100 (want 60), refusal %v", ok, r)
	}
	if r.Scope != limits.ScopeUser || r.Kind != limits.KindRate || r.RetryAfter <= 0 || r.RetryAfter > time.Second ||
		!errors.Is(r, ext.ErrBusy) || !errors.Is(r, limits.ErrLimited) || !strings.Contains(r.Error(), "60 calls per minute") {
		t.Errorf("refusal %+v %q", r, r.Error())
	}
	if ok, _ := calls(l, "bob", "notes/echo", 60); ok != 60 {
		t.Errorf("bob was slowed by alice's loop: %d of 60", ok)
	}
	c.add(r.RetryAfter)
	if ok, _ := calls(l, "alice", "notes/echo", 2); ok != 1 {
		t.Errorf("after RetryAfter alice got %d calls, want 1", ok)
	}
	if got := l.Refused()["user_rate"]; got != 40+1 {
		t.Errorf("refused user_rate = %d, want 41", got)
	}
}

// TestConcurrency: a concurrency limit refuses the call beyond it while
// the first runs, and admits again once it ends.
func TestConcurrency(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{Set: limits.Set{Tools: map[string]limits.Limit{"notes/slow": {Concurrent: 1}}}}, nil)
	rel, err := l.Acquire("alice", "notes/slow")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire("alice", "notes/slow")
	var r *limits.Refusal
	if !errors.As(err, &r) || r.Scope != limits.ScopeTool || r.Kind != limits.KindConcurrency || r.Subject != "notes/slow" || r.RetryAfter != limits.ConcurrencyRetry {
		t.Fatalf("second concurrent call: %v", err)
	}
	if rel2, err := l.Acquire("alice", "notes/echo"); err != nil {
		t.Errorf("another tool was refused: %v", err)
	} else {
		rel2()
	}
	if rel2, err := l.Acquire("bob", "notes/slow"); err != nil {
		t.Errorf("bob's call was refused by alice's: %v", err)
	} else {
		rel2()
	}
	rel()
	if rel, err := l.Acquire("alice", "notes/slow"); err != nil {
		t.Errorf("after the first ended: %v", err)
	} else {
		rel()
	}
}

// TestDefaultsAndOverrides: server and tool globs (the most specific
// applies, each server and tool its own bucket), a user's override, a
// group's, the most generous of two groups, and a user's own entry over
// their group's.
func TestDefaultsAndOverrides(t *testing.T) {
	cfg := limits.Config{
		Set: limits.Set{
			User:    lim(100, 0),
			Servers: map[string]limits.Limit{"*": {PerMinute: 10}, "big": {PerMinute: 50}},
			Tools:   map[string]limits.Limit{"notes/*": {PerMinute: 5}, "notes/echo": {PerMinute: 7}, "notes/free": {}},
		},
		Overrides: map[string]limits.Set{
			"carol":      {User: lim(3, 0)},
			"group:ops":  {Tools: map[string]limits.Limit{"notes/*": {PerMinute: 8}}},
			"group:devs": {Tools: map[string]limits.Limit{"notes/*": {PerMinute: 9}}},
			"dave":       {Tools: map[string]limits.Limit{"notes/*": {PerMinute: 2}}},
		},
	}
	groups := map[string][]string{"erin": {"ops"}, "frank": {"ops", "devs"}, "dave": {"devs"}}
	for _, c := range []struct {
		user, tool string
		want       int
		scope      string
	}{
		{"alice", "notes/add", 5, limits.ScopeTool},
		{"alice", "notes/list", 5, limits.ScopeTool},    // its own bucket
		{"alice", "notes/echo", 7, limits.ScopeTool},    // the literal name wins
		{"alice", "notes/free", 10, limits.ScopeServer}, // {} there: no tool limit; the server's
		{"alice", "gh/x", 10, limits.ScopeServer},
		{"alice", "big/x", 50, limits.ScopeServer},
		{"carol", "big/x", 3, limits.ScopeUser},
		{"erin", "other/x", 10, limits.ScopeServer},
		{"erin", "notes/add", 8, limits.ScopeTool},
		{"frank", "notes/add", 9, limits.ScopeTool},
		{"dave", "notes/add", 2, limits.ScopeTool},
	} {
		l, _ := newLimiter(t, cfg, groups)
		ok, r := calls(l, c.user, c.tool, 60)
		if ok != c.want || r == nil || r.Scope != c.scope {
			t.Errorf("%s %s: %d admitted, refusal %+v; want %d, then %s", c.user, c.tool, ok, r, c.want, c.scope)
		}
	}
	// Tools of one server share the server's bucket.
	l, _ := newLimiter(t, cfg, groups)
	a, _ := calls(l, "alice", "gh/a", 6)
	b, _ := calls(l, "alice", "gh/b", 6)
	if a+b != 10 {
		t.Errorf("gh/a and gh/b: %d+%d admitted, want 10 together", a, b)
	}
}

// TestRefusedCallsTakeNothing: a call refused by the tool's bucket gives
// the user's and the server's tokens back.
func TestRefusedCallsTakeNothing(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{Set: limits.Set{User: lim(10, 0), Tools: map[string]limits.Limit{"a/x": {PerMinute: 1}}}}, nil)
	if ok, _ := calls(l, "alice", "a/x", 20); ok != 1 {
		t.Fatalf("a/x: %d", ok)
	}
	if ok, _ := calls(l, "alice", "a/y", 20); ok != 9 {
		t.Errorf("after 19 refusals of a/x, a/y got %d calls, want 9", ok)
	}
}

// TestIdleEviction: a user's state is dropped once idle with nothing in
// flight and full buckets, and not before.
func TestIdleEviction(t *testing.T) {
	l, c := newLimiter(t, limits.Config{Set: limits.Set{User: lim(60, 2)}, IdleMinutes: 1}, nil)
	calls(l, "alice", "s/t", 60)
	rel, err := l.Acquire("bob", "s/t")
	if err != nil {
		t.Fatal(err)
	}
	calls(l, "carol", "s/t", 1)
	if l.Users() != 3 {
		t.Fatalf("users %d", l.Users())
	}
	c.add(30 * time.Second)
	if n := l.Sweep(); n != 0 {
		t.Errorf("swept %d before the idle time", n)
	}
	c.add(31 * time.Second)
	// carol: idle, bucket full again; alice: idle but her bucket refills
	// in a minute from her last call (60 calls at once); bob: in flight.
	if n := l.Sweep(); n != 2 || l.Users() != 1 {
		t.Errorf("swept %d, %d left; want alice and carol dropped", n, l.Users())
	}
	rel()
	c.add(2 * time.Minute)
	if n := l.Sweep(); n != 1 || l.Users() != 0 {
		t.Errorf("swept %d, %d left", n, l.Users())
	}
	// A dropped user starts again with a full bucket.
	if ok, _ := calls(l, "alice", "s/t", 61); ok != 60 {
		t.Errorf("after eviction: %d", ok)
	}
}

// TestEvictionKeepsADrainedBucket: a user who drained a slow bucket is not
// forgiven by being dropped while it is not full again.
func TestEvictionKeepsADrainedBucket(t *testing.T) {
	l, c := newLimiter(t, limits.Config{Set: limits.Set{User: lim(1, 0)}, IdleMinutes: 0.5}, nil)
	calls(l, "alice", "s/t", 1)
	c.add(40 * time.Second)
	if n := l.Sweep(); n != 0 {
		t.Errorf("dropped a user whose bucket is not full again")
	}
	if ok, _ := calls(l, "alice", "s/t", 1); ok != 0 {
		t.Errorf("the bucket was forgiven")
	}
}

// TestForget: a user's groups changed: the next call resolves again.
func TestForget(t *testing.T) {
	groups := map[string][]string{}
	cfg := limits.Config{Set: limits.Set{User: lim(1, 0)}, Overrides: map[string]limits.Set{"group:ops": {User: &limits.Limit{}}}}
	l := limits.New(&cfg, &limits.Options{Groups: func(u string) []string { return groups[u] }})
	if ok, _ := calls(l, "alice", "s/t", 5); ok != 1 {
		t.Fatalf("before: %d", ok)
	}
	groups["alice"] = []string{"ops"}
	l.Forget("alice")
	if ok, _ := calls(l, "alice", "s/t", 5); ok != 5 {
		t.Errorf("in group ops (no user limit): %d of 5", ok)
	}
}

// TestParallelUsers: many users' calls at once under -race.
func TestParallelUsers(t *testing.T) {
	l, _ := newLimiter(t, limits.Config{Set: limits.Set{User: lim(1000, 4)}}, nil)
	var wg sync.WaitGroup
	for _, u := range []string{"a", "b", "c", "d"} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					if rel, err := l.Acquire(u, "s/t"); err == nil {
						rel()
					}
					l.Sweep()
				}
			}()
		}
	}
	wg.Wait()
}

func TestValidate(t *testing.T) {
	cfg := limits.Config{
		Set: limits.Set{User: &limits.Limit{PerMinute: -1, Burst: 2}, Servers: map[string]limits.Limit{"a/b": {}},
			Tools: map[string]limits.Limit{"[": {}, "nos": {Concurrent: -2}}},
		Overrides:   map[string]limits.Set{"group:": {}},
		IdleMinutes: -1,
	}
	err := cfg.Validate("limits")
	for _, want := range []string{"limits.user.perMinute", `limits.servers["a/b"]: a server glob`, `limits.tools["["]: not a glob`,
		`limits.tools["nos"]: a tool glob`, `limits.tools["nos"].concurrent`, `limits.overrides["group:"]`, "limits.idleMinutes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if limits.New(&limits.Config{}, nil) != nil {
		t.Error("an empty config made a limiter")
	}
}

// BenchmarkAcquire measures a call's admission and release with a user, a
// server and a tool limit that all apply (never reached), beside the nil
// Limiter of a host without limits (the baseline), for one user and for
// parallel callers each their own user (no shared lock: the figure should
// not grow with them).
func BenchmarkAcquire(b *testing.B) {
	cfg := limits.Config{Set: limits.Set{User: lim(1e12, 1<<20),
		Servers: map[string]limits.Limit{"*": {PerMinute: 1e12, Concurrent: 1 << 20}},
		Tools:   map[string]limits.Limit{"s/*": {PerMinute: 1e12, Concurrent: 1 << 20}}}}
	for _, c := range []struct {
		name string
		l    *limits.Limiter
	}{{"no-limits", nil}, {"limits", limits.New(&cfg, nil)}} {
		b.Run(c.name+"/one-user", func(b *testing.B) {
			for range b.N {
				rel, err := c.l.Acquire("alice", "s/t")
				if err != nil {
					b.Fatal(err)
				}
				rel()
			}
		})
		b.Run(c.name+"/parallel-users", func(b *testing.B) {
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				user := fmt.Sprint("u", n.Add(1))
				for pb.Next() {
					rel, err := c.l.Acquire(user, "s/t")
					if err != nil {
						b.Fatal(err)
					}
					rel()
				}
			})
		})
	}
}

// TestReconfigureInPlace: a new config takes effect for users with state
// (a lowered limit refuses at once, counting the calls already made), an
// unchanged limit keeps its bucket, a limit from nothing starts, calls in
// flight count against a new concurrency limit, and a limiter made
// without limits takes them on a reconfigure.
func TestReconfigureInPlace(t *testing.T) {
	cfg := limits.Config{Set: limits.Set{User: lim(60, 0), Tools: map[string]limits.Limit{"notes/a": {PerMinute: 10}}}}
	l, c := newLimiter(t, cfg, nil)
	if ok, _ := calls(l, "alice", "notes/a", 5); ok != 5 {
		t.Fatalf("admitted %d of 5", ok)
	}
	hold, err := l.Acquire("alice", "notes/b")
	if err != nil {
		t.Fatal(err)
	}
	// Lower the user's limit to 3 a minute; notes/a unchanged; notes/b
	// now 1 at a time.
	cfg2 := limits.Config{Set: limits.Set{User: lim(3, 0), Tools: map[string]limits.Limit{"notes/a": {PerMinute: 10}, "notes/b": {Concurrent: 1}}}}
	l.Reconfigure(&cfg2)
	if ok, r := calls(l, "alice", "notes/a", 4); ok != 3 || r == nil || r.Scope != limits.ScopeUser {
		t.Fatalf("after lowering the user limit: admitted %d of 4 (want 3, then the user's limit), refusal %v", ok, r)
	}
	c.add(time.Minute)
	// notes/a kept its bucket: 10 a minute with 8 taken, a minute later
	// full again at 10; the user's bucket (3) is the bound now.
	if ok, _ := calls(l, "alice", "notes/a", 3); ok != 3 {
		t.Fatalf("admitted %d of 3 a minute later", ok)
	}
	c.add(time.Minute)
	if _, err := l.Acquire("alice", "notes/b"); err == nil {
		t.Fatal("notes/b admitted a second call beside the one in flight from before the reconfigure")
	}
	hold()
	// Unchanged limit keeps its bucket: bob's notes/a bucket drained stays drained.
	cfg3 := limits.Config{Set: limits.Set{Tools: map[string]limits.Limit{"notes/a": {PerMinute: 2}}}}
	l.Reconfigure(&cfg3)
	if ok, _ := calls(l, "bob", "notes/a", 3); ok != 2 {
		t.Fatalf("bob admitted %d of 3 at 2 a minute", ok)
	}
	l.Reconfigure(&cfg3)
	if ok, _ := calls(l, "bob", "notes/a", 1); ok != 0 {
		t.Fatal("a reconfigure with the same limit refilled bob's bucket")
	}

	// From no limits at all.
	empty := limits.NewReloadable(&limits.Config{}, &limits.Options{Now: c.now})
	if ok, _ := calls(empty, "carol", "notes/a", 5); ok != 5 {
		t.Fatal("a limiter without limits refused a call")
	}
	empty.Reconfigure(&cfg3)
	if ok, _ := calls(empty, "carol", "notes/a", 3); ok != 2 {
		t.Fatalf("carol admitted %d of 3 after limits were added", ok)
	}
}

// TestReconfigureWhileAStateIsMade: a reload that lands while a user's
// state is being made (after its limits were resolved, before it is
// stored, where Reconfigure's walk cannot see it) still reaches that
// user: the state is resolved again before its first call is decided.
func TestReconfigureWhileAStateIsMade(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	resolved, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	limits.SetStateMade(func(string) {
		once.Do(func() {
			close(resolved)
			<-proceed
		})
	})
	t.Cleanup(func() { limits.SetStateMade(nil) })
	l := limits.NewReloadable(&limits.Config{Set: limits.Set{User: lim(100, 0)}}, &limits.Options{Now: c.now})
	admitted := make(chan int)
	go func() {
		ok, _ := calls(l, "alice", "notes/a", 3)
		admitted <- ok
	}()
	<-resolved // alice's state is made with 100 a minute, not yet stored
	l.Reconfigure(&limits.Config{Set: limits.Set{User: &limits.Limit{PerMinute: 1, Burst: 1}}})
	close(proceed)
	if ok := <-admitted; ok != 1 {
		t.Fatalf("admitted %d of 3 after the limit was lowered to 1 a minute (burst 1): the reload missed the state being made", ok)
	}
}
