package supervisor

import (
	"fmt"
	"os"
	"syscall"
)

// childAttrs makes the extension die with the host. Pdeathsig fires when
// the OS thread that forked the child exits; the Go runtime keeps threads
// unless a goroutine exits while locked to one, which the host never does.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// execPath returns the path to exec for an opened binary. On Linux it is
// the descriptor itself (/proc/self/fd/N), so the bytes we hashed are the
// bytes that run: no window to swap the file between check and exec.
func execPath(f *os.File) string {
	return fmt.Sprintf("/proc/self/fd/%d", f.Fd())
}
