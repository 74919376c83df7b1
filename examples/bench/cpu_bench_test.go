package bench_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuSnapshot is the CPU time (ns on a CPU, from each thread's
// /proc/PID/task/TID/schedstat) of every process descended from this one,
// summed by executable name, and this one's (the clients) as "client"
// (Linux; elsewhere empty). Go's threads live as long as their process,
// so the sum over the threads present is the process's CPU time.
type cpuSnapshot map[string]int64

func takeCPU() cpuSnapshot {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	self := os.Getpid()
	descends := func(pid int) bool {
		for range 16 {
			pid = parent[pid]
			if pid == self {
				return true
			}
			if pid <= 1 {
				return false
			}
		}
		return false
	}
	out := cpuSnapshot{}
	for pid := range parent {
		if !descends(pid) {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(pid))
		if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
			out[filepath.Base(exe)] += threadsCPU(dir)
		}
	}
	out["client"] = threadsCPU(filepath.Join("/proc", strconv.Itoa(self)))
	return out
}

// threadsCPU sums the CPU time of the threads of the process at dir.
func threadsCPU(dir string) int64 {
	var sum int64
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, t := range tasks {
		ss, err := os.ReadFile(filepath.Join(dir, "task", t.Name(), "schedstat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(ss)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			sum += ns
		}
	}
	return sum
}

// add adds the CPU time spent between before and after to s.
func (s cpuSnapshot) add(before, after cpuSnapshot) {
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			s[k] += d
		}
	}
}
