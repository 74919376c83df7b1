//go:build !linux

package control

import "net"

// peerCheck relies on the socket's 0600 mode where SO_PEERCRED is missing.
type peerCheck struct{ net.Listener }
