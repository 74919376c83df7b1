package settingstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/agenthost/agenthost/settings"
)

// Run runs the conformance suite against the stores open returns. open is
// called once per subtest and must return a new, empty store; Run closes
// it when the subtest ends (Close is idempotent, so open may also register
// its own cleanup). Subtests run in parallel.
func Run(t *testing.T, open func(t *testing.T) settings.Store) {
	t.Helper()
	for name, test := range map[string]func(t *testing.T, s settings.Store){
		"UnsetIsEmptyObject":    testUnset,
		"RoundTripEveryType":    testRoundTrip,
		"SetReplaces":           testSetReplaces,
		"Isolation":             testIsolation,
		"ConcurrentUpdate":      testConcurrentUpdate,
		"UpdateFuncError":       testUpdateFuncError,
		"DeleteUser":            testDeleteUser,
		"RefusesNonObject":      testRefusesNonObject,
		"RefusesEmptyKeys":      testRefusesEmptyKeys,
		"CancelledContext":      testCancelled,
		"CloseIsIdempotent":     testClose,
		"ValuesAreCopies":       testCopies,
		"UsersSortedDistinct":   testUsersSorted,
		"UpdateCreatesAndReads": testUpdateCreates,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			test(t, s)
		})
	}
}

// ctx is the context of every call that is not about contexts.
var ctx = context.Background()

// mustGet returns the section's values or fails the test.
func mustGet(t *testing.T, s settings.Store, ext, user, section string) json.RawMessage {
	t.Helper()
	v, err := s.Get(ctx, ext, user, section)
	if err != nil {
		t.Fatalf("Get(%q, %q, %q): %v", ext, user, section, err)
	}
	return v
}

func mustSet(t *testing.T, s settings.Store, ext, user, section, values string) {
	t.Helper()
	if err := s.Set(ctx, ext, user, section, json.RawMessage(values)); err != nil {
		t.Fatalf("Set(%q, %q, %q, %s): %v", ext, user, section, values, err)
	}
}

// wantJSON fails the test unless got and want hold equal JSON.
func wantJSON(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: got invalid JSON %q: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want %q: %v", what, want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func testUnset(t *testing.T, s settings.Store) {
	wantJSON(t, "Get of an unset section", mustGet(t, s, "ext", "alice", "prefs"), `{}`)
	secs, err := s.Sections(ctx, "ext", "alice")
	if err != nil || len(secs) != 0 {
		t.Errorf("Sections of a user without values = %v, %v; want an empty map", secs, err)
	}
	if secs == nil && err == nil {
		t.Errorf("Sections returned a nil map; want an empty one")
	}
	users, err := s.Users(ctx, "ext")
	if err != nil || len(users) != 0 {
		t.Errorf("Users of an empty store = %v, %v; want none", users, err)
	}
}

// everyTypeForm has one node of every type, one nested under a bind.
var everyTypeForm = settings.NewForm(
	settings.Toggle("enabled", "Enabled").WithDefault(true),
	settings.Text("name", "Name").WithMaxLength(20),
	settings.JSONEditor("servers", "Servers", json.RawMessage(`{"type":"object","additionalProperties":{"type":"string"}}`)),
	settings.Select("size", "Size", settings.Option{Value: "s"}, settings.Option{Value: "m"}),
	settings.Number("timeout", "Timeout").WithRange(1, 600).WithInteger(),
	settings.Secret("token", "Token"),
	settings.Group("advanced", "Advanced",
		settings.Number("ratio", "Ratio"),
		settings.LongText("notes", "Notes"),
	),
)

