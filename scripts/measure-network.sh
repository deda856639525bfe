#!/usr/bin/env bash
# Network figures of the shard against its peers, with `shardloop loadgen` as the client.
#
#   scripts/measure-network.sh [rounds] [seconds]        (defaults: 3 20)
#
# 1. 1000 clients ping-pong: the shard on epoll, the shard on io_uring and
#    examples/tokio_echo.rs, each `rounds` times, interleaved; round trips/s and RTT from
#    loadgen, and the shard's CPU and wheel lag (its `loop:` lines) over each run.
# 2. 1 client ping-pong: the shard with its default idle_wait and with idle_wait = 0.
# 3. 500 clients in walk mode for 60 s on the default backend: loop CPU, p99 wheel lag, late
#    ticks.
#
# PARTS picks which of the three run (default "ping rtt walk"), e.g. PARTS=walk to compare
# two binaries' walking cost without the rest. BACKENDS picks the shard's backends in part 1
# (default "epoll io_uring"). OLD_BIN (a shardloop binary, e.g. one built from main) adds it to
# every round of part 1 as one more peer, on OLD_BACKEND (default io_uring), right after the
# shard's own runs: an A/B of two builds inside the same rounds. INTERVAL (e.g. 50ms) paces each ping client to
# one ping per interval, so every peer gets the same offered load (1000 clients at 50ms: 20,000
# round trips/s); without it they ping flat out. Each run prints the server's CPU per round
# trip.
#
# Every shard runs the default world (190,728 items, 33,158 mobiles, its timers) with a
# `loop:` line every 5 s, and max_per_ip and ping_rate lifted (see start_shard). It builds
# nothing: run `cargo build --release --bins --examples` first (or point SHARDLOOP_BIN / ECHO_BIN at
# binaries). Config overrides go through SHARD_*.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-20}
parts=" ${PARTS:-ping rtt walk} "
bin=${SHARDLOOP_BIN:-target/release/shardloop}
echo_bin=${ECHO_BIN:-target/release/examples/tokio_echo}
port=${PORT:-26100}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

for b in "$bin" "$echo_bin"; do
    if [[ ! -x "$b" ]]; then
        echo "measure-network: $b not found; run 'cargo build --release --bins --examples' first" >&2
        exit 2
    fi
done
bin=$(realpath "$bin")
echo_bin=$(realpath "$echo_bin")
old_bin=${OLD_BIN:+$(realpath "$OLD_BIN")}
ulimit -n "$(ulimit -Hn)"

# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

