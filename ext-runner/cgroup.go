package extrunner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/agenthost/agenthost/ext/cgroup"
)

// The sessions' cgroups (ext/cgroup): a tree under ext-runner's own
// cgroup, one child cgroup per agent session, so that everything the
// agent started, even what left its process group (setsid, a double
// fork), is found and killed. The host's users' servers are contained the
// same way (host/internal/services).

// openCgroupTree opens the runner's tree named name and kills and removes
// the session cgroups a crash of a previous ext-runner (of the same host:
// name says which) left there.
func openCgroupTree(name string) (*cgroup.Tree, error) {
	t, err := cgroup.Open(name)
	if err != nil {
		return nil, err
	}
	for _, left := range t.Children() {
		cgroup.Kill(left)
		_ = cgroup.Remove(left, time.Second)
	}
	return t, nil
}

// treeName names the runner's cgroup tree after its host (its public
// URL), so that two hosts in one cgroup never touch each other's agents.
func treeName(host string) string {
	h := sha256.Sum256([]byte(host))
	return "agenthost-runner-" + hex.EncodeToString(h[:6])
}

// sessionCgroup names the cgroup of one session of runner: the runner's
// name and a random suffix (two sessions of one runner may overlap).
func sessionCgroup(runner string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return runner + "-" + hex.EncodeToString(b)
}