func testRoundTrip(t *testing.T, s settings.Store) {
	in := `{
		"enabled": false, "name": "Ünïcode <&>", "servers": "{\"a\": \"b\"}",
		"size": "m", "timeout": 30, "token": "canary-secret-1",
		"advanced": {"ratio": 0.25, "notes": "line 1\nline 2"}
	}`
	plain, secrets, err := settings.SplitSecrets(everyTypeForm, json.RawMessage(in))
	if err != nil {
		t.Fatalf("SplitSecrets: %v", err)
	}
	if got := secrets["token"]; got == nil || *got != "canary-secret-1" {
		t.Errorf("SplitSecrets token = %v, want canary-secret-1", got)
	}
	norm, err := settings.ValidateValues(everyTypeForm, plain)
	if err != nil {
		t.Fatalf("ValidateValues: %v", err)
	}
	if err := s.Set(ctx, "ext", "alice", "all", norm); err != nil {
		t.Fatalf("Set: %v", err)
	}
	want := `{"advanced":{"notes":"line 1\nline 2","ratio":0.25},"enabled":false,"name":"Ünïcode <&>",
		"servers":"{\"a\": \"b\"}","size":"m","timeout":30}`
	got := mustGet(t, s, "ext", "alice", "all")
	wantJSON(t, "Get after Set", got, want)
	if _, err := settings.ValidateValues(everyTypeForm, got); err != nil {
		t.Errorf("stored values no longer validate: %v", err)
	}
	secs, err := s.Sections(ctx, "ext", "alice")
	if err != nil {
		t.Fatalf("Sections: %v", err)
	}
	if len(secs) != 1 {
		t.Fatalf("Sections = %v, want one section", secs)
	}
	wantJSON(t, "Sections[all]", secs["all"], want)
}

func testSetReplaces(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext", "alice", "prefs", `{"a":1,"b":2}`)
	mustSet(t, s, "ext", "alice", "prefs", `{"c":3}`)
	wantJSON(t, "Get after two Sets", mustGet(t, s, "ext", "alice", "prefs"), `{"c":3}`)
	mustSet(t, s, "ext", "alice", "prefs", `{}`)
	wantJSON(t, "Get after Set {}", mustGet(t, s, "ext", "alice", "prefs"), `{}`)
}

func testIsolation(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext1", "alice", "prefs", `{"who":"alice"}`)
	for _, k := range [][3]string{
		{"ext1", "bob", "prefs"},   // another user
		{"ext2", "alice", "prefs"}, // another extension
		{"ext1", "alice", "other"}, // another section
		{"ext1", "alic", "eprefs"}, // keys that concatenate alike
		{"ext1a", "lice", "prefs"}, // ditto
		{"ext1", "alice\x00", "prefs"},
	} {
		wantJSON(t, fmt.Sprintf("Get%q", k), mustGet(t, s, k[0], k[1], k[2]), `{}`)
	}
	mustSet(t, s, "ext1", "bob", "prefs", `{"who":"bob"}`)
	mustSet(t, s, "ext2", "alice", "prefs", `{"who":"alice2"}`)
	wantJSON(t, "alice's ext1 prefs", mustGet(t, s, "ext1", "alice", "prefs"), `{"who":"alice"}`)
	wantJSON(t, "bob's ext1 prefs", mustGet(t, s, "ext1", "bob", "prefs"), `{"who":"bob"}`)
	wantJSON(t, "alice's ext2 prefs", mustGet(t, s, "ext2", "alice", "prefs"), `{"who":"alice2"}`)
	secs, err := s.Sections(ctx, "ext1", "alice")
	if err != nil || len(secs) != 1 || secs["prefs"] == nil {
		t.Errorf("Sections(ext1, alice) = %v, %v; want only prefs", secs, err)
	}
	users, err := s.Users(ctx, "ext2")
	if err != nil || !reflect.DeepEqual(users, []string{"alice"}) {
		t.Errorf("Users(ext2) = %v, %v; want [alice]", users, err)
	}
}

