#!/usr/bin/env bash
# The fan-out's worst case, live: 1,000 bots on one spot spending their move burst, and a real
# player walking beside them.
#
#   scripts/measure-crowd.sh [rounds] [seconds] [say]        (defaults: 1 30 1)
#
# Loopback only, bounded in time (about 1 min per round at 30 s). Each round starts a shard
# (default world and limits: max_connections 1024, max_per_ip 16), then
#   - the crowd: `loadgen --mode crowd --connections 1000 --ramp 5s --say SAY` from
#     127.0.0.2-127.0.0.99 (10-11 bots per address, under max_per_ip and the connect rate's
#     burst): each bot logs in within one 16-tile square and every 2 s writes its 20 moves
#     and SAY lines of speech in one write, so every move and line goes to 999 others;
#   - the player, once the crowd's ramp is over: `loadgen --mode walk --connections 1
#     --in-crowd` from 127.0.0.1, logged in within the crowd's square (so it gets every
#     bot's moves and speech), moving every 250 ms and timing each move.
# Figures: from the shard's `loop:` lines over the player's window (the first dropped): the
# longest iteration (max of windows), late ticks and ticks late >= 2 ticks (sums), the wheel
# lag peak (max), loop cpu (median); from the loop profile's CSV (`loopstats csv`), the mean
# ms per second in the Network, Deltas and Flush phases and stolen (runnable but off the
# CPU), and the seconds whose longest iteration passed 16 ms; the crowd's report (bots closed by the server, packets
# read); the player's (connected, errors, move RTT p50/p99); `netstats` at the end (the
# shard's disconnects by cause).
#
# Builds nothing: run `cargo build --release` first (or point SHARDLOOP_BIN at a binary).
set -euo pipefail

rounds=${1:-1}
seconds=${2:-30}
say=${3:-1}
bin=${SHARDLOOP_BIN:-target/release/shardloop}
port=${PORT:-26300}

# shellcheck source=scripts/shard-session.sh
source "$(dirname "$0")/shard-session.sh"
begin_session bin

loadgen() {
    timeout -k 5 $((seconds + 60)) "$bin" loadgen --connect "127.0.0.1:$port" "$@" || true
}

# sum_of / max_of SED_EXPR LINES: the sum / max (ms) of what SED_EXPR extracts from each line.
sum_of() { sed -nE "$1" <<<"$2" | awk '{ n += $1 } END { print n + 0 }'; }
max_ms_of() {
    local max=0 v
    while IFS= read -r v; do
        v=$(to_ms "$v")
        max=$(awk -v a="$max" -v b="$v" 'BEGIN { print (b > a) ? b : a }')
    done < <(sed -nE "$1" <<<"$2")
    echo "$max"
}

