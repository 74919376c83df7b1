//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package testbus starts a private D-Bus session bus and, optionally, an
// unlocked gnome-keyring-daemon on it, so that tests talk to a real Secret
// Service without touching the developer's own session or keyring.
//
// Everything lives in a fresh temporary directory: the bus socket, the
// keyring files (XDG_DATA_HOME), HOME and XDG_RUNTIME_DIR. The bus runs
// from a minimal configuration without service directories, so it never
// D-Bus-activates a process of its own: every process on it was started
// here, in the foreground, as a direct child that [Bus.Close] stops and
// waits for. Each child carries a marker in its environment, and Close
// scans the process table for the marker to prove nothing was left behind.
//
//	bus, err := testbus.Start(testbus.Options{Keyring: true})
//	if errors.Is(err, testbus.ErrMissing) { /* skip, or fail in CI */ }
//	os.Setenv("DBUS_SESSION_BUS_ADDRESS", bus.Address) // before the first keyring call
//	defer bus.Close()
package testbus

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dbus "github.com/godbus/dbus/v5"
)

// ErrMissing reports that dbus-daemon or gnome-keyring-daemon is not
// installed. Tests skip on it, except in CI where they fail.
var ErrMissing = errors.New("testbus: required program not installed")

// MarkerEnv is the environment variable that marks every process testbus
// starts; its value is unique per Bus.
const MarkerEnv = "AGENTHOST_TESTBUS_MARKER"

// startTimeout bounds how long Start waits for the bus and the keyring.
const startTimeout = 15 * time.Second

// stopTimeout bounds how long Close waits after SIGTERM before SIGKILL.
const stopTimeout = 5 * time.Second

// Options say what to start.
type Options struct {
	// Keyring starts gnome-keyring-daemon (the secrets component) on the bus.
	Keyring bool

	// Password unlocks (and so creates) the login keyring. When empty with
	// Keyring set, the daemon starts without --unlock, which leaves it with
	// no login collection: every go-keyring call then fails as on a locked
	// desktop keyring.
	Password string
}

// Bus is a running private session bus.
type Bus struct {
	// Address is the bus address, for DBUS_SESSION_BUS_ADDRESS.
	Address string

	dir     string
	marker  string
	procs   []*proc // in start order; stopped in reverse
	closeMu sync.Mutex
	closed  bool
}