func testConcurrentUpdate(t *testing.T, s settings.Store) {
	const goroutines, increments = 20, 50
	mustSet(t, s, "ext", "bob", "counter", `{"n":42}`)
	type counter struct {
		N int `json:"n"`
	}
	inc := func(old json.RawMessage) (json.RawMessage, error) {
		var c counter
		if err := json.Unmarshal(old, &c); err != nil {
			return nil, err
		}
		c.N++
		return json.Marshal(c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for range increments {
				if err := s.Update(ctx, "ext", "alice", "counter", inc); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Update: %v", err)
	}
	wantJSON(t, "alice's counter", mustGet(t, s, "ext", "alice", "counter"), fmt.Sprintf(`{"n":%d}`, goroutines*increments))
	wantJSON(t, "bob's counter", mustGet(t, s, "ext", "bob", "counter"), `{"n":42}`)
}

func testUpdateFuncError(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext", "alice", "prefs", `{"a":1}`)
	boom := errors.New("boom")
	err := s.Update(ctx, "ext", "alice", "prefs", func(json.RawMessage) (json.RawMessage, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Errorf("Update with a failing fn = %v, want it to wrap %v", err, boom)
	}
	wantJSON(t, "Get after a failed Update", mustGet(t, s, "ext", "alice", "prefs"), `{"a":1}`)
}

func testDeleteUser(t *testing.T, s settings.Store) {
	for _, user := range []string{"alice", "bob"} {
		for _, ext := range []string{"ext1", "ext2"} {
			mustSet(t, s, ext, user, "prefs", fmt.Sprintf(`{"who":%q}`, user+ext))
			mustSet(t, s, ext, user, "more", `{"x":true}`)
		}
	}
	if err := s.DeleteUser(ctx, "alice"); err != nil {
		t.Fatalf("DeleteUser: %v", err)
	}
	for _, ext := range []string{"ext1", "ext2"} {
		secs, err := s.Sections(ctx, ext, "alice")
		if err != nil || len(secs) != 0 {
			t.Errorf("Sections(%s, alice) after DeleteUser = %v, %v; want none", ext, secs, err)
		}
		wantJSON(t, "alice's prefs after DeleteUser", mustGet(t, s, ext, "alice", "prefs"), `{}`)
		wantJSON(t, "bob's prefs after DeleteUser(alice)", mustGet(t, s, ext, "bob", "prefs"), fmt.Sprintf(`{"who":%q}`, "bob"+ext))
		users, err := s.Users(ctx, ext)
		if err != nil || !reflect.DeepEqual(users, []string{"bob"}) {
			t.Errorf("Users(%s) after DeleteUser(alice) = %v, %v; want [bob]", ext, users, err)
		}
	}
	if err := s.DeleteUser(ctx, "nobody"); err != nil {
		t.Errorf("DeleteUser of a user without values: %v", err)
	}
}

func testRefusesNonObject(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext", "alice", "prefs", `{"keep":true}`)
	for _, bad := range []string{``, ` `, `null`, `[]`, `[{}]`, `1`, `"x"`, `true`, `{`, `{"a":}`, `{} {}`, `{}x`} {
		if err := s.Set(ctx, "ext", "alice", "prefs", json.RawMessage(bad)); !errors.Is(err, settings.ErrInvalid) {
			t.Errorf("Set(%q) = %v, want ErrInvalid", bad, err)
		}
		err := s.Update(ctx, "ext", "alice", "prefs", func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(bad), nil })
		if !errors.Is(err, settings.ErrInvalid) {
			t.Errorf("Update to %q = %v, want ErrInvalid", bad, err)
		}
		wantJSON(t, fmt.Sprintf("Get after refusing %q", bad), mustGet(t, s, "ext", "alice", "prefs"), `{"keep":true}`)
	}
	if err := s.Set(ctx, "ext", "bob", "prefs", json.RawMessage(`[]`)); !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("Set([]) of an unset section = %v, want ErrInvalid", err)
	}
	if users, _ := s.Users(ctx, "ext"); !reflect.DeepEqual(users, []string{"alice"}) {
		t.Errorf("Users after refused writes = %v, want [alice]", users)
	}
}

func testRefusesEmptyKeys(t *testing.T, s settings.Store) {
	for _, k := range [][3]string{{"", "u", "s"}, {"e", "", "s"}, {"e", "u", ""}} {
		if _, err := s.Get(ctx, k[0], k[1], k[2]); !errors.Is(err, settings.ErrInvalid) {
			t.Errorf("Get%q = %v, want ErrInvalid", k, err)
		}
		if err := s.Set(ctx, k[0], k[1], k[2], json.RawMessage(`{}`)); !errors.Is(err, settings.ErrInvalid) {
			t.Errorf("Set%q = %v, want ErrInvalid", k, err)
		}
		err := s.Update(ctx, k[0], k[1], k[2], func(o json.RawMessage) (json.RawMessage, error) { return o, nil })
		if !errors.Is(err, settings.ErrInvalid) {
			t.Errorf("Update%q = %v, want ErrInvalid", k, err)
		}
	}
	if _, err := s.Sections(ctx, "", "u"); !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("Sections with an empty extension = %v, want ErrInvalid", err)
	}
	if err := s.DeleteUser(ctx, ""); !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("DeleteUser(\"\") = %v, want ErrInvalid", err)
	}
	if _, err := s.Users(ctx, ""); !errors.Is(err, settings.ErrInvalid) {
		t.Errorf("Users(\"\") = %v, want ErrInvalid", err)
	}
}

