package catalog_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/agenthost/catalog"
)

// TestPlanOfIsPure: planning from a snapshot reads nothing (the readers
// fail the test if called), gives the same plan for the same snapshot,
// and the plan Plan reads is the plan of what it read; the snapshot's
// groups lend a shared server, the snapshot's switches and own servers
// decide the rest.
func TestPlanOfIsPure(t *testing.T) {
	notes := catalog.ServerDecl{Name: "notes", Enabled: true, Fingerprint: "n"}
	team := catalog.ServerDecl{Name: "team", Remote: true, Enabled: true, Credentials: catalog.CredentialsShared,
		Users: []string{"group:eng"}, Fingerprint: "t"}
	snap := catalog.Snapshot{User: "alice", Groups: []string{"eng"},
		Toggles: json.RawMessage(`{"notes":false,"team":true}`), OwnServers: json.RawMessage(`{"mine":{"url":"https://m"}}`)}
	creds := 0
	p := &catalog.SettingsPlanner{
		Servers: []catalog.ServerDecl{notes, team}, UserServers: catalog.UserServersURL, ParseOwnServers: parseOwn,
		Credential: func(_ context.Context, user string, s catalog.ServerDecl) (catalog.Credential, error) {
			creds++
			return catalog.Credential{ID: user + ":" + s.Name}, nil
		},
	}
	readers := func(fail bool) {
		p.Toggles = func(context.Context, string) (json.RawMessage, error) {
			if fail {
				t.Error("PlanOf read the switches")
			}
			return snap.Toggles, nil
		}
		p.OwnServers = func(context.Context, string) (json.RawMessage, error) {
			if fail {
				t.Error("PlanOf read the own servers")
			}
			return snap.OwnServers, nil
		}
		p.Groups = func(string) []string {
			if fail {
				t.Error("PlanOf read the groups")
			}
			return snap.Groups
		}
	}
	readers(true)
	first, err := p.PlanOf(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.PlanOf(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("the same snapshot planned twice differs (-first +again):\n%s", diff)
	}
	var names []string
	for _, s := range first.Servers {
		names = append(names, s.Name+" "+s.Fingerprint)
	}
	if want := []string{"team t\x00alice:team", "u_mine https://m\x00alice:u_mine"}; !cmp.Equal(names, want) {
		t.Errorf("planned %q, want %q", names, want)
	}
	if creds != 4 {
		t.Errorf("Credential asked %d times for two plans of two servers", creds)
	}
	readers(false)
	read, err := p.Plan(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, read); diff != "" {
		t.Errorf("Plan differs from PlanOf of what it read (-PlanOf +Plan):\n%s", diff)
	}
	// Without the group, the shared server is not lent, and the switch
	// that turned it on is said to stay off.
	snap.Groups = nil
	readers(true)
	off, err := p.PlanOf(context.Background(), snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(off.Servers) != 1 || len(off.Problems) != 1 || off.Problems[0].Reason != catalog.NotLentReason {
		t.Errorf("without the group: %+v", off)
	}
}
