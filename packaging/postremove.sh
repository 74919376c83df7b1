#!/bin/sh
# agenthost package: on purge (deb) the data and the user go too; a plain
# remove, and an rpm erase, keep /var/lib/agenthost (settings, tokens, secrets).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = "purge" ]; then
	rm -rf /var/lib/agenthost /var/lib/private/agenthost
	if getent passwd agenthost >/dev/null; then
		userdel agenthost >/dev/null 2>&1 || true
	fi
	if getent group agenthost >/dev/null; then
		groupdel agenthost >/dev/null 2>&1 || true
	fi
fi
