#!/usr/bin/env bash
# Steady-state server CPU per round trip of two shard builds, alternating, setup left out:
# 1,000 ping clients every INTERVAL (default 50ms: 20,000 round trips a second offered) on
# io_uring (BACKEND to change it); for each run, the shard's CPU (all threads, /proc) over a
# 12 s window that starts 5 s after the clients, divided by the round trips loadgen reports.
# measure-network.sh's figure counts the connects and the closes too; this one does not.
#
#   NEW_BIN=target/release/shardloop OLD_BIN=old/shardloop scripts/measure-window-ab.sh [rounds]
#
# Each round runs NEW_BIN then OLD_BIN. Loopback only; builds nothing.
set -euo pipefail
rounds=${1:-3}
interval=${INTERVAL:-50ms}
backend=${BACKEND:-io_uring}
new_bin=$(realpath "${NEW_BIN:-target/release/shardloop}")
old_bin=$(realpath "${OLD_BIN:?OLD_BIN: the build to compare with}")
port=${PORT:-26700}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

for round in $(seq "$rounds"); do
    for name in new old; do
        bin=$new_bin
        [[ $name == old ]] && bin=$old_bin
        (cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_AUTOSAVE__ENABLED=false \
            SHARD_NETWORK__BACKEND="$backend" SHARD_NETWORK__LOGIN_TIMEOUT=1h \
            SHARD_NETWORK__IDLE_TIMEOUT=2h SHARD_NETWORK__MAX_PER_IP=4096 \
            SHARD_NETWORK__PING_RATE=0 SHARD_NETWORK__CONNECT_RATE=0 \
            SHARD_NETWORK__MAX_CONNECTIONS=2000 SHARD_NETWORK__MAX_PRELOGIN=2000 \
            SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" "$bin" \
            </dev/null >/dev/null 2>"$work/shard.log") &
        pid=$!
        for _ in $(seq 600); do
            grep -q "shard ready" "$work/shard.log" 2>/dev/null && break
            sleep 0.1
        done
        "$new_bin" loadgen --connect "127.0.0.1:$port" --connections 1000 --interval "$interval" \
            --duration 22s --ramp 2s >"$work/loadgen.out" 2>&1 &
        loadgen=$!
        sleep 5
        c0=$(cpu_ns "$pid"); w0=$(runqueue_wait_ns "$pid"); t0=$(date +%s%N)
        sleep 12
        c1=$(cpu_ns "$pid"); w1=$(runqueue_wait_ns "$pid"); t1=$(date +%s%N)
        wait "$loadgen" || true
        rate=$(grep -o 'round trips [0-9]* ([0-9.]*/s)' "$work/loadgen.out" | tr -d '()/s' |
            awk '{ print $4 }')
        awk -v n="$name" -v r="$round" -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v q="${rate:-0}" \
            -v w=$((w1 - w0)) -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN { if (q > 0)
            printf "round %d %s: %.2f us per round trip (%.0f/s), main thread waited %.0f ms, load %s\n",
                r, n, c / 1e3 / (q * t / 1e9), q, w / 1e6, l }'
        kill -TERM "$pid"
        wait "$pid" 2>/dev/null || true
    done
done