// proc is one child process and the goroutine that waits for it.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Start starts a bus and, if asked, gnome-keyring-daemon, and waits until
// they are ready: the bus answers, and the Secret Service owns its name and
// (with a password) has a login collection. On failure everything started
// is stopped again.
func Start(opts Options) (_ *Bus, err error) {
	var missing []string
	for _, prog := range []string{"dbus-daemon", "gnome-keyring-daemon"} {
		if prog == "gnome-keyring-daemon" && !opts.Keyring {
			continue
		}
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, prog)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s (Debian: apt-get install dbus-daemon gnome-keyring dbus-user-session; never dbus-x11)",
			ErrMissing, strings.Join(missing, ", "))
	}
	dir, err := os.MkdirTemp("", "agenthost-testbus-")
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	b := &Bus{dir: dir, marker: hex.EncodeToString(id[:])}
	defer func() {
		if err != nil {
			_ = b.Close()
		}
	}()
	for _, sub := range []string{"data", "home", "run", "config"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}
	if err := b.startBus(); err != nil {
		return nil, err
	}
	if opts.Keyring {
		if err := b.startKeyring(opts.Password); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// busConfig is a session bus without service directories: nothing is ever
// D-Bus-activated, so every process on the bus is one that testbus started.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

func (b *Bus) startBus() error {
	conf := filepath.Join(b.dir, "session.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, filepath.Join(b.dir, "bus")), 0o600); err != nil {
		return err
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+conf, "--nofork", "--nopidfile", "--print-address=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p, err := b.start("dbus-daemon", cmd, nil)
	if err != nil {
		return err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case b.Address = <-line:
	case <-time.After(startTimeout):
		return fmt.Errorf("testbus: dbus-daemon printed no address within %v", startTimeout)
	}
	if b.Address == "" {
		<-p.done
		return fmt.Errorf("testbus: dbus-daemon exited (%v): %s", p.err, p.out.String())
	}
	return nil
}

func (b *Bus) startKeyring(password string) error {
	args := []string{"--foreground", "--components=secrets"}
	if password != "" {
		args = append(args, "--unlock")
	}
	cmd := exec.Command("gnome-keyring-daemon", args...)
	cmd.Stdin = strings.NewReader(password)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"LANG=C",
		"HOME=" + filepath.Join(b.dir, "home"),
		"XDG_DATA_HOME=" + filepath.Join(b.dir, "data"),
		"XDG_CONFIG_HOME=" + filepath.Join(b.dir, "config"),
		"XDG_RUNTIME_DIR=" + filepath.Join(b.dir, "run"),
		"DBUS_SESSION_BUS_ADDRESS=" + b.Address,
	}
	p, err := b.start("gnome-keyring-daemon", cmd, cmd.Env)
	if err != nil {
		return err
	}
	return b.waitSecretService(p, password != "")
}

// waitSecretService polls the bus, over a private connection, until
// org.freedesktop.secrets has an owner and, when wantLogin, a login
// collection exists.
func (b *Bus) waitSecretService(p *proc, wantLogin bool) error {
	conn, err := dbus.Dial(b.Address)
	if err != nil {
		return fmt.Errorf("testbus: connecting to the bus: %w", err)
	}
	defer conn.Close()
	if err := conn.Auth(nil); err != nil {
		return fmt.Errorf("testbus: authenticating to the bus: %w", err)
	}
	if err := conn.Hello(); err != nil {
		return fmt.Errorf("testbus: hello: %w", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("testbus: gnome-keyring-daemon exited (%v): %s", p.err, p.out.String())
		default:
		}
		var owned bool
		err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.secrets").Store(&owned)
		if err == nil && owned {
			if !wantLogin {
				return nil
			}
			v, err := conn.Object("org.freedesktop.secrets", "/org/freedesktop/secrets").
				GetProperty("org.freedesktop.Secret.Service.Collections")
			if err == nil {
				if paths, ok := v.Value().([]dbus.ObjectPath); ok {
					for _, path := range paths {
						if path == "/org/freedesktop/secrets/collection/login" {
							return nil
						}
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbus: the Secret Service was not ready within %v: %s", startTimeout, p.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start starts cmd in its own process group, marked, dying with the test
// process where the OS allows, and with a goroutine that waits for it.
func (b *Bus) start(name string, cmd *exec.Cmd, env []string) (*proc, error) {
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, MarkerEnv+"="+b.marker)
	out := &syncBuffer{}
	if cmd.Stdout == nil {
		cmd.Stdout = out
	}
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testbus: starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	b.procs = append(b.procs, p)
	return p, nil
}

// Close stops every process in reverse start order (SIGTERM to its process
// group, SIGKILL after 5 s), waits for each, removes the temporary
// directory, and then checks the process table for any process that still
// carries this Bus's marker. Close may be called more than once.
func (b *Bus) Close() error {
	b.closeMu.Lock()
	defer b.closeMu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	for i := len(b.procs) - 1; i >= 0; i-- {
		p := b.procs[i]
		pid := p.cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-p.done
			errs = append(errs, fmt.Errorf("testbus: %s ignored SIGTERM for %v and was killed", p.name, stopTimeout))
		}
		// Anything left in the group (a helper the daemon spawned) goes too.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if leftover := Marked(b.marker); len(leftover) > 0 {
		for _, pid := range leftover {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		errs = append(errs, fmt.Errorf("testbus: processes still running after Close: %v", leftover))
	}
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Marked returns the PIDs of running (non-zombie) processes whose
// environment carries MarkerEnv=marker. It reads /proc and returns nil where
// there is none.
func Marked(marker string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(MarkerEnv + "=" + marker + "\x00")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// The state follows the parenthesised command name; Z is a zombie.
			if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// Marker returns the value of MarkerEnv in this Bus's processes.
func (b *Bus) Marker() string { return b.marker }

// syncBuffer is a bytes.Buffer safe for the writer goroutines of exec.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