for round in $(seq "$rounds"); do
    echo "== round $round: 1000 crowd bots (--say $say) and a walking player (${seconds}s)"
    echo "   load: $(cut -d' ' -f1-3 /proc/loadavg)"
    start_shard "crowd-$round" "$bin"
    loadgen --mode crowd --connections 1000 --ramp 5s --duration "$((seconds + 2))s" \
        --say "$say" --source-range 127.0.0.2-127.0.0.99 >"$work/bots-$round" 2>&1 &
    crowd=$!
    sleep 6
    from=$(wc -l <"$log")
    loadgen --mode walk --connections 1 --in-crowd --ramp 0s --duration "${seconds}s" \
        >"$work/player-$round"
    to=$(wc -l <"$log")
    wait "$crowd" || true
    lines=$(sed -n "$((from + 1)),${to}p" "$log" | grep -o 'loop: .*' | tail -n +2 || true)
    echo "  loop: lines (first dropped):"
    sed 's/^/    /' <<<"$lines"
    record longest_iteration_ms "$(max_ms_of 's/.*longest iteration ([^ |]+).*/\1/p' "$lines")"
    record wheel_lag_peak_ms "$(max_ms_of 's/.*wheel lag peak ([^ |]+).*/\1/p' "$lines")"
    record late_ticks "$(sum_of 's/.*late ticks ([0-9]+) \(>=2.*/\1/p' "$lines")"
    record very_late_ticks "$(sum_of 's/.*\(>=2 ticks ([0-9]+)\).*/\1/p' "$lines")"
    record loop_cpu "$(sed -nE 's/^loop: cpu ([0-9.]+)%.*/\1/p' <<<"$lines" | sort -g |
        awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')"
    echo "  crowd:"
    sed 's/^/    /' "$work/bots-$round"
    record crowd_made "$(sed -nE 's/^  connects attempted [0-9]+  made ([0-9]+) .*/\1/p' "$work/bots-$round")"
    record crowd_closed "$(sed -nE 's/^  closed by the server ([0-9]+) .*/\1/p' "$work/bots-$round")"
    record crowd_packets_read "$(sed -nE 's/.*received ([0-9]+) packets.*/\1/p' "$work/bots-$round")"
    echo "  player:"
    sed 's/^/    /' "$work/player-$round"
    record player_connected "$(sed -nE 's/^loadgen: [a-z-]+, ([0-9]+)\/.*/\1/p' "$work/player-$round")"
    record player_errors "$(sed -nE 's/^  errors ([0-9]+).*/\1/p' "$work/player-$round")"
    record player_rtt_p50_ms "$(to_ms "$(sed -nE 's/.*rtt p50 (.+)  p99 .*/\1/p' "$work/player-$round")")"
    record player_rtt_p99_ms "$(to_ms "$(sed -nE 's/.*rtt p50 .+  p99 (.+)  max .*/\1/p' "$work/player-$round")")"
    # Where the loop's time went over the player's window: the loop profile's last $seconds
    # seconds (docs/loopstats-csv.md), mean ms per second of each phase that matters here and
    # of time stolen (runnable, off the CPU), and the seconds whose longest iteration passed
    # 16 ms.
    csv=$work/crowd-$round.csv
    console "loopstats csv $csv"
    for _ in $(seq 100); do [[ -s $csv ]] && break; sleep 0.1; done
    sleep 0.5
    if [[ -s $csv ]]; then
        phases=$(tail -n "$seconds" "$csv" | awk -F, -v hdr="$(head -n 1 "$csv")" '
            BEGIN { n = split(hdr, h, ","); for (i = 1; i <= n; i++) col[h[i]] = i }
            { for (k in want) sum[k] += $col[k]; rows++
              if ($col["longest_iteration_us"] > 16000) over++ }
            BEGIN { split("network_us deltas_us flush_us stolen_us", w, " "); for (i in w) want[w[i]] = 1 }
            END { printf "%.1f %.1f %.1f %.1f %d", sum["network_us"] / rows / 1000,
                  sum["deltas_us"] / rows / 1000, sum["flush_us"] / rows / 1000,
                  sum["stolen_us"] / rows / 1000, over }')
        read -r net_ms deltas_ms flush_ms stolen_ms over16 <<<"$phases"
        echo "  loop profile, last ${seconds} s: ms per second network $net_ms deltas $deltas_ms flush $flush_ms stolen $stolen_ms; seconds with an iteration over 16 ms: $over16"
        record network_ms_per_s "$net_ms"
        record deltas_ms_per_s "$deltas_ms"
        record flush_ms_per_s "$flush_ms"
        record stolen_ms_per_s "$stolen_ms"
        record seconds_over_16ms "$over16"
    fi
    console netstats
    sleep 1
    echo "  netstats:"
    tail -n 8 "$out" | sed 's/^/    /'
    stop_shard
    echo "  shutdown: exit $rc"
done

echo
echo "== summary: median over $rounds round(s) (every round's value in brackets)"
for k in $(awk '{ print $1 }' "$results" | awk '!seen[$0]++'); do
    printf '  %-22s %10s  [%s]\n' "$k" "$(med "$k")" "$(each "$k")"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
