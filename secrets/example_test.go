package secrets_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/agenthost/agenthost/secrets"
)

// A Value never prints its secret: not with fmt, JSON or slog. Reveal is
// the only way out.
func ExampleValue() {
	token := secrets.NewValue("ghp_example-token")

	fmt.Printf("%v %+v %#v %s %q\n", token, token, token, token, token)
	b, _ := json.Marshal(struct{ Token secrets.Value }{token})
	fmt.Println(string(b))
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the output stable
			}
			return a
		},
	}))
	logger.Info("calling the server", "token", token)
	fmt.Println(token.Len(), "bytes:", token.Reveal())
	// Output:
	// [redacted] [redacted] [redacted] [redacted] [redacted]
	// {"Token":"[redacted]"}
	// level=INFO msg="calling the server" token=[redacted]
	// 17 bytes: ghp_example-token
}

func ExampleNewMemory() {
	ctx := context.Background()
	store := secrets.NewMemory()
	defer store.Close()

	alice := secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}
	_ = store.Set(ctx, alice, secrets.NewValue("alice's token"))
	_ = store.Set(ctx, secrets.Key{Extension: "mcp", User: secrets.Operator, Name: "token:team"}, secrets.NewValue("shared"))

	v, _ := store.Get(ctx, alice)
	fmt.Println(v.Reveal())
	names, _ := store.List(ctx, "mcp", "alice")
	fmt.Println(names)
	_, err := store.Get(ctx, secrets.Key{Extension: "mcp", User: "bob", Name: "token:github"})
	fmt.Println(errors.Is(err, secrets.ErrNotFound), err)
	// Output:
	// alice's token
	// [token:github]
	// true getting secret "token:github" of user "bob" in extension "mcp": secrets: not found
}

func ExampleOpenFile() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// The key file (secrets.enc.key) is created next to the store, mode 0600.
	store, err := secrets.OpenFile(filepath.Join(dir, "secrets.enc"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	k := secrets.Key{Extension: "mcp", User: "alice", Name: "token:github"}
	_ = store.Set(ctx, k, secrets.NewValue("alice's token"))
	_ = store.Close()

	store, _ = secrets.OpenFile(filepath.Join(dir, "secrets.enc"), nil)
	defer store.Close()
	v, _ := store.Get(ctx, k)
	fmt.Println(v.Reveal())
	// Output:
	// alice's token
}

// The host's choice of backend: the OS keychain when it answers, else the
// encrypted file. (No Output: the result depends on the machine.)
func ExampleKeychain_Probe() {
	ctx := context.Background()
	dataDir := filepath.Join(os.TempDir(), "agenthost-example")

	var store secrets.Store
	kc, err := secrets.NewKeychain(nil)
	if err == nil {
		err = kc.Probe(ctx)
	}
	if err == nil {
		store = kc
	} else {
		slog.Info("OS keychain unavailable; using the encrypted file store", "reason", err)
		store, err = secrets.OpenFile(filepath.Join(dataDir, "secrets.enc"), nil)
		if err != nil {
			slog.Error("no secrets store", "err", err)
			return
		}
	}
	defer store.Close()
}
