#!/usr/bin/env bash
# Idle CPU of the shard, spinning vs sleeping, side by side.
#
#   scripts/measure-event-loop.sh [warmup_s] [sample_s]      (defaults: 10 60)
#
# Boots the release binary twice against the same configuration — server.idle_wait = 0ms
# (spin) and the configured default — with autosave off, lets each warm up, samples the
# process's CPU time from /proc over the window (nanoseconds, all threads), and prints both
# CPU figures, the reduction factor, and each run's `loop:` status lines.
#
# It builds nothing: run `cargo build --release` first (or point SHARDLOOP_BIN at a binary).
# It never edits the config: overrides go through SHARD_* environment variables.
set -euo pipefail

warmup=${1:-10}
sample=${2:-60}
bin=${SHARDLOOP_BIN:-target/release/shardloop}

if [[ ! -x "$bin" ]]; then
    echo "measure-event-loop: $bin not found; run 'cargo build --release' first" >&2
    exit 2
fi
if ! [[ "$warmup" =~ ^[0-9]+$ && "$sample" =~ ^[0-9]+$ && "$sample" -gt 0 ]]; then
    echo "usage: $0 [warmup_s] [sample_s]   (whole seconds, sample > 0)" >&2
    exit 2
fi

# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

now_ns() { date +%s%N; }

# measure LABEL [VAR=value ...]: prints "LABEL <cpu percent>" and the run's loop: lines.
measure() {
    local label=$1
    shift
    local log data pid c0 c1 t0 t1 rss
    log=$(mktemp)
    data=$(mktemp -d)
    env "$@" \
        SHARD_AUTOSAVE__ENABLED=false \
        SHARD_SERVER__LOOP_STATS_INTERVAL="${sample}s" \
        "$bin" run --data-dir "$data" </dev/null >"$log" 2>&1 &
    pid=$!
    sleep "$warmup"
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "measure-event-loop: the $label run exited early; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
    c0=$(cpu_ns "$pid")
    t0=$(now_ns)
    sleep "$sample"
    sleep 1 # let the status line for the window be written
    c1=$(cpu_ns "$pid")
    t1=$(now_ns)
    rss=$(awk '/^VmHWM/ { print $2 / 1024 " MB" }' /proc/"$pid"/status)
    kill -INT "$pid"
    wait "$pid" || true
    awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v l="$label" \
        'BEGIN { printf "%s %.4f\n", l, 100 * c / t }'
    grep -a -e 'loop:' -e 'shard ready' "$log" | sed "s/^/  [$label] /" >&2 || true
    echo "  [$label] peak resident memory: $rss" >&2
    rm -rf "$data" "$log"
}

echo "measuring: warmup ${warmup}s, sample ${sample}s, binary $bin" >&2
spin=$(measure spin SHARD_SERVER__IDLE_WAIT=0ms)
sleeping=$(measure default)

spin_pct=${spin#* }
sleep_pct=${sleeping#* }
echo "idle CPU, spin    (idle_wait = 0ms): ${spin_pct}% of one core"
echo "idle CPU, default (sleep when idle): ${sleep_pct}% of one core"
awk -v a="$spin_pct" -v b="$sleep_pct" \
    'BEGIN { if (b > 0) printf "reduction: %.0fx less CPU when sleeping\n", a / b; else print "reduction: sleeping used no measurable CPU" }'
