//go:build (dragonfly && cgo) || (freebsd && cgo) || linux || netbsd || openbsd

package secrets

import (
	"errors"

	dbus "github.com/godbus/dbus/v5"
)

// dbusErrorName returns the D-Bus error name carried by err (for example
// "org.freedesktop.DBus.Error.ServiceUnknown"), or "" when err is not a
// D-Bus error reply. These are the platforms where go-keyring talks D-Bus.
func dbusErrorName(err error) string {
	var v dbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *dbus.Error
	if errors.As(err, &p) && p != nil {
		return p.Name
	}
	return ""
}
