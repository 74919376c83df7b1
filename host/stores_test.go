package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agenthost/agenthost/ext"
	"github.com/agenthost/agenthost/host"
	"github.com/agenthost/agenthost/settings"
)

// TestSecretsAndSettings covers the per-user stores through the host's
// APIs: secret form fields go to the secrets store and are never read
// back, each user sees only their own values, bad values are refused with
// the field named and nothing stored, and everything survives a restart
// (SQLite and the encrypted file).
func TestSecretsAndSettings(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir, nil)
	cfg.Secrets.Backend = "file"
	ctx := context.Background()
	h, err := host.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":"hi","token":"alice-canary-1"}`)); err != nil {
		t.Fatal(err)
	}
	got, err := h.GetSettings(ctx, "alice", "t", "prefs")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got.Values), "canary") || !got.Secrets["token"] {
		t.Errorf("alice's settings = %s %v; the secret must be stored apart and shown only as set", got.Values, got.Secrets)
	}
	res, err := h.Call(ctx, "alice", "", "t/token", nil)
	if err != nil || res.Text() != "alice-canary-1" {
		t.Fatalf("alice's token through the extension = %v, %v", res, err)
	}
	if _, err := h.Call(ctx, "bob", "", "t/token", nil); !errors.Is(err, ext.ErrNotFound) || strings.Contains(err.Error(), "canary") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("bob reading a token: %q; want not found on one line, and no leak", err)
	}
	bob, _ := h.GetSettings(ctx, "bob", "t", "prefs")
	if string(bob.Values) != "{}" || bob.Secrets["token"] {
		t.Errorf("bob's settings = %s %v", bob.Values, bob.Secrets)
	}
	// A bad value names the field and stores nothing.
	err = h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":42,"token":"x"}`))
	var fe settings.FieldErrors
	if !errors.As(err, &fe) || !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "greeting") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("bad value: %q; want field errors naming greeting, on one line", err)
	}
	err = h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"colour":"red"}`))
	if !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown field: %v", err)
	}
	if got, _ := h.GetSettings(ctx, "alice", "t", "prefs"); string(got.Values) != `{"greeting":"hi"}` {
		t.Errorf("after refused writes: %s", got.Values)
	}
	if res, _ := h.Call(ctx, "alice", "", "t/token", nil); res.Text() != "alice-canary-1" {
		t.Error("a refused write changed the secret")
	}
	// Operator secrets live apart from every user's.
	if err := h.SetSecret(ctx, host.OperatorUser, "t", "token", "operator-canary"); err != nil {
		t.Fatal(err)
	}
	if res, _ := h.Call(ctx, "alice", "", "t/token", nil); res.Text() != "alice-canary-1" {
		t.Error("the operator's secret replaced alice's")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen: everything is still there.
	h2, err := host.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if got, _ := h2.GetSettings(ctx, "alice", "t", "prefs"); string(got.Values) != `{"greeting":"hi"}` || !got.Secrets["token"] {
		t.Errorf("after reopening: %s %v", got.Values, got.Secrets)
	}
	if res, err := h2.Call(ctx, "alice", "", "t/token", nil); err != nil || res.Text() != "alice-canary-1" {
		t.Errorf("token after reopening: %v, %v", res, err)
	}
	// Clearing a secret field with null.
	if err := h2.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":"hi","token":null}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Call(ctx, "alice", "", "t/token", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("after clearing: %v", err)
	}
}

// TestPatchSettings: a JSON Merge Patch changes only the keys it names
// (null resets one, a secret field in it sets or clears the secret),
// refuses what is no object or no valid value and stores nothing then,
// and patches written at once never lose each other's keys.
func TestPatchSettings(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t.TempDir(), nil)
	cfg.Secrets.Backend = "file"
	h, err := host.New(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	values := func() string {
		t.Helper()
		v, err := h.GetSettings(ctx, "alice", "t", "prefs")
		if err != nil {
			t.Fatal(err)
		}
		return string(v.Values)
	}
	patch := func(p string) error { return h.PatchSettings(ctx, "alice", "t", "prefs", json.RawMessage(p)) }
	if err := patch(`{"greeting":"hi"}`); err != nil { // nothing stored yet
		t.Fatal(err)
	}
	if err := patch(`{"farewell":"bye","token":"alice-canary-2"}`); err != nil {
		t.Fatal(err)
	}
	if got := values(); got != `{"farewell":"bye","greeting":"hi"}` {
		t.Errorf("after two patches: %s; want both keys", got)
	}
	if res, err := h.Call(ctx, "alice", "", "t/token", nil); err != nil || res.Text() != "alice-canary-2" {
		t.Errorf("the secret set by a patch: %v, %v", res, err)
	}
	if err := patch(`{"greeting":null}`); err != nil {
		t.Fatal(err)
	}
	if got := values(); got != `{"farewell":"bye"}` {
		t.Errorf("after resetting greeting: %s", got)
	}
	if res, _ := h.Call(ctx, "alice", "", "t/token", nil); res == nil || res.Text() != "alice-canary-2" {
		t.Error("a patch without the secret field changed the secret")
	}
	for _, bad := range []string{`[]`, `"x"`, `null`, `{"greeting":42}`, `{"colour":"red"}`} {
		if err := patch(bad); !errors.Is(err, ext.ErrInvalidArgument) {
			t.Errorf("patch %s: %v; want invalid argument", bad, err)
		}
	}
	if got := values(); got != `{"farewell":"bye"}` {
		t.Errorf("refused patches changed the values: %s", got)
	}
	if err := patch(`{"token":null}`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "alice", "", "t/token", nil); !errors.Is(err, ext.ErrNotFound) {
		t.Errorf("a patch clearing the secret: %v", err)
	}
	// Patches at once: each names its own key; none is lost.
	if err := h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 40)
	for i := range 40 {
		key := "greeting"
		if i%2 == 1 {
			key = "farewell"
		}
		go func() { errs <- patch(`{"` + key + `":"v` + strconv.Itoa(i) + `"}`) }()
	}
	for range 40 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(values()), &got); err != nil || got["greeting"] == "" || got["farewell"] == "" {
		t.Errorf("after concurrent patches: %v %v; want both keys", got, err)
	}
}

// validatingExt is the test extension with the "validate" capability: it
// refuses the greeting "forbidden" from users other than alice, and counts
// the activations it saw.
type validatingExt struct {
	*testExt
	activations atomic.Int32
}

var _ ext.SettingsValidator = (*validatingExt)(nil)

func (v *validatingExt) Describe(ctx context.Context) (*ext.Descriptor, error) {
	d, err := v.testExt.Describe(ctx)
	if err == nil {
		d.Capabilities = append(d.Capabilities, ext.CapabilityValidate)
	}
	return d, err
}

func (v *validatingExt) Activate(ctx context.Context, user string) error {
	v.activations.Add(1)
	return v.testExt.Activate(ctx, user)
}

func (v *validatingExt) ValidateSettings(_ context.Context, req *ext.ValidateSettingsRequest) error {
	var vals struct{ Greeting string }
	if err := json.Unmarshal(req.Values, &vals); err != nil {
		return ext.Mark(err, ext.ErrInvalidArgument)
	}
	if req.Section == "prefs" && req.User != "alice" && vals.Greeting == "forbidden" {
		return ext.Errorf(ext.ErrInvalidArgument, "the greeting %q is alice's alone", vals.Greeting)
	}
	return nil
}

// TestSettingsValidatedByExtension (issue 17, item 2b): an extension with
// the "validate" capability refuses a user's values before anything is
// stored, by SetSettings and by PatchSettings, whether the user is active
// or not, and without activating them; the extension's own writes are not
// asked; values it accepts are stored.
func TestSettingsValidatedByExtension(t *testing.T) {
	ctx := context.Background()
	v := &validatingExt{testExt: &testExt{}}
	h, err := host.New(ctx, &host.Config{DataDir: t.TempDir(), Secrets: host.SecretsConfig{Backend: "memory"}},
		&host.Options{Extensions: map[string]host.InProcess{"t": {Extension: v}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	values := func(user string) string {
		t.Helper()
		got, err := h.GetSettings(ctx, user, "t", "prefs")
		if err != nil {
			t.Fatal(err)
		}
		return string(got.Values)
	}
	// bob is not active: refused, nothing stored, not activated.
	if err := h.SetSettings(ctx, "bob", "t", "prefs", json.RawMessage(`{"greeting":"forbidden"}`)); !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "alice's alone") {
		t.Errorf("bob's SetSettings: %v; want the extension's refusal", err)
	}
	if err := h.PatchSettings(ctx, "bob", "t", "prefs", json.RawMessage(`{"greeting":"forbidden"}`)); !errors.Is(err, ext.ErrInvalidArgument) || !strings.Contains(err.Error(), "alice's alone") {
		t.Errorf("bob's PatchSettings: %v; want the extension's refusal", err)
	}
	if got := values("bob"); got != "" && got != "null" && got != "{}" {
		t.Errorf("bob's refused values were stored: %s", got)
	}
	if n := v.activations.Load(); n != 0 {
		t.Errorf("checking bob's values activated someone (%d activations)", n)
	}
	// Once active, the same.
	if _, err := h.Tools(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := h.PatchSettings(ctx, "bob", "t", "prefs", json.RawMessage(`{"greeting":"forbidden"}`)); !errors.Is(err, ext.ErrInvalidArgument) {
		t.Errorf("active bob's PatchSettings: %v; want the extension's refusal", err)
	}
	// Accepted values are stored; alice may use the greeting.
	if err := h.PatchSettings(ctx, "bob", "t", "prefs", json.RawMessage(`{"greeting":"hello"}`)); err != nil {
		t.Fatal(err)
	}
	if got := values("bob"); got != `{"greeting":"hello"}` {
		t.Errorf("bob's values: %s", got)
	}
	if err := h.SetSettings(ctx, "alice", "t", "prefs", json.RawMessage(`{"greeting":"forbidden"}`)); err != nil {
		t.Fatal(err)
	}
	// The extension's own write is its business: not asked.
	if err := v.testExt.host.UserStore("bob").Settings().Set(ctx, "prefs", json.RawMessage(`{"greeting":"forbidden"}`)); err != nil {
		t.Errorf("the extension's own write: %v", err)
	}
}
