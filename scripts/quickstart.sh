#!/usr/bin/env bash
# agentbox on its embedded default: PostgreSQL in .run/pg, a hub, and two
# agents (alpha, beta) on the local runtime, all on loopback.
#
#   ./scripts/quickstart.sh            run in the foreground until Ctrl-C
#   ./scripts/quickstart.sh --detach   return once everything is healthy
#   ./scripts/quickstart.sh stop       stop a detached run
#
# Ports (override with the environment): hub API 7700 and tunnel 7701;
# alpha 8090/8091/8080 and beta 8190/8191/8180 (E2B API / data plane / native);
# the hub's data plane by host 7703 behind an HTTPS front on 7443 (the URLs
# the SDK builds, domain agentbox.localhost:7443).
# Logs: .run/logs/. Settings for clients: .run/quickstart.env, and
# .run/quickstart-urls.env for the SDK given only a domain.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
RUN=${AGENTBOX_QS_RUN:-$ROOT/.run}   # tests use their own
BUILD=${AGENTBOX_QS_BUILD:-$ROOT/build-release}

HUB_PORT=${HUB_PORT:-7700}
HUB_TUNNEL_PORT=${HUB_TUNNEL_PORT:-7701}
# /metrics of each process, on its own loopback listener
HUB_METRICS_PORT=${HUB_METRICS_PORT:-7702}
HUB_DATA_PORT=${HUB_DATA_PORT:-7703}   # --data-listen: <port>-<id>.<domain> hosts
HUB_HTTPS_PORT=${HUB_HTTPS_PORT:-7443} # the loopback HTTPS front (scripts/quickstart-front.mjs)
DATA_DOMAIN=agentbox.localhost:$HUB_HTTPS_PORT
ALPHA_METRICS_PORT=${ALPHA_METRICS_PORT:-8092}
BETA_METRICS_PORT=${BETA_METRICS_PORT:-8192}
ALPHA_PORTS=(${ALPHA_E2B_PORT:-8090} ${ALPHA_DATA_PORT:-8091} ${ALPHA_NATIVE_PORT:-8080})
BETA_PORTS=(${BETA_E2B_PORT:-8190} ${BETA_DATA_PORT:-8191} ${BETA_NATIVE_PORT:-8180})

say() { printf 'quickstart: %s\n' "$*"; }

