module github.com/agenthost/agenthost/secrets

go 1.26.0

require (
	github.com/godbus/dbus/v5 v5.2.2
	github.com/google/go-cmp v0.7.0
	github.com/zalando/go-keyring v0.2.8
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/danieljoos/wincred v1.2.3 // indirect
	golang.org/x/sys v0.27.0 // indirect
)
