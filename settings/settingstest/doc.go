// Package settingstest is the conformance suite for [settings.Store]
// implementations: every store passes [Run], which checks round trips of
// every form node type, "{}" for unset sections, isolation between users,
// extensions and sections, Update under 20 concurrent writers, DeleteUser,
// refusal of values that are not JSON objects, empty keys, cancelled
// contexts and use after Close.
//
//	func TestMyStore(t *testing.T) {
//		settingstest.Run(t, func(t *testing.T) settings.Store { return open(t) })
//	}
package settingstest
