package control

import (
	"log/slog"
	"net"
	"os"
	"syscall"
)

// peerCheck accepts only connections from processes of our own user
// (SO_PEERCRED), on top of the socket's 0600 mode, and of those none that
// owner says is (or descends from) one of the host's service processes:
// a server runs as the host's user where no sandbox gives it another.
type peerCheck struct {
	net.Listener
	owner  ProcessOwner // may be nil
	logger *slog.Logger
}

func (l peerCheck) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			return c, nil
		}
		raw, err := uc.SyscallConn()
		if err != nil {
			_ = c.Close()
			continue
		}
		var cred *syscall.Ucred
		var cerr error
		_ = raw.Control(func(fd uintptr) {
			cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		})
		if cerr != nil || cred == nil || int(cred.Uid) != os.Getuid() {
			_ = c.Close()
			continue
		}
		if l.owner != nil && l.owner.ServiceProcess(int(cred.Pid)) {
			l.logger.Warn("control socket: refused a connection from a service process", "pid", cred.Pid)
			_ = c.Close()
			continue
		}
		return c, nil
	}
}
