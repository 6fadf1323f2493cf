#!/usr/bin/env bash
# Installs what agentbox needs to build, run and test, from Debian's archive
# and the npm registry only. Installs only what is missing, so it is cheap to
# run every time. Used by quickstart.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config clang clang-format
  libwebsockets-dev libjansson-dev libyaml-dev libpq-dev libcurl4-openssl-dev libssl-dev
  libwebsockets-evlib-ev # --event-loop=libev, the default (shared/src/loop.c); brings libev4
  libev-dev # ev.h for shared/src/loop.c (libev itself is opened at run time)
  libcmocka-dev libhttp-parser-dev zlib1g-dev libseccomp-dev
  libwslay-dev # the tunnel's WebSocket framing (shared/src/tunnel_wsl.c)
  websockify # tests/bench/tunnel.mjs: the one-hop WebSocket relay peer
  postgresql postgresql-contrib
  iproute2 nftables util-linux procps curl ca-certificates
  nodejs npm
  prometheus
  kubernetes-client
  # the code-interpreter server (images/code-interpreter/server.py): Debian 12
  # ships python3-ipykernel 6.17.0, python3-jupyter-client 7.4.9,
  # python3-matplotlib 3.6.3 (plots as PNG)
  python3-ipykernel python3-jupyter-client python3-matplotlib
  # tests/tools/helmrender (renders helm/ charts in tests; Helm is not packaged):
  # Go in GOPATH mode, sprig and every package sprig imports, and a YAML library
  golang-go golang-github-masterminds-sprig-dev golang-github-masterminds-semver-dev
  golang-github-masterminds-goutils-dev golang-github-huandu-xstrings-dev
  golang-github-google-uuid-dev golang-github-imdario-mergo-dev
  golang-github-shopspring-decimal-dev golang-github-mitchellh-copystructure-dev
  golang-github-mitchellh-reflectwalk-dev golang-github-spf13-cast-dev
  golang-golang-x-crypto-dev golang-github-ghodss-yaml-dev golang-gopkg-yaml.v2-dev
  tmux openssl # the E2B CLI's interactive connect in a PTY; the 1.x SDK test's loopback certificate
  nginx # tests/bench/dataplane.mjs: the data plane's peer (reverse proxy and static file)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node may come from elsewhere than Debian's package (a newer one is fine)
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}")
  missing=("${missing[@]/npm}")
fi
# kubectl (for tests/integration/kubeapi.test.mjs) may come from elsewhere
# (a cloud SDK); Debian's kubernetes-client is only the fallback
if command -v kubectl >/dev/null; then
  missing=("${missing[@]/kubernetes-client}")
fi
want=()
for p in "${missing[@]}"; do [ -n "$p" ] && want+=("$p"); done

if [ "${#want[@]}" -gt 0 ]; then
  echo "deps: installing ${want[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: need root to apt-get install: ${want[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
fi

# npm packages for the integration and end-to-end tests (pinned by package-lock.json)
if [ ! -d tests/node_modules/e2b ] || [ ! -d tests/node_modules/e2b-old ] || [ tests/package-lock.json -nt tests/node_modules/.package-lock.json ]; then
  echo "deps: npm ci in tests/"
  (cd tests && npm ci --no-audit --no-fund --loglevel=error)
fi
