package e2e_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dbus "github.com/godbus/dbus/v5"
)

// startKeyring starts a private D-Bus session bus and an unlocked
// gnome-keyring-daemon (the Secret Service) on it, in a temporary folder
// (the developer's own session and keyring are never touched), and sets
// DBUS_SESSION_BUS_ADDRESS for the rest of the test, so the agenthost
// processes it starts use that keychain. The test owns both daemons: its
// cleanup stops them (SIGTERM) and waits for them. Skips loudly without
// them; fails under CI=true.
func startKeyring(t *testing.T) {
	t.Helper()
	for _, prog := range []string{"dbus-daemon", "gnome-keyring-daemon"} {
		_, err := exec.LookPath(prog)
		needPart(t, prog+" (Debian: dbus-daemon, gnome-keyring)", err)
	}
	dir := t.TempDir()
	for _, sub := range []string{"data", "home", "run", "config"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(dir, "session.conf")
	// A bus without service directories: it never D-Bus-activates a
	// process of its own.
	if err := os.WriteFile(conf, fmt.Appendf(nil, `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>unix:path=%s</listen><auth>EXTERNAL</auth>
<policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
</busconfig>
`, filepath.Join(dir, "bus")), 0o600); err != nil {
		t.Fatal(err)
	}
	owned := func(cmd *exec.Cmd, name string) {
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	bus := exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	out, err := bus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	owned(bus, "dbus-daemon")
	addr, err := bufio.NewReader(out).ReadString('\n')
	addr = strings.TrimSpace(addr)
	if addr == "" {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	kr := exec.Command("gnome-keyring-daemon", "--foreground", "--components=secrets", "--unlock")
	kr.Stdin = strings.NewReader("agenthost-e2e-password")
	kr.Env = []string{"PATH=" + os.Getenv("PATH"), "LANG=C", "HOME=" + filepath.Join(dir, "home"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "run"), "DBUS_SESSION_BUS_ADDRESS=" + addr}
	owned(kr, "gnome-keyring-daemon")

	// Ready when the Secret Service has its login collection.
	conn, err := dbus.Dial(addr)
	if err != nil {
		t.Fatalf("connecting to the test bus: %v", err)
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Hello(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		v, err := conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").GetProperty("org.freedesktop.Secret.Service.Collections")
		if paths, ok := v.Value().([]dbus.ObjectPath); err == nil && ok && strings.Contains(fmt.Sprint(paths), "/collection/login") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Secret Service was not ready: %v", err)
		}
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", addr)
}
