package extmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/ext"
	extmcp "github.com/agenthost/agenthost/ext-mcp"
	"github.com/agenthost/agenthost/ext/exttest"
)

// storeCounter is an ext.Host that counts the reads of users' settings and
// secrets the extension makes through it.
type storeCounter struct {
	ext.Host
	reads atomic.Int64
}

func (h *storeCounter) UserStore(user string) ext.UserStore {
	return &countedStore{UserStore: h.Host.UserStore(user), n: &h.reads}
}

type countedStore struct {
	ext.UserStore
	n *atomic.Int64
}

func (s *countedStore) Secrets() ext.Secrets   { return countedSecrets{s.UserStore.Secrets(), s.n} }
func (s *countedStore) Settings() ext.Settings { return countedSettings{s.UserStore.Settings(), s.n} }

type countedSecrets struct {
	ext.Secrets
	n *atomic.Int64
}

func (s countedSecrets) Get(ctx context.Context, name string) (string, error) {
	s.n.Add(1)
	return s.Secrets.Get(ctx, name)
}

func (s countedSecrets) List(ctx context.Context) ([]string, error) {
	s.n.Add(1)
	return s.Secrets.List(ctx)
}

type countedSettings struct {
	ext.Settings
	n *atomic.Int64
}

func (s countedSettings) Get(ctx context.Context, section string) (json.RawMessage, error) {
	s.n.Add(1)
	return s.Settings.Get(ctx, section)
}

// TestActivationFromSnapshot: handed the user's snapshot with Activate
// (the host does so for the snapshot capability, which ext-mcp lists),
// ext-mcp plans the activation without reading any setting or secret back
// through the host: N+1 round trips for N stdio servers (a connect each,
// one publish) where reading them costs 2N+2, and each server gets the
// token the snapshot holds. An activation without a snapshot (an older
// host) still reads them through the store.
func TestActivationFromSnapshot(t *testing.T) {
	needBins(t)
	const n = 3
	servers := make([]string, n)
	for i := range servers {
		servers[i] = fmt.Sprintf("%q: %s", fmt.Sprintf("s%d", i), notesServer(""))
	}
	config := `{"userServers": "url", "mcpServers": {` + strings.Join(servers, ", ") + `}}`
	for _, carrier := range []string{"inprocess", "grpc-fd"} {
		t.Run(carrier, func(t *testing.T) {
			var counter *storeCounter
			f := newFixture(t, carrier, config, nil, func(h *exttest.FakeHost) ext.Host {
				counter = &storeCounter{Host: h}
				return counter
			})
			d, err := f.e.Describe(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if !d.Has(ext.CapabilitySnapshot) {
				t.Fatalf("ext-mcp does not list %q: %v", ext.CapabilitySnapshot, d.Capabilities)
			}
			// The store holds nothing of alice's: what the servers see can
			// only come from the snapshot.
			snap := &ext.UserSnapshot{
				Settings: map[string]json.RawMessage{extmcp.SectionServers: json.RawMessage(`{"s2":false}`),
					extmcp.SectionUserServers: json.RawMessage(`{}`)},
				Secrets: map[string]string{},
			}
			for i := range n {
				snap.Secrets[extmcp.TokenSecret(fmt.Sprintf("s%d", i))] = "tok-snap"
			}
			readsBefore, tripsBefore := counter.reads.Load(), f.h.RoundTrips()
			if err := f.e.(ext.UserLifecycle).Activate(ext.WithUserSnapshot(ctx(t), snap), "alice"); err != nil {
				t.Fatal(err)
			}
			reads, trips := counter.reads.Load()-readsBefore, f.h.RoundTrips()-tripsBefore
			t.Logf("activation from a snapshot with %d stdio servers (one switched off): %d host round trips, %d store reads", n, trips, reads)
			if reads != 0 {
				t.Errorf("activating from a snapshot read the user's settings or secrets %d times through the host, want 0", reads)
			}
			if want := int64(n - 1 + 1); trips != want {
				t.Errorf("activating %d servers from a snapshot took %d host round trips, want %d (a connect each, one publish)", n-1, trips, want)
			}
			if res := f.mustCall("alice", "s0/whoami", `{}`); !strings.Contains(res.Text(), "tok-snap") {
				t.Errorf("the server saw %q, want the snapshot's token", res.Text())
			}
			if got := f.names("alice"); hasPrefix(got, "s2/") {
				t.Errorf("the snapshot's switch did not turn s2 off: %v", got)
			}
			// Without a snapshot the store is read, as for an older host.
			readsBefore = counter.reads.Load()
			f.activate("alice")
			if counter.reads.Load() == readsBefore {
				t.Error("an activation without a snapshot read nothing through the host")
			}
		})
	}
}
