#!/usr/bin/env bash
# The live crowd (docs/performance.md, "The fan-out budget (issue 33)"): a release shard on
# loopback and `loadgen --mode crowd` — 1000 bots whose names start them within one 16-tile
# square, each writing its 20-move burst every 2 s, so every move goes to 999 players — for
# each binary named, one after the other, ROUNDS times.
#
#   scripts/measure-crowd-ab.sh [ROUNDS] BIN...  e.g. scripts/measure-crowd-ab.sh 2 old/shardloop target/release/shardloop
#
# Needs `perf` (the kernel's syscall tracepoints, as root) for the count of socket writes.
#
# Prints, per run: the shard's `loop:` status lines (every 5 s: loop cpu, wheel lag peak, late
# ticks) while the bots were on, and loadgen's own summary (packets read, bots closed by the
# server). The loadgen is the first binary's, so every shard meets the same client.
#
# CROWD=N sets the number of bots (default 1000).
#
# Builds nothing. Needs 1000 descriptors for the shard and as many for loadgen.
set -euo pipefail

rounds=${1:-1}
shift
[[ $# -ge 1 ]] || { echo "usage: $0 [ROUNDS] BIN..." >&2; exit 2; }
loadgen=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n 8192
port=$((20000 + RANDOM % 20000))

run() {
    local bin=$1 name=$2 pid
    (cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_AUTOSAVE__ENABLED=false \
        SHARD_SERVER__LOOP_STATS_INTERVAL=5s \
        SHARD_NETWORK__MAX_CONNECTIONS=2000 SHARD_NETWORK__MAX_PER_IP=4096 \
        SHARD_NETWORK__MAX_PRELOGIN=1024 SHARD_NETWORK__CONNECT_RATE=0 \
        SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" \
        "$bin" run --data-dir "$work/data-$name" </dev/null >/dev/null 2>"$work/$name.log") &
    pid=$!
    for _ in $(seq 600); do
        grep -q "shard ready" "$work/$name.log" 2>/dev/null && break
        sleep 0.1
    done
    local from
    from=$(grep -c "loop:" "$work/$name.log" || true)
    # The shard's socket writes while the bots are on, counted by the kernel: a measure of the
    # flush's work that does not depend on how much CPU the loop got on a busy machine.
    perf stat -x, -e 'syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg' \
        -p "$pid" -o "$work/$name.perf" -- sleep 37 &
    local perf=$!
    "$loadgen" loadgen --connect "127.0.0.1:$port" --mode crowd --connections "${CROWD:-1000}" \
        --ramp 5s --duration 30s >"$work/$name.loadgen" 2>&1 || true
    wait "$perf" || true
    kill -INT "$pid"
    wait "$pid" 2>/dev/null || true
    echo "== $name: $bin (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    grep "loop:" "$work/$name.log" | tail -n +"$((from + 1))" | sed 's/^.*loop:/loop:/'
    cat "$work/$name.loadgen"
    echo "socket writes by the shard (perf stat, whole run):"
    grep -v '^#' "$work/$name.perf" | awk -F, 'NF > 2 { print "  " $3 " " $1 }'
    echo "  (io_uring sends are not system calls: counted only with network.backend = epoll)"
    rm -rf "$work/data-$name"
}

for round in $(seq "$rounds"); do
    i=0
    for bin in "$@"; do
        i=$((i + 1))
        run "$bin" "bin$i-round$round"
    done
done
