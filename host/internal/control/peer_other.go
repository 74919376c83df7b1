//go:build !linux

package control

import (
	"log/slog"
	"net"
)

// peerCheck relies on the socket's 0600 mode where SO_PEERCRED is missing.
// The host's service processes run as other users there only if the
// operator made them so.
type peerCheck struct {
	net.Listener
	owner  ProcessOwner
	logger *slog.Logger
}
