package services

import (
	"context"
	"encoding/json"
	"github.com/agenthost/agenthost/ext/cgroup"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/agenthost/ext"
)

// TestOwnsPeerThatHandedOff: a service process that connects to a socket
// for a child and exits at once is gone when the peer is checked; its pid
// counts as the manager's, so the control socket refuses the connection
// its child goes on using (it was accepted, since a pid that is gone
// belonged to nobody).
func TestOwnsPeerThatHandedOff(t *testing.T) {
	m := newManager(t, Options{})
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h, err := m.Connect(context.Background(), Key{"x", "handoff", "alice"}, t.TempDir(), func(context.Context) (*ext.ProcessSpec, error) {
		return &ext.ProcessSpec{Command: "/bin/sh", Args: []string{"-c", `SERVICES_TEST_MODE=handoff "$0"; exec cat`, os.Args[0]},
			Env: []string{"SOCK=" + sock}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(int(cred.Pid)) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if alive(int(cred.Pid)) {
		t.Fatalf("the connecting process %d did not exit", cred.Pid)
	}
	if !m.Owns(int(cred.Pid)) {
		t.Errorf("the connection of service process %d, gone after handing it to its child, is not refused", cred.Pid)
	}
}

// TestReapKillsOnlyItsCgroups: a record (forged, or of another tree) that
// names a cgroup outside the manager's tree kills nothing there.
func TestReapKillsOnlyItsCgroups(t *testing.T) {
	probe := New(Options{CgroupName: cgroupName(t)})
	needCgroup(t, probe)
	_ = probe.Close()
	other, err := cgroup.Open(cgroupName(t) + "-other")
	if err != nil {
		t.Fatal(err)
	}
	dir, f, err := other.Create("victim")
	if err != nil {
		t.Fatal(err)
	}
	victim := exec.Command("sleep", "1000")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: int(f.Fd())}
	err = victim.Start()
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = victim.Process.Kill()
		_ = victim.Wait()
		_ = cgroup.Remove(dir, time.Second)
		other.Tidy()
	})
	run := t.TempDir()
	gone := exec.Command("true")
	_ = gone.Run()
	r := record{PGID: gone.Process.Pid, Start: 1, Boot: bootID(), Cgroup: dir, Host: gone.Process.Pid, HostStart: 1, Service: "forged"}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(filepath.Join(run, "1.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{RunDir: run, CgroupName: cgroupName(t)})
	_ = m.Close()
	// New's reap waits for a cgroup it killed to empty: a kill has landed.
	if !alive(victim.Process.Pid) {
		t.Error("a record naming a cgroup outside the manager's tree killed what was in it")
	}
}
