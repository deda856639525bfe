#!/usr/bin/env bash
# Idle CPU of the shard, spinning vs sleeping, side by side, and what the host did meanwhile.
#
#   scripts/measure-event-loop.sh [warmup_s] [sample_s]      (defaults: 10 60)
#
# Boots the release binary twice against the same configuration — server.idle_wait = 0ms
# (spin) and the configured default — with autosave off, lets each warm up, and samples over
# the window (all from /proc, so nothing is added to the shard). COMPARE_IDLE_WAIT=2ms (any
# duration) makes the first run use that idle_wait instead of 0ms, e.g. to compare the
# default with a loop that wakes every 2 ms:
# - the process's CPU time (all threads; schedstat, nanoseconds), the headline figure;
# - the loop thread's own CPU time, its run-queue wait (schedstat's 2nd field: time it was
#   runnable but not on a CPU) and its voluntary / involuntary context switches (status); a
#   voluntary switch is one block and so one thread wake-up, which it sets against the fired
#   ticks, idle sleeps (loop wake-ups) and the loop's own count of thread wake-ups over the
#   same window, asked of the shard's console (`loopstats`, through a FIFO on its stdin);
# - the host's steal (/proc/stat, cpu line: time the hypervisor ran something else while
#   this guest wanted a CPU), as a share of all CPUs' time over the window, like top's %st.
# It prints both CPU figures, the reduction factor, a side-by-side table of the rest, and each
# run's `shard ready` and `loop:` lines. docs/measuring.md says how to read them.
#
# The loop thread is found by name: the thread whose comm is the binary's name (the main
# thread, which runs the loop; the others are shardloop-log, shardloop-save, console-in, …).
# LOOP_THREAD=NAME overrides the name; with no such thread the main thread is used.
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

# The kernel keeps 15 bytes of a thread's name.
loop_name=${LOOP_THREAD:-$(basename "$bin" | cut -c1-15)}
cpus=$(getconf _NPROCESSORS_ONLN)

now_ns() { date +%s%N; }

# loop_tid PID: the id of the thread named $loop_name, else PID itself (the main thread).
loop_tid() {
    local t
    for t in /proc/"$1"/task/*; do
        if [[ "$(cat "$t/comm" 2>/dev/null)" == "$loop_name" ]]; then
            echo "${t##*/}"
            return
        fi
    done
    echo "measure-event-loop: no thread named '$loop_name'; using the main thread" >&2
    echo "$1"
}

# thread_sample PID TID: "cpu_ns run_queue_wait_ns voluntary involuntary" for that thread.
thread_sample() {
    local run wait _
    read -r run wait _ <"/proc/$1/task/$2/schedstat"
    awk -v r="$run" -v w="$wait" '
        /^voluntary_ctxt_switches/ { v = $2 }
        /^nonvoluntary_ctxt_switches/ { n = $2 }
        END { print r, w, v, n }' "/proc/$1/task/$2/status"
}

# console_counters FD LOG: asks the shard's console for `loopstats` (its counters since start)
# and prints "fired_ticks idle_sleeps thread_wakeups" from the answer (thread_wakeups is -1
# for a binary without that counter), waiting up to 5 s for it.
console_counters() {
    local fd=$1 log=$2 before i
    before=$(grep -a -c '^since start:' "$log" || true)
    echo loopstats >&"$fd"
    for i in $(seq 50); do
        if [[ $(grep -a -c '^since start:' "$log" || true) -gt $before ]]; then
            sleep 0.1 # the rest of the block
            break
        fi
        sleep 0.1
    done
    awk -v n=$((before + 1)) '
        /^since start:/ { block++ }
        block == n && /^fired ticks / { f = $3 }
        block == n && /^idle sleeps / { s = $3 }
        block == n && /^thread wake-ups / { w = $3 }
        END { print (f == "" ? -1 : f), (s == "" ? -1 : s), (w == "" ? -1 : w) }' "$log"
}

