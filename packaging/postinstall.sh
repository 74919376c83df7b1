#!/bin/sh
# agenthost package: the dedicated system user, then the unit.
set -e
# useradd (passwd on Debian, shadow-utils on RPM systems) is on both.
if ! getent group agenthost >/dev/null; then
	groupadd --system agenthost
fi
if ! getent passwd agenthost >/dev/null; then
	useradd --system --gid agenthost --home-dir /var/lib/agenthost --no-create-home \
		--shell /usr/sbin/nologin --comment "agenthost service" agenthost
fi
# The file may hold a passphrase hash or TLS paths: readable by root and the service only.
chown root:agenthost /etc/agenthost /etc/agenthost/agenthost.json
chmod 0750 /etc/agenthost
chmod 0640 /etc/agenthost/agenthost.json
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null || true
	# Enabled, not started: the operator reviews the file first.
	systemctl enable agenthost.service >/dev/null || true
	systemctl try-restart agenthost.service >/dev/null || true
fi
