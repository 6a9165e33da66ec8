#!/usr/bin/env bash
# Installs the Debian packages the build, tests and benchmarks need, only if any is missing.
# Usage: scripts/deps.sh [bench]
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libyajl-dev uuid-dev libcmocka-dev libzmq3-dev
      clang libclang-rt-14-dev iproute2 python3
      # the dashboard: HTTP, and the plotting and drawing scripts built into the binary
      libmicrohttpd-dev libjs-chart.js libjs-d3
      # its tests: a real browser, a real Prometheus, and Graphviz to check `ezmsg graphviz`
      chromium prometheus graphviz
      # the install test: man pages rendered, the zsh completion parsed
      groff-base man-db zsh)
# `deps.sh bench`: also iceoryx (its C binding and its RouDi daemon), a peer of `make bench` only,
# lld, which links the code layouts of its telemetry comparison, and gnuplot, which draws the
# fan-out / fan-in plots (bench/fan.sh).
if [ "${1:-}" = bench ]; then pkgs+=(libiceoryx-binding-c-dev iceoryx lld gnuplot-nox); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
