package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agenthost/agenthost/catalog"
	"github.com/agenthost/agenthost/ext"
)

// modelState is the model's view of one (user, server).
type modelState int

const (
	mNone modelState = iota
	mConnected
	mQuarantined
	mDisabled
)

func (s modelState) String() string {
	return [...]string{"none", "connected", "quarantined", "disabled"}[s]
}

// TestStateMachine drives the engine with random plan changes, failures,
// crashes, activations, calls and deactivations for two users and checks
// it against a model after every step: the published tools, the answer to
// every call, and that exactly the connected servers hold an open
// connection.
func TestStateMachine(t *testing.T) {
	users := []string{"ann", "ben"}
	servers := []string{"s1", "s2", "s3"}
	rapid.Check(t, func(rt *rapid.T) {
		r := &rig{conn: newConnector(), pub: newPublisher(), plan: newPlans()}
		// Retries never fire during a run: quarantine lasts until the
		// server leaves the plan.
		r.e = catalog.New(r.plan, r.conn, r.pub, &catalog.Options{Backoff: catalog.Backoff{Min: time.Hour}})
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.e.Close(ctx); err != nil {
				rt.Errorf("Close: %v", err)
			}
			for _, u := range users {
				for _, s := range servers {
					if n := len(r.conn.lookup(u, s).live()); n != 0 {
						rt.Errorf("%s/%s: %d connections open after Close", u, s, n)
					}
				}
			}
		}()
		on := map[string]map[string]bool{}
		broken := map[string]bool{}
		state := map[string]modelState{}
		active := map[string]bool{}
		for _, u := range users {
			on[u] = map[string]bool{}
			for _, s := range servers {
				r.conn.add(u+"/"+s, newServer("echo"))
			}
		}
		key := func(u, s string) string { return u + "/" + s }
		setPlan := func(u string) {
			var ds []catalog.ServerDecl
			for _, s := range servers {
				if on[u][s] {
					ds = append(ds, decl(s))
				}
			}
			r.plan.set(u, ds...)
		}
		ctx := context.Background()

		rt.Repeat(map[string]func(*rapid.T){
			"toggle": func(rt *rapid.T) {
				u := rapid.SampledFrom(users).Draw(rt, "user")
				s := rapid.SampledFrom(servers).Draw(rt, "server")
				on[u][s] = !on[u][s]
				setPlan(u)
			},
			"break": func(rt *rapid.T) {
				u := rapid.SampledFrom(users).Draw(rt, "user")
				s := rapid.SampledFrom(servers).Draw(rt, "server")
				broken[key(u, s)] = !broken[key(u, s)]
				b := broken[key(u, s)]
				r.conn.lookup(u, s).set(func(fs *fakeServer) {
					fs.connectErr = nil
					if b {
						fs.connectErr = errors.New("refused")
					}
				})
			},
			"activate": func(rt *rapid.T) {
				u := rapid.SampledFrom(users).Draw(rt, "user")
				if err := r.e.Activate(ctx, u); err != nil {
					rt.Fatalf("Activate: %v", err)
				}
				active[u] = true
				for _, s := range servers {
					k := key(u, s)
					switch st := state[k]; {
					case on[u][s] && (st == mNone || st == mDisabled):
						state[k] = mConnected
						if broken[k] {
							state[k] = mQuarantined
						}
					case !on[u][s] && (st == mConnected || st == mQuarantined):
						state[k] = mDisabled
					}
				}
			},
			"crash": func(rt *rapid.T) {
				// Crash one of the connected servers; with none there is
				// nothing to crash.
				var connected [][2]string
				for _, u := range users {
					for _, s := range servers {
						if state[key(u, s)] == mConnected {
							connected = append(connected, [2]string{u, s})
						}
					}
				}
				if len(connected) == 0 {
					return
				}
				pick := rapid.SampledFrom(connected).Draw(rt, "connected")
				u, s := pick[0], pick[1]
				k := key(u, s)
				r.conn.lookup(u, s).last().crash(errors.New("killed"))
				state[k] = mQuarantined
				waitFor(rt, func() bool {
					return statusOf(r.e, u, s).State == "quarantined" && !slices.Contains(r.pub.names(u), s+"/echo")
				})
			},
			"deactivate": func(rt *rapid.T) {
				u := rapid.SampledFrom(users).Draw(rt, "user")
				if err := r.e.Deactivate(ctx, u); err != nil {
					rt.Fatalf("Deactivate: %v", err)
				}
				active[u] = false
				for _, s := range servers {
					state[key(u, s)] = mNone
				}
			},
			"": func(rt *rapid.T) {
				for _, u := range users {
					var want []string
					for _, s := range servers {
						if state[key(u, s)] == mConnected {
							want = append(want, s+"/echo")
						}
					}
					if got := r.pub.names(u); (active[u] || len(got) > 0) && !slices.Equal(got, want) {
						rt.Fatalf("published tools of %s: %q, want %q", u, got, want)
					}
					for _, s := range servers {
						k := key(u, s)
						res, err := r.e.Call(ctx, &ext.CallToolRequest{User: u, Name: s + "/echo"})
						switch state[k] {
						case mConnected:
							if err != nil || res.IsError || res.Text() != fmt.Sprintf("%s@%s:echo", u, s) {
								rt.Fatalf("call %s: %v %q; want a result from %s's connection", k, err, res.Text(), u)
							}
						case mQuarantined:
							if err != nil || !res.IsError || !strings.Contains(res.Text(), "unavailable") {
								rt.Fatalf("call %s: %v %q; want the unavailable result", k, err, res.Text())
							}
						case mDisabled:
							if err != nil || res.Text() != fmt.Sprintf("MCP server %q is disabled", s) {
								rt.Fatalf("call %s: %v %q; want the disabled result", k, err, res.Text())
							}
						case mNone:
							if !errors.Is(err, ext.ErrNotFound) {
								rt.Fatalf("call %s: %v %+v; want ErrNotFound", k, err, res)
							}
						}
						wantOpen := 0
						if state[k] == mConnected {
							wantOpen = 1
						}
						waitFor(rt, func() bool { return len(r.conn.lookup(u, s).live()) == wantOpen })
					}
				}
			},
		})
	})
}

// waitFor polls cond for up to five seconds.
func waitFor(t interface{ Fatalf(string, ...any) }, cond func() bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