stop_all() {
  if [ -d "$RUN/pids" ]; then
    for f in "$RUN"/pids/*.pid; do
      [ -e "$f" ] || continue
      pid=$(cat "$f")
      kill -TERM "$pid" 2>/dev/null || true
    done
    # wait for them (bounded), then make sure
    for _ in $(seq 1 100); do
      alive=0
      for f in "$RUN"/pids/*.pid; do
        [ -e "$f" ] || continue
        kill -0 "$(cat "$f")" 2>/dev/null && alive=1
      done
      [ "$alive" = 0 ] && break
      sleep 0.1
    done
    for f in "$RUN"/pids/*.pid; do
      [ -e "$f" ] || continue
      kill -KILL "$(cat "$f")" 2>/dev/null || true
      rm -f "$f"
    done
  fi
  # Sandboxes outlive a stopped agent on purpose (a restarted agent re-adopts
  # them); the quick start's stop means gone, so their pid-1 inits are killed
  # (which ends everything in each sandbox's pid namespace) and so is every
  # process left in each sandbox's cgroups; stop returns once they are all
  # gone. The agents ran in our cgroups, so theirs are <ours>/agentbox/<sid>.
  local cgdirs=() dirs=() killed=()
  while IFS=: read -r _ ctrls cgpath; do
    case ",$ctrls," in
      ,,) cgdirs+=("/sys/fs/cgroup$cgpath") ;;
      *,memory,*|*,pids,*|*,cpu,*)
        for c in memory pids cpu; do
          case ",$ctrls," in *",$c,"*) cgdirs+=("/sys/fs/cgroup/$c$cgpath") ;; esac
        done ;;
    esac
  done < /proc/self/cgroup
  for d in "$RUN"/*/state/sandboxes/*/; do
    [ -d "$d" ] || continue
    dirs+=("${d%/}")
    f="$d/state.json"
    [ -e "$f" ] || continue
    for key in pid; do
      pid=$(grep -o "\"$key\": *[0-9]*" "$f" | grep -o '[0-9]*$' || true)
      start=$(grep -o "\"${key%pid}start[_a-z]*\": *[0-9]*" "$f" | grep -o '[0-9]*$' || true)
      [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/stat" ] || continue
      # the same process only if its start time matches (pids get reused)
      now=$(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $20}')
      [ "$now" = "$start" ] && kill -KILL "$pid" 2>/dev/null && killed+=("$pid") || true
    done
  done
  # wait (at most 10 s) until no process is left in any sandbox's cgroup
  for _ in $(seq 1 200); do
    left=0
    for p in "${killed[@]}"; do
      [ -e "/proc/$p" ] && left=1
    done
    for d in "${dirs[@]}"; do
      sid=$(basename "$d")
      for cg in "${cgdirs[@]}"; do
        procs="$cg/agentbox/$sid/cgroup.procs"
        [ -r "$procs" ] || continue
        while read -r p; do kill -KILL "$p" 2>/dev/null || true; left=1; done < "$procs"
      done
    done
    [ "$left" = 0 ] && break
    sleep 0.05
  done
  for d in "${dirs[@]}"; do
    sid=$(basename "$d")
    for cg in "${cgdirs[@]}"; do
      [ -d "$cg/agentbox/$sid" ] && rmdir "$cg/agentbox/$sid" 2>/dev/null || true
    done
    # the sandbox's writable space is a tmpfs mounted on <dir>/data
    mountpoint -q "$d/data" 2>/dev/null && umount -l "$d/data" || true
    rm -rf "$d"
  done
  # each agent's sandbox directory is a tmpfs it mounted (kept for its successor)
  for m in "$RUN"/*/state/sandboxes; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m" || true
  done
  # each agent's egress namespace (kept by an agent for its successor)
  for f in "$RUN"/*/state/egress-netns; do
    [ -r "$f" ] || continue
    ns=$(tr -cd 'A-Za-z0-9._-' < "$f")
    [ -n "$ns" ] && ip netns delete "$ns" 2>/dev/null || true
  done
  [ -d "$RUN/pg/data" ] && bash scripts/pg.sh stop "$RUN/pg"
  return 0
}

if [ "${1:-}" = "stop" ]; then
  stop_all
  say "stopped"
  exit 0
fi
DETACH=0
[ "${1:-}" = "--detach" ] && DETACH=1

port_busy() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }

# A previous run of ours is stopped first, so running twice in a row works.
stop_all
for p in "$HUB_PORT" "$HUB_TUNNEL_PORT" "$HUB_DATA_PORT" "$HUB_HTTPS_PORT" "${ALPHA_PORTS[@]}" "${BETA_PORTS[@]}"; do
  if port_busy "$p"; then
    echo "quickstart: port $p is in use by another program; free it or set HUB_PORT, ALPHA_E2B_PORT, ... (see the top of scripts/quickstart.sh)" >&2
    exit 1
  fi
done

bash scripts/deps.sh
# the code-interpreter-v1 env's start command runs this; sandboxes see /usr
install -D -m 0755 images/code-interpreter/server.py /usr/local/lib/agentbox/code-interpreter/server.py
say "building into $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTBOX_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" >/dev/null

mkdir -p "$RUN/logs" "$RUN/pids"
bash scripts/pg.sh init "$RUN/pg"
bash scripts/pg.sh start "$RUN/pg"
ADMIN_URL=$(cat "$RUN/pg/url") # the cluster's superuser: only to make the two roles below
# Least privilege (issue 13): migrations run as agentbox_owner, which owns the
# schema's objects; serve runs as agentbox_serve, a login role that is not a
# superuser, owns nothing and may only read and write rows. Passwords are
# made once and kept with the database.
for r in owner serve; do
  if [ ! -s "$RUN/pg/$r-password" ]; then
    (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUN/pg/$r-password")
  fi
done
OWNER_PW=$(cat "$RUN/pg/owner-password")
SERVE_PW=$(cat "$RUN/pg/serve-password")
PG_BINDIR=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
psql_admin() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -d "$ADMIN_URL" "$@"; }
psql_admin >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentbox_owner') THEN
    CREATE ROLE agentbox_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'agentbox_serve') THEN
    CREATE ROLE agentbox_serve LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE;
  END IF;
END \$\$;
ALTER ROLE agentbox_owner PASSWORD '$OWNER_PW';
ALTER ROLE agentbox_serve PASSWORD '$SERVE_PW';
GRANT USAGE, CREATE ON SCHEMA public TO agentbox_owner;
GRANT USAGE ON SCHEMA public TO agentbox_serve;
-- a database made by an earlier quick start: its objects go to the owner
DO \$\$ DECLARE o record; BEGIN
  FOR o IN SELECT format('ALTER TABLE public.%I OWNER TO agentbox_owner', tablename) AS q
           FROM pg_tables WHERE schemaname = 'public' AND tableowner <> 'agentbox_owner' LOOP
    EXECUTE o.q;
  END LOOP;
  FOR o IN SELECT format('ALTER SEQUENCE public.%I OWNER TO agentbox_owner', sequencename) AS q
           FROM pg_sequences WHERE schemaname = 'public' AND sequenceowner <> 'agentbox_owner' LOOP
    EXECUTE o.q;
  END LOOP;
END \$\$;
ALTER DEFAULT PRIVILEGES FOR ROLE agentbox_owner IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO agentbox_serve;
ALTER DEFAULT PRIVILEGES FOR ROLE agentbox_owner IN SCHEMA public
  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO agentbox_serve;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO agentbox_serve;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO agentbox_serve;
SQL
PG_PORT=$(cat "$RUN/pg/port")
OWNER_URL=postgres://agentbox_owner:$OWNER_PW@127.0.0.1:$PG_PORT/agentbox
SERVE_URL=postgres://agentbox_serve:$SERVE_PW@127.0.0.1:$PG_PORT/agentbox
# migrate and the CLIs as the owner; serve as agentbox_serve (below)
DATABASE_URL=$OWNER_URL
export DATABASE_URL
# The hub secret encrypts the vault and stored API keys: made once, kept.
if [ ! -s "$RUN/pg/hub-secret" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RUN/pg/hub-secret")
fi
export AGENTBOX_HUB_SECRET_FILE=$RUN/pg/hub-secret
"$BUILD/agentbox-hub" migrate --migrations-dir "$ROOT/migrations" >"$RUN/logs/migrate.log" 2>&1 \
  || { cat "$RUN/logs/migrate.log" >&2; exit 1; }

start() { # name, command...
  local name=$1; shift
  "$@" >"$RUN/logs/$name.log" 2>&1 &
  echo $! > "$RUN/pids/$name.pid"
}

# Each agent gets a join token: a new cluster is added, a known one gets a
# fresh token (the old one is only ever stored as a hash).
join_token() { # id
  local out
  out=$("$BUILD/agentbox-hub" cluster add "$1" --name "$1" --region local 2>/dev/null) \
    || out=$("$BUILD/agentbox-hub" cluster rotate-token "$1") \
    || { echo "quickstart: cannot register cluster $1" >&2; exit 1; }
  tail -n 1 <<<"$out"
}
# One API key for the quick start's principal (team demo, user demo), made
# once and kept with the database.
if [ ! -s "$RUN/pg/quickstart-api-key" ]; then
  key_out=$("$BUILD/agentbox-hub" key create --team demo --user demo --name quickstart) \
    || { echo "quickstart: cannot create the API key" >&2; exit 1; }
  (umask 077; tail -n 1 <<<"$key_out" > "$RUN/pg/quickstart-api-key")
fi
API_KEY=$(cat "$RUN/pg/quickstart-api-key")
# the sample manifests live in namespace "default": map team demo onto it
"$BUILD/agentbox-hub" team set-namespace demo default >/dev/null
ALPHA_TOKEN=$(join_token alpha)
BETA_TOKEN=$(join_token beta)

DATABASE_URL=$SERVE_URL # serve refuses a superuser; this role owns nothing
start hub "$BUILD/agentbox-hub" serve --listen "127.0.0.1:$HUB_PORT" \
  --tunnel-listen "127.0.0.1:$HUB_TUNNEL_PORT" --metrics-listen "127.0.0.1:$HUB_METRICS_PORT" \
  --data-domain "$DATA_DOMAIN" --data-listen "127.0.0.1:$HUB_DATA_PORT"
# The SDK builds https://<port>-<id>.<domain> (no plain-HTTP form): a
# certificate for *.agentbox.localhost, made once, and an HTTPS front on loopback.
mkdir -p "$RUN/tls"
if [ ! -s "$RUN/tls/cert.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$RUN/tls/key.pem" -out "$RUN/tls/cert.pem" \
    -days 3650 -subj /CN=agentbox.localhost \
    -addext "subjectAltName=DNS:*.agentbox.localhost,DNS:agentbox.localhost" >"$RUN/logs/tls.log" 2>&1 \
    || { cat "$RUN/logs/tls.log" >&2; exit 1; }
fi
start front node "$ROOT/scripts/quickstart-front.mjs" "$HUB_HTTPS_PORT" "$RUN/tls/cert.pem" \
  "$RUN/tls/key.pem" "127.0.0.1:$HUB_PORT" "127.0.0.1:$HUB_DATA_PORT"
DATABASE_URL=$OWNER_URL

start_agent() { # id, token, egress range, e2b, data, native, metrics
  local id=$1 token=$2 range=$3
  shift 3
  mkdir -p "$RUN/$id/state"
  # the token goes by environment, not argv, so ps does not show it
  export AGENTBOX_JOIN_TOKEN=$token
  start "$id" "$BUILD/agentbox-agent" serve --cluster-id "$id" \
    --hub-url "ws://127.0.0.1:$HUB_TUNNEL_PORT" \
    --state-dir "$RUN/$id/state" --manifests-dir "$ROOT/scripts/quickstart-manifests" \
    --envd-path "$BUILD/agentbox-envd" \
    --e2b-listen "127.0.0.1:$1" --data-listen "127.0.0.1:$2" --native-listen "127.0.0.1:$3" \
    --metrics-listen "127.0.0.1:$4" --egress-range "$range"
  unset AGENTBOX_JOIN_TOKEN
}
# each agent its own egress namespace; distinct ranges keep `ip` output readable
start_agent alpha "$ALPHA_TOKEN" 10.200.0.0/16 "${ALPHA_PORTS[@]}" "$ALPHA_METRICS_PORT"
start_agent beta "$BETA_TOKEN" 10.201.0.0/16 "${BETA_PORTS[@]}" "$BETA_METRICS_PORT"

wait_healthy() { # name, url [curl args: a key]
  local deadline=$((SECONDS + 60))
  until curl -fsS -o /dev/null "${@:3}" "$2"; do
    if ! kill -0 "$(cat "$RUN/pids/$1.pid")" 2>/dev/null; then
      echo "quickstart: $1 exited; last lines of .run/logs/$1.log:" >&2
      tail -n 20 "$RUN/logs/$1.log" >&2
      stop_all; exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "quickstart: $1 not healthy after 60 s ($2); see .run/logs/$1.log" >&2
      stop_all; exit 1
    fi
    sleep 0.1
  done
}
wait_healthy hub "http://127.0.0.1:$HUB_PORT/readyz"
wait_healthy alpha "http://127.0.0.1:${ALPHA_PORTS[0]}/healthz"
wait_healthy beta "http://127.0.0.1:${BETA_PORTS[0]}/healthz"
# both tunnels up: the hub reaches each agent's native API through it
# (every route but /healthz and /readyz needs a key)
wait_healthy alpha "http://127.0.0.1:$HUB_PORT/api/clusters/alpha/v1/ping" -H "X-API-Key: $API_KEY"
wait_healthy beta "http://127.0.0.1:$HUB_PORT/api/clusters/beta/v1/ping" -H "X-API-Key: $API_KEY"
# the HTTPS front to the hub (curl maps *.localhost to loopback by itself)
wait_healthy front "https://api.agentbox.localhost:$HUB_HTTPS_PORT/templates" \
  --cacert "$RUN/tls/cert.pem" -H "X-API-Key: $API_KEY"

cat > "$RUN/quickstart.env" <<ENV
export AGENTBOX_HUB_URL=http://127.0.0.1:$HUB_PORT
# the hub as the one address: E2B_API_URL=\$HUB_E2B_API_URL E2B_SANDBOX_URL=\$HUB_DATA_URL
export HUB_E2B_API_URL=http://127.0.0.1:$HUB_PORT/e2b
export HUB_DATA_URL=http://127.0.0.1:$HUB_PORT/data
export ALPHA_E2B_API_URL=http://127.0.0.1:${ALPHA_PORTS[0]}
export ALPHA_DATA_URL=http://127.0.0.1:${ALPHA_PORTS[1]}
export ALPHA_NATIVE_URL=http://127.0.0.1:${ALPHA_PORTS[2]}
export BETA_E2B_API_URL=http://127.0.0.1:${BETA_PORTS[0]}
export BETA_DATA_URL=http://127.0.0.1:${BETA_PORTS[1]}
export BETA_NATIVE_URL=http://127.0.0.1:${BETA_PORTS[2]}
export E2B_API_URL=http://127.0.0.1:${ALPHA_PORTS[0]}
export E2B_SANDBOX_URL=http://127.0.0.1:${ALPHA_PORTS[1]}
export AGENTBOX_API_KEY=$API_KEY
export E2B_API_KEY=$API_KEY
ENV
chmod 600 "$RUN/quickstart.env"
# The SDK given only a domain: it builds https://api.<domain> and
# https://<port>-<id>.<domain> (envd, getHost, signed upload/download URLs),
# all through the front to the hub.
cat > "$RUN/quickstart-urls.env" <<ENV
unset E2B_API_URL E2B_SANDBOX_URL
export E2B_DOMAIN=$DATA_DOMAIN
export E2B_API_KEY=$API_KEY
export NODE_EXTRA_CA_CERTS=$RUN/tls/cert.pem
export NODE_OPTIONS="--require $ROOT/scripts/loopback-dns.cjs"
export CURL_CA_BUNDLE=$RUN/tls/cert.pem
ENV
chmod 600 "$RUN/quickstart-urls.env"

cat <<MSG

agentbox is up: PostgreSQL (.run/pg), hub :$HUB_PORT, agents alpha :${ALPHA_PORTS[0]} and beta :${BETA_PORTS[0]}.
Logs are in .run/logs/. Try:

  source .run/quickstart.env
  curl \$AGENTBOX_HUB_URL/readyz
  curl \$ALPHA_E2B_API_URL/healthz
  curl -H "Authorization: Bearer \$AGENTBOX_API_KEY" \$AGENTBOX_HUB_URL/api/clusters
  curl -H "X-API-Key: \$AGENTBOX_API_KEY" \$AGENTBOX_HUB_URL/api/clusters/beta/v1/ping
  curl -H "Authorization: Bearer \$AGENTBOX_API_KEY" \$AGENTBOX_HUB_URL/api/v1/auth/whoami
  curl http://127.0.0.1:$BETA_METRICS_PORT/metrics   # loopback only
  curl -H "X-API-Key: \$E2B_API_KEY" \$HUB_E2B_API_URL/v2/sandboxes   # every cluster, merged

The unmodified e2b SDK (installed in tests/; run from there, env file sourced):

  import { Sandbox } from 'e2b'
  const sbx = await Sandbox.create('demo')
  console.log((await sbx.commands.run('uname -a')).stdout); await sbx.kill()

The URLs the SDK builds from a domain (source .run/quickstart-urls.env instead):
E2B_DOMAIN=$DATA_DOMAIN, the hub answers it as the sandboxes' domain, and
https://<port>-<sandbox id>.$DATA_DOMAIN reaches the sandbox through the hub:

  const sbx = await Sandbox.create('demo')
  console.log(sbx.getHost(3000), await sbx.uploadUrl('/home/user/up.txt'))

MSG

if [ "$DETACH" = 1 ]; then
  say "detached; stop with ./scripts/quickstart.sh stop"
  exit 0
fi
trap 'echo; say "stopping"; stop_all; exit 0' INT TERM
say "running; Ctrl-C stops everything"
while :; do
  for n in hub alpha beta; do
    if ! kill -0 "$(cat "$RUN/pids/$n.pid" 2>/dev/null)" 2>/dev/null; then
      say "$n exited; see .run/logs/$n.log"; stop_all; exit 1
    fi
  done
  sleep 1
done