func testCancelled(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext", "alice", "prefs", `{"keep":true}`)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Set(cctx, "ext", "alice", "prefs", json.RawMessage(`{"lost":true}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("Set with a cancelled context = %v, want context.Canceled", err)
	}
	err := s.Update(cctx, "ext", "alice", "prefs", func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"lost":true}`), nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := s.Get(cctx, "ext", "alice", "prefs"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context = %v, want context.Canceled", err)
	}
	wantJSON(t, "Get after cancelled writes", mustGet(t, s, "ext", "alice", "prefs"), `{"keep":true}`)
}

func testClose(t *testing.T, s settings.Store) {
	mustSet(t, s, "ext", "alice", "prefs", `{}`)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, "ext", "alice", "prefs"); !errors.Is(err, settings.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if err := s.Set(ctx, "ext", "alice", "prefs", json.RawMessage(`{}`)); !errors.Is(err, settings.ErrClosed) {
		t.Errorf("Set after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Users(ctx, "ext"); !errors.Is(err, settings.ErrClosed) {
		t.Errorf("Users after Close = %v, want ErrClosed", err)
	}
}

func testCopies(t *testing.T, s settings.Store) {
	in := json.RawMessage(`{"a":"b"}`)
	if err := s.Set(ctx, "ext", "alice", "prefs", in); err != nil {
		t.Fatal(err)
	}
	copy(in, `{"a":"X"}`) // the caller reuses its buffer
	got := mustGet(t, s, "ext", "alice", "prefs")
	wantJSON(t, "Get after the caller changed its buffer", got, `{"a":"b"}`)
	for i := range got {
		got[i] = ' ' // the caller scribbles on what it got
	}
	wantJSON(t, "Get after the caller changed a result", mustGet(t, s, "ext", "alice", "prefs"), `{"a":"b"}`)
}

func testUsersSorted(t *testing.T, s settings.Store) {
	for _, u := range []string{"carol", "alice", "bob"} {
		mustSet(t, s, "ext", u, "a", `{}`)
		mustSet(t, s, "ext", u, "b", `{}`)
	}
	users, err := s.Users(ctx, "ext")
	if err != nil || !reflect.DeepEqual(users, []string{"alice", "bob", "carol"}) {
		t.Errorf("Users = %v, %v; want [alice bob carol]", users, err)
	}
}

func testUpdateCreates(t *testing.T, s settings.Store) {
	var saw json.RawMessage
	err := s.Update(ctx, "ext", "alice", "prefs", func(old json.RawMessage) (json.RawMessage, error) {
		saw = append(json.RawMessage(nil), old...)
		return json.RawMessage(`{"made":true}`), nil
	})
	if err != nil {
		t.Fatalf("Update of an unset section: %v", err)
	}
	wantJSON(t, "fn's old values for an unset section", saw, `{}`)
	wantJSON(t, "Get after Update", mustGet(t, s, "ext", "alice", "prefs"), `{"made":true}`)
}
