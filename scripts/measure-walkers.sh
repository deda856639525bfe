#!/usr/bin/env bash
# Where a walking player's CPU goes (issue 35, item 1): one shard, 500 walking bots, and
# three looks at the loop thread while they walk, one after the other so they do not overlap.
#
#   scripts/measure-walkers.sh [seconds-per-look]        (default 20)
#
# Timeline (loadgen runs 5 s of ramp + 4 looks + margins; with the default, ~100 s in all):
#   1. clean window: the loop thread's CPU from /proc, and the shard's `loop:` lines;
#   2. `perf record -g -e cpu-clock` on the loop thread (software clock: this VM has no
#      hardware counters), reported by symbol and by DSO;
#   3. `perf trace -s` on the whole process for half a look: syscalls per thread and kind
#      (it slows the traced syscalls a little; strace would slow them much more);
#   4. the console's `loopstats csv`, read back for the clean window only: each phase's share
#      of the loop thread's wall time.
# Moves per second come from loadgen (2 000/s for 500 bots at one move per 250 ms).
#
# Loopback only; the shard runs under `timeout` (scripts/shard-session.sh) and everything
# started here is stopped by the EXIT trap. It builds nothing: run
# `cargo build --release --bins` first (or point SHARDLOOP_BIN at a binary). KEEP_WORK=1
# keeps the logs, the CSV and perf.data.
set -euo pipefail

look=${1:-20}
bin=${SHARDLOOP_BIN:-target/release/shardloop}
port=${PORT:-26400}
# shellcheck source=scripts/shard-session.sh
source "$(dirname "$0")/shard-session.sh"
begin_session bin
command -v perf >/dev/null || { echo "measure-walkers: perf not found" >&2; exit 2; }


echo "== $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg)"
start_shard walk "$bin" SHARD_NETWORK__MAX_PER_IP=4096 SHARD_NETWORK__PING_RATE=0 \
    SHARD_NETWORK__CONNECT_RATE=0 SHARD_NETWORK__MAX_CONNECTIONS=2000 \
    SHARD_NETWORK__MAX_PRELOGIN=2000
duration=$((5 + 5 + look + 2 + look + 2 + look / 2 + 5))
"$bin" loadgen --connect "127.0.0.1:$port" --connections 500 --duration "${duration}s" \
    --mode walk --ramp 5s >"$work/loadgen.out" 2>&1 &
loadgen=$!
sleep 10

echo "-- 1. clean window, ${look}s"
lines0=$(wc -l <"$log")
clean_from=$(date +%s)
c0=$(loop_ns); t0=$(date +%s%N)
sleep "$look"
c1=$(loop_ns); t1=$(date +%s%N)
clean_to=$(date +%s)
awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) \
    'BEGIN { printf "    loop thread CPU: %.1f%% of a core\n", 100 * c / t }'
tail -n +"$((lines0 + 1))" "$log" | grep -o 'loop: .*' | sed 's/^/    /' || true
sleep 2

echo "-- 2. perf record -g on the loop thread, ${look}s"
perf record -q -g -e cpu-clock -t "$spid" -o "$work/perf.data" -- sleep "$look" 2>/dev/null
echo "   by symbol (self time, top 25):"
perf report -i "$work/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^ +[0-9]' | awk 'NR <= 25' | sed 's/^/    /'
echo "   by DSO:"
perf report -i "$work/perf.data" --no-children --sort dso --stdio 2>/dev/null \
    | grep -E '^ +[0-9]' | awk 'NR <= 10' | sed 's/^/    /'
sleep 2

echo "-- 3. perf trace -s on the process, $((look / 2))s"
perf trace -s -p "$spid" -o "$work/trace.txt" -- sleep "$((look / 2))" 2>/dev/null || true
grep -vE '^\s*$' "$work/trace.txt" | sed 's/^/    /' | awk 'NR <= 80'

wait "$loadgen" || true
echo "-- loadgen"
sed 's/^/    /' "$work/loadgen.out"

echo "-- 4. loopstats csv, rows of the clean window ($clean_from..$clean_to)"
console "loopstats csv $work/walk.csv"
for _ in $(seq 100); do [[ -s $work/walk.csv ]] && break; sleep 0.1; done
sleep 0.5
awk -F, -v from="$clean_from" -v to="$clean_to" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["unix_s"] >= from && $col["unix_s"] < to {
        rows++; wall += $col["wall_us"]; iters += $col["iterations"]
        for (k in col) if (k ~ /_us$/ && k != "wall_us") sum[k] += $col[k]
    }
    END {
        if (!rows) { print "    no rows in the clean window"; exit }
        printf "    %d rows, %.0f iterations/s\n", rows, iters / rows
        n = split("timers_us network_us tasks_us posted_us deltas_us flush_us save_us sleep_us stolen_us", p, " ")
        for (i = 1; i <= n; i++)
            printf "    %-10s %6.2f%% of wall, %8.0f us/s\n", p[i], 100 * sum[p[i]] / wall, sum[p[i]] / rows
    }' "$work/walk.csv"
echo "== done, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
stop_shard
