#!/bin/sh
# agenthost package: stop the service before its files go.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop agenthost.service >/dev/null 2>&1 || true
	systemctl disable agenthost.service >/dev/null 2>&1 || true
fi
