#!/usr/bin/env bash
# The cost of the loop profile (issue 19): the same shard built without and with it, side by
# side, interleaved, at idle and under 1000 ping-pong clients.
#
#   scripts/measure-loop-profile.sh OFF_BIN ON_BIN [rounds] [seconds]   (defaults: 3 15)
#
# Build the two binaries first from the same tree (the profile is a default feature; OFF
# compiles it out):
#   cargo build --release --bins --no-default-features --features io-uring && cp target/release/shardloop /tmp/shardloop-off
#   cargo build --release --bins && cp target/release/shardloop /tmp/shardloop-on
#
# Each round starts each binary once (default world, autosave off, probe off, admission and
# ping limits lifted as in measure-network.sh), lets it settle, samples the loop thread's CPU
# (first field of the main thread's schedstat) for `seconds` at idle, then again while
# `shardloop loadgen` runs 1000 clients flat out. It prints every run and the medians.
#
# Flat out, the work per second follows the CPU the machine lends each side, and the loop's
# CPU per round trip falls as its iterations batch more (more round trips per iteration at a
# higher rate), so on a shared machine two runs differ by more than the profile costs.
# `INTERVAL=50ms scripts/measure-loop-profile.sh ...` paces each client to one ping per
# interval (1000 clients: 20,000 round trips a second): the same work in every run, so the
# loop's CPU itself is the figure to compare.
set -euo pipefail

off=${1:?usage: $0 OFF_BIN ON_BIN [rounds] [seconds]}
on=${2:?usage: $0 OFF_BIN ON_BIN [rounds] [seconds]}
rounds=${3:-3}
seconds=${4:-15}
port=${PORT:-26300}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

loop_ns() { read -r ns _ <"/proc/$1/task/$1/schedstat"; echo "$ns"; }

# sample PID SECONDS [CMD...]: loop-thread CPU over SECONDS (or over CMD), as % of a core.
sample() {
    local pid=$1 secs=$2 c0 c1 t0 t1
    shift 2
    c0=$(loop_ns "$pid"); t0=$(date +%s%N)
    if [[ $# -gt 0 ]]; then "$@" >"$work/loadgen.out" 2>&1 || true; else sleep "$secs"; fi
    c1=$(loop_ns "$pid"); t1=$(date +%s%N)
    awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.4f", 100 * c / t }'
}

run() {
    local name=$1 bin=$2 pid idle busy
    (cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_AUTOSAVE__ENABLED=false \
        SHARD_NETWORK__MAX_PER_IP=4096 SHARD_NETWORK__PING_RATE=0 SHARD_NETWORK__CONNECT_RATE=0 \
        SHARD_NETWORK__MAX_PRELOGIN=1024 \
        SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" \
        "$bin" run --data-dir "$work/data-$name" </dev/null >/dev/null 2>"$work/$name.log") &
    pid=$!
    for _ in $(seq 600); do
        grep -q "shard ready" "$work/$name.log" 2>/dev/null && break
        sleep 0.1
    done
    sleep 5
    idle=$(sample "$pid" "$seconds")
    busy=$(sample "$pid" "$seconds" "$bin" loadgen --connect "127.0.0.1:$port" \
        --connections 1000 --duration "${seconds}s" --ramp 2s ${INTERVAL:+--interval "$INTERVAL"})
    echo "$name idle_loop_cpu_pct=$idle load_loop_cpu_pct=$busy $(grep -i "round trips" "$work/loadgen.out" | head -1 | tr -s ' ')"
    kill -INT "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$work/data-$name"
    echo "$idle $busy" >>"$work/$3"
}

for round in $(seq "$rounds"); do
    run "off-$round" "$off" off.txt
    run "on-$round" "$on" on.txt
done
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for v in off on; do
    echo "$v median: idle $(cut -d' ' -f1 "$work/$v.txt" | median) % of a core, 1000 clients $(cut -d' ' -f2 "$work/$v.txt" | median) %"
done
