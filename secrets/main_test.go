package secrets_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/agenthost/secrets"
	"github.com/agenthost/agenthost/secrets/internal/testbus"
	"go.uber.org/goleak"
)

// helperEnv selects a helper mode: the test binary re-executed as a
// subprocess that does one thing and exits (STYLE.md rule 9).
const helperEnv = "AGENTHOST_SECRETS_TEST_HELPER"

// The real Secret Service, started once for the whole test binary.
var (
	realBus     *testbus.Bus
	realBusSkip string // why there is no real bus (a program is missing)
	realBusErr  error  // the bus should have started and did not
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Never touch the developer's own session bus or keyring: every
	// keychain call of this process goes to the private bus, or nowhere.
	// DBUS_SESSION_BUS_ADDRESS is set before the first keyring call, because
	// godbus caches the session bus connection for the process.
	_ = os.Unsetenv("DBUS_SESSION_BUS_ADDRESS")
	if slices.ContainsFunc(os.Args, func(a string) bool { return strings.HasPrefix(a, "-test.fuzzworker") }) {
		// A fuzzing worker runs only the fuzz target, which needs no bus.
		return m.Run()
	}
	bus, err := testbus.Start(testbus.Options{Keyring: true, Password: "agenthost-test-password"})
	switch {
	case errors.Is(err, testbus.ErrMissing):
		realBusSkip = err.Error()
		fmt.Fprintf(os.Stderr, "\n*** secrets: real Secret Service tests CANNOT RUN: %s ***\n\n", realBusSkip)
	case err != nil:
		realBusErr = err
	default:
		realBus = bus
		_ = os.Setenv("DBUS_SESSION_BUS_ADDRESS", bus.Address)
	}
	code := m.Run()
	if realBus != nil {
		if err := realBus.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "secrets: stopping the test bus: %v\n", err)
			code = 1
		}
		if left := testbus.Marked(realBus.Marker()); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "secrets: orphan processes after the test run: %v\n", left)
			code = 1
		}
	}
	if code == 0 {
		// godbus keeps one shared session bus connection per process, with
		// a reader goroutine (blocked in a read under (*Conn).inWorker) and
		// a goroutine that closes it when its context ends (newConn.func1);
		// go-keyring cannot close it. Stopping the bus above ends them; these
		// two, and nothing else, are excused if they are still on their way out.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/godbus/dbus/v5.(*Conn).inWorker"),
			goleak.IgnoreTopFunction("github.com/godbus/dbus/v5.newConn.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "secrets: goroutine leak: %v\n", err)
			code = 1
		}
	}
	return code
}

// requireRealKeychain skips (on a laptop) or fails (in CI) when there is no
// real Secret Service, and fails when it should have started and did not.
func requireRealKeychain(tb testing.TB) {
	tb.Helper()
	switch {
	case realBusErr != nil:
		tb.Fatalf("starting the private bus and gnome-keyring: %v", realBusErr)
	case realBus == nil && os.Getenv("CI") == "true":
		tb.Fatalf("CI=true and the real Secret Service tests cannot run: %s", realBusSkip)
	case realBus == nil:
		tb.Skipf("SKIPPED: no real Secret Service for this test (%s); CI installs it and fails instead", realBusSkip)
	}
}

// uniqueService returns a keychain service name used by one test only.
func uniqueService() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "agenthost-test-" + hex.EncodeToString(b[:])
}

// helperResult is what a helper subprocess reports on stdout.
type helperResult struct {
	Err         string `json:"err"`
	Unavailable bool   `json:"unavailable"`
	NotFound    bool   `json:"notFound"`
	Invalid     bool   `json:"invalid"`
}

func resultOf(err error) helperResult {
	r := helperResult{
		Unavailable: errors.Is(err, secrets.ErrUnavailable),
		NotFound:    errors.Is(err, secrets.ErrNotFound),
		Invalid:     errors.Is(err, secrets.ErrInvalid),
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// runHelper runs one helper mode and returns the exit code.
func runHelper(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch mode {
	case "keychain-probe":
		// Probe, then Set and Get, against whatever bus the environment
		// names; report each error.
		kc, err := secrets.NewKeychain(&secrets.KeychainOptions{Service: "agenthost-test-helper", Timeout: 5 * time.Second})
		if err != nil {
			fmt.Println(err)
			return 2
		}
		k := secrets.Key{Extension: "x", User: "alice", Name: "token"}
		out := map[string]helperResult{}
		out["probe"] = resultOf(kc.Probe(ctx))
		out["set"] = resultOf(kc.Set(ctx, k, secrets.NewValue(os.Getenv("HELPER_CANARY"))))
		_, err = kc.Get(ctx, k)
		out["get"] = resultOf(err)
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return 0
	case "file-writer":
		// Set names w000..wNNN in the store at HELPER_PATH, as a second
		// process competing with the test.
		f, err := secrets.OpenFile(os.Getenv("HELPER_PATH"), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer f.Close()
		n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
		for i := range n {
			k := secrets.Key{Extension: "x", User: "alice", Name: fmt.Sprintf("w%03d", i)}
			if err := f.Set(ctx, k, secrets.NewValue("from the helper")); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}
