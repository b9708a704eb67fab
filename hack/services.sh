#!/usr/bin/env bash
# Makes sure the services the tests talk to are up: PostgreSQL and NATS
# with JetStream on 127.0.0.1 (KOLLECT_TEST_POSTGRES_DSN and
# KOLLECT_TEST_NATS_URL override where the tests look). A service that is
# down is started with the machine's own commands; one that cannot be
# started fails with a message naming it and how to start it.
set -euo pipefail

pg_dsn="${KOLLECT_TEST_POSTGRES_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
nats_url="${KOLLECT_TEST_NATS_URL:-nats://127.0.0.1:4222}"

# up host port: whether something accepts TCP connections there.
up() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

hostport() { # URL → "host port"
	local rest="${1#*://}"
	rest="${rest#*@}"
	rest="${rest%%/*}"
	rest="${rest%%\?*}"
	echo "${rest%%:*} ${rest##*:}"
}

wait_up() { # name host port
	for _ in $(seq 1 50); do
		up "$2" "$3" && return 0
		sleep 0.2
	done
	echo "services: $1 did not come up on $2:$3" >&2
	return 1
}

read -r pg_host pg_port <<<"$(hostport "$pg_dsn")"
if ! up "$pg_host" "$pg_port"; then
	echo "services: PostgreSQL is not listening on $pg_host:$pg_port; starting it"
	if ! command -v pg_ctlcluster >/dev/null || [ ! -d /etc/postgresql ]; then
		echo "services: PostgreSQL is missing: install it (apt-get install postgresql) or point KOLLECT_TEST_POSTGRES_DSN at a server" >&2
		exit 1
	fi
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
	wait_up PostgreSQL "$pg_host" "$pg_port"
fi

read -r nats_host nats_port <<<"$(hostport "$nats_url")"
if ! up "$nats_host" "$nats_port"; then
	echo "services: NATS is not listening on $nats_host:$nats_port; starting it"
	if [ ! -x /usr/sbin/nats-server ]; then
		echo "services: nats-server is missing: install it (apt-get install nats-server) or point KOLLECT_TEST_NATS_URL at a server with JetStream" >&2
		exit 1
	fi
	mkdir -p /var/lib/nats-server
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
		-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
	wait_up NATS "$nats_host" "$nats_port"
fi
echo "services: PostgreSQL on $pg_host:$pg_port and NATS on $nats_host:$nats_port are up"
