package services

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/agenthost/agenthost/ext/cgroup"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// record is the pidfile of one process group: what a later host needs to
// find what this one left running if it was killed, and to be sure it
// kills nothing else.
type record struct {
	PGID int `json:"pgid"`
	// Start is the group leader's start time (clock ticks after boot): a
	// process with the same pid but another start time is not ours.
	Start  uint64 `json:"start"`
	Boot   string `json:"boot"`
	Cgroup string `json:"cgroup,omitempty"`
	// Host and HostStart name the host that started it: records of a host
	// that still runs are left alone.
	Host      int    `json:"host"`
	HostStart uint64 `json:"hostStart"`
	Service   string `json:"service"`
}

// self is this host process, as records name it.
type self struct {
	pid   int
	start uint64
	boot  string
}

func currentProcess() self {
	s := self{pid: os.Getpid(), boot: bootID()}
	_, _, s.start, _ = procStat(s.pid)
	return s
}

// running reports whether pid runs and started at start.
func running(pid int, start uint64) bool {
	_, _, st, err := procStat(pid)
	return err == nil && st == start
}

func (m *Manager) writeRecord(p *proc) {
	if m.opts.RunDir == "" {
		return
	}
	_, _, start, err := procStat(p.pgid)
	if err != nil {
		return // already gone: nothing to reap later
	}
	r := record{PGID: p.pgid, Start: start, Boot: m.self.boot, Cgroup: p.cgroup,
		Host: m.self.pid, HostStart: m.self.start, Service: p.key.String()}
	b, _ := json.Marshal(r)
	p.record = filepath.Join(m.opts.RunDir, strconv.Itoa(p.pgid)+".json")
	if err := os.WriteFile(p.record, b, 0o600); err != nil {
		m.logger.Warn("cannot record a service process; a killed host would leave it to the next start's cgroup sweep only",
			"service", p.key.String(), "error", err)
		p.record = ""
	}
}

// reap kills what a previous host on this data folder left running: the
// process groups and cgroups its records name, when that host is gone and
// the group is still the one recorded (same leader start time, or no
// leader left, which the kernel allows only while the group is ours), and
// the cgroups of dead hosts in the tree. It returns how many groups and
// cgroups it killed.
func (m *Manager) reap() int {
	killed := 0
	if m.opts.RunDir != "" {
		ents, _ := os.ReadDir(m.opts.RunDir)
		for _, d := range ents {
			if !strings.HasSuffix(d.Name(), ".json") {
				continue
			}
			path := filepath.Join(m.opts.RunDir, d.Name())
			b, err := os.ReadFile(path)
			var r record
			if err != nil || json.Unmarshal(b, &r) != nil || r.PGID <= 1 {
				_ = os.Remove(path)
				continue
			}
			if r.Boot != m.self.boot {
				_ = os.Remove(path) // another boot: all gone
				continue
			}
			if (r.Host != m.self.pid || r.HostStart != m.self.start) && running(r.Host, r.HostStart) {
				continue // its host still runs
			}
			if m.reapGroup(r) {
				killed++
			}
			_ = os.Remove(path)
		}
	}
	if m.cg != nil {
		killed += m.reapCgroups()
	}
	return killed
}

// reapGroup kills the recorded group when it is still ours, and its
// cgroup when that is one of the tree's (a record that names any other
// cgroup, forged or not, kills nothing there).
func (m *Manager) reapGroup(r record) bool {
	did := false
	if r.Cgroup != "" && m.cg != nil && holds(m.cg, r.Cgroup) {
		if _, err := os.Stat(r.Cgroup); err == nil {
			cgroup.Signal(r.Cgroup, syscall.SIGKILL)
			_ = cgroup.Remove(r.Cgroup, time.Second)
			did = true
		}
	}
	if _, _, start, err := procStat(r.PGID); err == nil {
		if start != r.Start {
			return did // the pid is someone else's now
		}
	} else if len(groupMembers(r.PGID)) == 0 {
		return did
	}
	// Either the leader is ours, or it is gone and its group lives on: a
	// group ID stays reserved while any member lives, so the members are
	// the recorded group's.
	killGroup(r.PGID, syscall.SIGKILL)
	m.logger.Warn("killed service processes a previous host left running", "service", r.Service, "pgid", r.PGID)
	return true
}

// reapCgroups kills and removes the cgroups of hosts that are gone.
func (m *Manager) reapCgroups() int {
	ents, _ := os.ReadDir(m.cg.Dir)
	n := 0
	for _, d := range ents {
		if !d.IsDir() {
			continue
		}
		host, start, ok := parseCgroupName(d.Name())
		if !ok || ((host != m.self.pid || start != m.self.start) && running(host, start)) {
			continue
		}
		if host == m.self.pid && start == m.self.start {
			continue // ours
		}
		dir := filepath.Join(m.cg.Dir, d.Name())
		if cgroup.Populated(dir) {
			cgroup.Signal(dir, syscall.SIGKILL)
			m.logger.Warn("killed service processes a previous host left running", "cgroup", dir)
			n++
		}
		_ = cgroup.Remove(dir, time.Second)
	}
	return n
}

// cgroupName names the cgroup of one process: the host (pid and start
// time) and a sequence number.
func (m *Manager) cgroupName(seq uint64) string {
	return fmt.Sprintf("h%d-%d-%d", m.self.pid, m.self.start, seq)
}

func parseCgroupName(s string) (host int, start uint64, ok bool) {
	parts := strings.Split(strings.TrimPrefix(s, "h"), "-")
	if len(parts) != 3 || !strings.HasPrefix(s, "h") {
		return 0, 0, false
	}
	h, err1 := strconv.Atoi(parts[0])
	st, err2 := strconv.ParseUint(parts[1], 10, 64)
	return h, st, errors.Join(err1, err2) == nil
}
