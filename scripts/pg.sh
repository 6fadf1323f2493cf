#!/usr/bin/env bash
# A throwaway PostgreSQL cluster in a directory, on loopback, with a password
# (DESIGN §11: even on loopback a sandbox must not get in without one).
#   pg.sh init DIR      initdb (once), pick a free port, write DIR/url
#   pg.sh start DIR     start it and wait until it accepts connections
#   pg.sh stop DIR      fast shutdown
# Runs the server as the 'postgres' system user when invoked as root.
set -euo pipefail

cmd=${1:?usage: pg.sh init|start|stop DIR}
dir=$(realpath -m "${2:?usage: pg.sh init|start|stop DIR}")
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$bindir" ] || { echo "pg.sh: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  local p
  for p in $(seq "${1:-55432}" 65000); do
    if ! (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

case "$cmd" in
init)
  if [ -f "$dir/data/PG_VERSION" ]; then exit 0; fi
  mkdir -p "$dir"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/password"
  chmod 600 "$dir/password"
  port=$(free_port 55432)
  if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$dir"; fi
  as_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=scram-sha-256 \
        --pwfile="$dir/password" -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  cat >> "$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
CONF
  echo "$port" > "$dir/port"
  echo "postgres://postgres:$(cat "$dir/password")@127.0.0.1:$port/agentbox" > "$dir/url"
  chmod 600 "$dir/url"
  ;;
start)
  port=$(cat "$dir/port")
  if ! as_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    # the port chosen at init may have been taken since: move to a free one
    if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      port=$(free_port $((port + 1)))
      echo "port = $port" >> "$dir/data/postgresql.conf"
      echo "$port" > "$dir/port"
      echo "postgres://postgres:$(cat "$dir/password")@127.0.0.1:$port/agentbox" > "$dir/url"
    fi
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start >/dev/null \
      || { tail -n 20 "$dir/server.log" >&2; exit 1; }
  fi
  PGPASSWORD=$(cat "$dir/password") "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres \
    -tAc "SELECT 1 FROM pg_database WHERE datname='agentbox'" | grep -q 1 \
    || PGPASSWORD=$(cat "$dir/password") "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres \
         -d postgres -qc "CREATE DATABASE agentbox" >/dev/null
  ;;
stop)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
  ;;
*)
  echo "usage: pg.sh init|start|stop DIR" >&2; exit 2 ;;
esac