# start_shard NAME [VAR=value ...]: starts the shard ($shard_bin, default $bin), waits for
# "shard ready"; sets $pid.
#
# These are throughput measurements, not a test of the limits: every client comes from
# 127.0.0.1, connects at once and pings flat out without logging in. So the admission and
# flood limits (`network.max_per_ip`, default 16 per host; `network.connect_rate`, 4 connects
# a second per host; `network.max_prelogin`, 256 not logged in; `network.ping_rate`, default
# 4/s) are lifted here: with them, all but 16 of the 1000 clients would be refused and the rest
# held to 4 pings a second. scripts/measure-hostile.sh measures the shard with its default
# limits.
start_shard() {
    local name=$1
    shift
    (cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_SERVER__LOOP_STATS_INTERVAL=5s \
        SHARD_NETWORK__MAX_PER_IP=4096 SHARD_NETWORK__PING_RATE=0 SHARD_NETWORK__CONNECT_RATE=0 \
        SHARD_NETWORK__MAX_CONNECTIONS=2000 SHARD_NETWORK__MAX_PRELOGIN=2000 \
        SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" "$@" \
        "${shard_bin:-$bin}" </dev/null >/dev/null 2>"$work/$name.log") &
    pid=$!
    for _ in $(seq 600); do
        grep -q "shard ready" "$work/$name.log" 2>/dev/null && return
        sleep 0.1
    done
    echo "measure-network: $name never became ready" >&2
    cat "$work/$name.log" >&2
    exit 1
}

stop() {
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# load NAME PID ARGS...: runs loadgen against the server PID; prints its report, the
# server's CPU over the run and, for a shard, the loop: lines logged during the run.
load() {
    local name=$1 server=$2
    shift 2
    local log="$work/$name.log" before_lines=0 cpu0 t0 wait0 steal0 cpu1 t1 wait1 steal1
    [[ -f "$log" ]] && before_lines=$(wc -l <"$log")
    cpu0=$(cpu_ns "$server")
    wait0=$(runqueue_wait_ns "$server")
    steal0=$(steal_ns)
    t0=$(date +%s%N)
    "$bin" loadgen --connect "127.0.0.1:$port" "$@" >"$work/loadgen.out" || true
    cpu1=$(cpu_ns "$server")
    wait1=$(runqueue_wait_ns "$server")
    steal1=$(steal_ns)
    t1=$(date +%s%N)
    sed 's/^/    /' "$work/loadgen.out"
    awk -v c=$((cpu1 - cpu0)) -v t=$((t1 - t0)) \
        'BEGIN { printf "    server cpu over the run (setup included): %.1f%% of a core\n", 100 * c / t }'
    # CPU per round trip: the server's CPU over the run divided by the round trips that rate
    # makes over the same span (so setup is charged to the round trips, alike for each peer).
    # It falls as throughput rises (more round trips per loop iteration or reactor turn), so
    # compare peers at the same rate: INTERVAL paces every client.
    grep -o 'round trips [0-9]* ([0-9.]*/s)' "$work/loadgen.out" | tr -d '()/s' |
        awk -v c=$((cpu1 - cpu0)) -v t=$((t1 - t0)) '$4 > 0 {
            printf "    server cpu per round trip: %.2f us (at %.0f round trips/s)\n",
                c / 1e3 / ($4 * t / 1e9), $4 }' || true
    # Host noise: time the server's main thread waited for a CPU, and time the hypervisor
    # took from the guest. Either one stalls the loop without the loop doing anything.
    awk -v w=$((wait1 - wait0)) -v s=$((steal1 - steal0)) \
        'BEGIN { printf "    host: server main thread runnable but waiting %.0f ms; steal %.0f ms\n", w / 1e6, s / 1e6 }'
    if [[ -f "$log" ]]; then
        tail -n +"$((before_lines + 1))" "$log" | grep -o 'loop: .*' | sed 's/^/    /' || true
    fi
}

if [[ $parts == *" ping "* ]]; then
echo "== 1000 clients, ping, ${seconds}s per run, $rounds rounds interleaved"
for round in $(seq "$rounds"); do
    for backend in ${BACKENDS:-epoll io_uring} ${old_bin:+${OLD_BACKEND:-io_uring}-old}; do
        echo "-- round $round: shard, network.backend = $backend"
        shard_bin=$bin
        [[ $backend == io_uring-old ]] && shard_bin=$old_bin && echo "    binary: $old_bin"
        start_shard "ping-$backend-$round" SHARD_NETWORK__BACKEND="${backend%-old}" \
            SHARD_NETWORK__MAX_CONNECTIONS=2000
        shard_bin=
        grep -o 'listening for players.*' "$work/ping-$backend-$round.log" | sed 's/^/    /'
        load "ping-$backend-$round" "$pid" --connections 1000 --duration "${seconds}s" --ramp 2s \
            ${INTERVAL:+--interval "$INTERVAL"}
        stop "$pid"
    done
    echo "-- round $round: tokio_echo"
    "$echo_bin" "127.0.0.1:$port" >/dev/null &
    echo_pid=$!
    sleep 0.5
    load "echo-$round" "$echo_pid" --connections 1000 --duration "${seconds}s" --ramp 2s \
        ${INTERVAL:+--interval "$INTERVAL"}
    stop "$echo_pid"
done
fi

if [[ $parts == *" rtt "* ]]; then
echo "== 1 client, ping, 10s per run: default idle_wait vs idle_wait = 0"
for round in $(seq "$rounds"); do
    for idle in default 0ms; do
        echo "-- round $round: idle_wait $idle"
        if [[ $idle == default ]]; then
            start_shard "rtt-$idle-$round"
        else
            start_shard "rtt-$idle-$round" SHARD_SERVER__IDLE_WAIT=$idle
        fi
        load "rtt-$idle-$round" "$pid" --connections 1 --duration 10s
        stop "$pid"
    done
done
fi

if [[ $parts == *" walk "* ]]; then
echo "== 500 clients, walk, 60s, default backend"
start_shard walk
load walk "$pid" --connections 500 --duration 60s --mode walk --ramp 5s
stop "$pid"
fi