# measure LABEL [VAR=value ...]: prints one line of figures for the summary —
# "LABEL cpu% window_ns loop_cpu_ns wait_ns steal_ns voluntary involuntary fired sleeps
# thread_wakeups" (the last three from the console, over the same window) — and the run's
# loop: lines and host figures on stderr.
measure() {
    local label=$1
    shift
    local log data fifo console pid tid comm c0 c1 t0 t1 s0 s1 rss
    local r0 w0 v0 n0 r1 w1 v1 n1 f0 z0 h0 f1 z1 h1
    log=$(mktemp)
    data=$(mktemp -d)
    # The console reads a FIFO that this script holds open: `loopstats` at both ends of the
    # window gives the loop's own counters for exactly that window (each asking costs the
    # loop one wake-up, so the window holds one more loop wake than the shard alone made).
    fifo=$(mktemp -u)
    mkfifo "$fifo"
    env "$@" \
        SHARD_AUTOSAVE__ENABLED=false \
        SHARD_SERVER__LOOP_STATS_INTERVAL="${sample}s" \
        "$bin" run --data-dir "$data" <"$fifo" >"$log" 2>&1 &
    pid=$!
    exec {console}>"$fifo"
    sleep "$warmup"
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "measure-event-loop: the $label run exited early; its log:" >&2
        cat "$log" >&2
        exit 1
    fi
    tid=$(loop_tid "$pid")
    read -r f0 z0 h0 < <(console_counters "$console" "$log")
    c0=$(cpu_ns "$pid")
    read -r r0 w0 v0 n0 < <(thread_sample "$pid" "$tid")
    s0=$(steal_ns)
    t0=$(now_ns)
    sleep "$sample"
    sleep 1 # let the status line for the window be written
    c1=$(cpu_ns "$pid")
    read -r r1 w1 v1 n1 < <(thread_sample "$pid" "$tid")
    s1=$(steal_ns)
    t1=$(now_ns)
    read -r f1 z1 h1 < <(console_counters "$console" "$log")
    rss=$(awk '/^VmHWM/ { print $2 / 1024 " MB" }' /proc/"$pid"/status)
    comm=$(cat "/proc/$pid/task/$tid/comm")
    kill -INT "$pid"
    exec {console}>&-
    wait "$pid" || true
    awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) -v l="$label" \
        -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v s=$((s1 - s0)) -v v=$((v1 - v0)) -v n=$((n1 - n0)) \
        -v f=$((f1 - f0)) -v z=$((z1 - z0)) -v h=$((h0 < 0 ? -1 : h1 - h0)) \
        'BEGIN { printf "%s %.4f %.0f %.0f %.0f %.0f %.0f %.0f %d %d %d\n", l, 100 * c / t, t, r, w, s, v, n, f, z, h }'
    grep -a -E '( loop: |shard ready)' "$log" | sed "s/^/  [$label] /" >&2 || true
    echo "  [$label] loop thread: tid $tid ($comm)" >&2
    echo "  [$label] peak resident memory: $rss" >&2
    rm -rf "$data" "$log" "$fifo"
}

echo "measuring: warmup ${warmup}s, sample ${sample}s, binary $bin, $cpus CPUs" >&2
compare=${COMPARE_IDLE_WAIT:-0ms}
compare_label=spin
[[ "$compare" =~ ^0+(ms|s|us|ns)?$ ]] || compare_label="idle_wait=$compare"
spin=$(measure "$compare_label" SHARD_SERVER__IDLE_WAIT="$compare")
sleeping=$(measure default)

read -r _ spin_pct _ <<<"$spin"
read -r _ sleep_pct _ <<<"$sleeping"
echo "idle CPU, $compare_label (idle_wait = $compare): ${spin_pct}% of one core"
echo "idle CPU, default (sleep when idle): ${sleep_pct}% of one core"
awk -v a="$spin_pct" -v b="$sleep_pct" \
    'BEGIN { if (b > 0) printf "reduction: %.0fx less CPU when sleeping\n", a / b; else print "reduction: sleeping used no measurable CPU" }'

# Side by side, one column per run. Run-queue wait is the loop thread's; steal is the whole
# guest's, as a share of all its CPUs' time over the window (top's %st).
printf '%s\n%s\n' "$spin" "$sleeping" | awk -v cpus="$cpus" '
    {
        label[NR] = $1; window[NR] = $3; run[NR] = $4; wait[NR] = $5; steal[NR] = $6
        vol[NR] = $7; invol[NR] = $8; fired[NR] = $9; sleeps[NR] = $10; own[NR] = $11
    }
    function ms(ns) { return sprintf("%.1f ms", ns / 1e6) }
    function pct(ns, of) { return sprintf("%.3f %%", 100 * ns / of) }
    function row(name, a, b) { printf "  %-36s %-24s %s\n", name, a, b }
    function ratio(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "-" }
    function per_s(count, ns) { return sprintf("%.2f", count / (ns / 1e9)) }
    END {
        printf "per run, over the sample window:\n"
        row("", label[1], label[2])
        row("window", sprintf("%.1f s", window[1] / 1e9), sprintf("%.1f s", window[2] / 1e9))
        row("loop thread cpu (% of one core)", pct(run[1], window[1]), pct(run[2], window[2]))
        row("loop thread run-queue wait", ms(wait[1]) " (" pct(wait[1], window[1]) ")",
            ms(wait[2]) " (" pct(wait[2], window[2]) ")")
        row("loop thread switches, voluntary/s", sprintf("%.1f", vol[1] / (window[1] / 1e9)),
            sprintf("%.1f", vol[2] / (window[2] / 1e9)))
        row("fired ticks/s (loopstats)", per_s(fired[1], window[1]), per_s(fired[2], window[2]))
        row("loop wake-ups/s (idle sleeps)", per_s(sleeps[1], window[1]), per_s(sleeps[2], window[2]))
        row("thread wake-ups/s, as the loop counts", own[1] < 0 ? "-" : per_s(own[1], window[1]),
            own[2] < 0 ? "-" : per_s(own[2], window[2]))
        row("thread wake-ups per fired tick", ratio(vol[1], fired[1]), ratio(vol[2], fired[2]))
        row("loop thread switches, involuntary/s", sprintf("%.1f", invol[1] / (window[1] / 1e9)),
            sprintf("%.1f", invol[2] / (window[2] / 1e9)))
        row("host steal (" cpus " CPUs, like %st)", ms(steal[1]) " (" pct(steal[1], window[1] * cpus) ")",
            ms(steal[2]) " (" pct(steal[2], window[2] * cpus) ")")
    }'
