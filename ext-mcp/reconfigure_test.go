package extmcp_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// TestReconfigureInPlace: a new config block taken over the wire
// (Reconfigure) adds a server to an active user without touching the
// connection of the one kept (its process keeps its notes), removes one
// through the retire path (a running call finishes with its real result,
// new ones get the disabled result); a dry run, a bad block and a block
// that changes maxResultBytes change nothing, the last two naming the
// field (ErrInvalidArgument, ErrUnimplemented: the host then restarts
// the extension).
func TestReconfigureInPlace(t *testing.T) {
	needBins(t)
	t.Parallel()
	one := fmt.Sprintf(`{"mcpServers": {"notes": %s}}`, notesServer(""))
	two := fmt.Sprintf(`{"mcpServers": {"notes": %s, "more": %s}}`, notesServer(""), notesServer(""))
	onlyMore := fmt.Sprintf(`{"mcpServers": {"more": %s}}`, notesServer(""))
	f := newFixture(t, "grpc", one, nil)
	rc := f.e.(ext.Reconfigurer)
	reconfigure := func(block string, dry bool) error {
		return rc.Reconfigure(ctx(t), &ext.ReconfigureRequest{Config: []byte(block), DryRun: dry})
	}
	f.activate("alice")
	f.mustCall("alice", "notes/add_note", `{"text":"kept"}`)

	if err := reconfigure(two, true); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if names := f.names("alice"); hasPrefix(names, "more/") {
		t.Fatalf("a dry run changed the tools: %v", names)
	}
	if err := reconfigure(two, false); err != nil {
		t.Fatalf("adding a server: %v", err)
	}
	names := f.names("alice")
	if !slices.Contains(names, "more/echo") || !slices.Contains(names, "notes/echo") {
		t.Fatalf("after adding more: %v", names)
	}
	if got := f.mustCall("alice", "notes/list_notes", `{}`).Text(); !strings.Contains(got, "kept") {
		t.Errorf("the kept server's connection was renewed (its notes are gone): %s", got)
	}

	type out struct {
		res *ext.CallToolResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := f.call("alice", "notes/slow", `{"duration":"1500ms"}`)
		done <- out{res, err}
	}()
	time.Sleep(300 * time.Millisecond) // the call is running (as in TestDrain)
	if err := reconfigure(onlyMore, false); err != nil {
		t.Fatalf("removing a server: %v", err)
	}
	if names := f.names("alice"); hasPrefix(names, "notes/") || !slices.Contains(names, "more/echo") {
		t.Errorf("after removing notes: %v", names)
	}
	if res, err := f.call("alice", "notes/echo", `{"text":"x"}`); err != nil || res.Text() != `MCP server "notes" is disabled` {
		t.Errorf("a new call to the removed server: %v %q", err, res.Text())
	}
	if o := <-done; o.err != nil || o.res.IsError || o.res.Text() != "slept 1.5s" {
		t.Errorf("the call running on the removed server: %v %+v; want its real result", o.err, o.res)
	}

	bad := fmt.Sprintf(`{"mcpServers": {"more": %s, "x": {"command": "y", "timeot": "5s"}}}`, notesServer(""))
	if err := reconfigure(bad, false); !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "timeot") {
		t.Errorf("a bad block: %v; want invalid argument naming timeot", err)
	}
	big := fmt.Sprintf(`{"maxResultBytes": 2048, "mcpServers": {"more": %s}}`, notesServer(""))
	if err := reconfigure(big, true); !errors.Is(err, ext.ErrUnimplemented) || !strings.Contains(err.Error(), "maxResultBytes") {
		t.Errorf("a new maxResultBytes: %v; want unimplemented naming maxResultBytes", err)
	}
	if names := f.names("alice"); !slices.Contains(names, "more/echo") || hasPrefix(names, "x/") {
		t.Errorf("refused blocks changed the tools: %v", names)
	}
}
