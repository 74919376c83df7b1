//go:build !((dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd)

package secrets

// dbusErrorName returns "": go-keyring does not use D-Bus on this platform.
func dbusErrorName(error) string { return "" }
