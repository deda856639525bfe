#!/usr/bin/env bash
# The shard facing hostile clients, each figure against its quiet baseline in the same run.
#
#   scripts/measure-hostile.sh [rounds] [seconds]        (defaults: 1 20)
#
# Loopback only, bounded in time (about 2 min per round at 20 s windows; every process has a
# timeout and the EXIT trap stops what is left). Each round:
#
# A. One shard, the default world and the default limits (max_per_ip 16, ping/move/speech
#    rates), except network.login_timeout = 5s so that idle sockets are timed out inside the
#    attack window (the default 30 s is longer than the window; the one real player logs in
#    within milliseconds, so this changes nothing for it).
#    - quiet:   a real player, `loadgen --mode walk --connections 1 --ramp 0s` from 127.0.0.1
#               (logs in, moves every 250 ms, well under move_rate 10/s: a ping-mode client
#               pings flat out and would be held to ping_rate 4/s); a console `save` halfway.
#    - hostile: the same player, started 3 s after 2000 hostile sockets from 127.0.0.2-.9
#               (500 each of idle, ping-only, slow-reader, churn; four loadgen processes, each
#               `--source-range 127.0.0.2-127.0.0.9`), and the same `save` halfway. The idle,
#               ping-only and slow-reader clients connect again whenever the server closes
#               them (loadgen's default; HOSTILE_NO_RECONNECT=1 gives the runs before
#               reconnects existed), and churn counts the refusals it provoked by class.
#    Figures: the player's setup (connect + login: loadgen's "setup" with 1 client and no
#    ramp), move RTT p50/p99 and errors; the loop's cpu and wheel lag (its `loop:` lines,
#    every 5 s, the first line of each window dropped as it straddles the previous one); the
#    loop thread's own CPU over the window (its schedstat) and the connects the server
#    accepted and refused in it (`netstats` before and after); peak VmRSS over the window;
#    `netstats` at the end of each window; "world saved" lines and the window's save's loop
#    stall (its `loop_stall`, target ≤ 4 ms under attack); the attackers' reports
#    (reconnects; churn's refusals: closed at once, refused, unanswered); and the final save
#    and exit code at SIGTERM.
# B. One shard, default limits. 200 walkers from 127.0.1.1-127.0.1.16 (12-13 per address,
#    under max_per_ip 16), then the same with 20 `move-flood` bots from the same addresses
#    (at most 15 per address), relaunched in waves with --no-reconnect (as measured before
#    loadgen reconnected). Figures: walkers' RTT p99, errors (a walker closed by the server
#    counts as an error), loop cpu.
#
# Not run here: the fan-out crowd (scripts/measure-crowd.sh: 1000 bots on one spot spending
# their move burst, a player among them) and partial packets, `--mode trickle --connections 16` against `--mode ping-only
# --connections 16 --interval 10ms` (the same bytes as whole pings).
#
# Builds nothing: run `cargo build --release` first (or point SHARDLOOP_BIN at a binary).
set -euo pipefail

rounds=${1:-1}
seconds=${2:-20}
bin=${SHARDLOOP_BIN:-target/release/shardloop}
port=${PORT:-26200}

# shellcheck source=scripts/shard-session.sh
source "$(dirname "$0")/shard-session.sh"
begin_session bin
# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

# loadgen ARGS...: loadgen against the shard, bounded in time.
loadgen() {
    timeout -k 5 $((seconds + 60)) "$bin" loadgen --connect "127.0.0.1:$port" "$@" || true
}

# loop_figures FROM_LINE: the loop: lines after line FROM_LINE of $log, the first dropped;
# prints "cpu_median p99_max peak_max p99_median longest_max" (cpu in %, lags and the longest
# iteration in ms).
loop_figures() {
    local lines
    lines=$(tail -n +"$(($1 + 1))" "$log" | grep -o 'loop: .*' | tail -n +2 || true)
    if [[ -z "$lines" ]]; then
        echo "nan nan nan nan nan"
        return
    fi
    local cpus=() p99s=() p99=0 peak=0 longest=0 l c p k i
    while IFS= read -r l; do
        c=$(sed -E 's/^loop: cpu ([0-9.]+)%.*/\1/' <<<"$l")
        cpus+=("$c")
        p=$(to_ms "$(sed -E 's/.*p99<=([^ |]+).*/\1/' <<<"$l")")
        k=$(to_ms "$(sed -E 's/.*wheel lag peak ([^ |]+).*/\1/' <<<"$l")")
        i=$(to_ms "$(sed -nE 's/.*longest iteration ([^ |]+).*/\1/p' <<<"$l")")
        longest=$(awk -v a="$longest" -v b="${i:-0}" 'BEGIN { print (b > a) ? b : a }')
        p99s+=("$p")
        p99=$(awk -v a="$p99" -v b="$p" 'BEGIN { print (b > a) ? b : a }')
        peak=$(awk -v a="$peak" -v b="$k" 'BEGIN { print (b > a) ? b : a }')
    done <<<"$lines"
    local median='{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    echo "$(printf '%s\n' "${cpus[@]}" | sort -g | awk "$median") $p99 $peak $(printf '%s\n' "${p99s[@]}" | sort -g | awk "$median") $longest"
    sed 's/^/    /' <<<"$lines" >&2
}

# rss_watch FILE: samples the shard's VmRSS (kB) every 0.5 s into FILE until killed.
rss_watch() {
    while kill -0 "$spid" 2>/dev/null; do
        awk '/^VmRSS/ { print $2 }' "/proc/$spid/status" >>"$1" 2>/dev/null || true
        sleep 0.5
    done
}

# player_figures REPORT PREFIX: records setup, rtt p50/p99, errors of a walk report.
player_figures() {
    local r=$1 p=$2
    record "$p.setup_ms" "$(to_ms "$(sed -nE 's/.*\(setup ([^)]+)\).*/\1/p' "$r")")"
    record "$p.rtt_p50_ms" "$(to_ms "$(sed -nE 's/.*rtt p50 (.+)  p99 .*/\1/p' "$r")")"
    record "$p.rtt_p99_ms" "$(to_ms "$(sed -nE 's/.*rtt p50 .+  p99 (.+)  max .*/\1/p' "$r")")"
    record "$p.errors" "$(sed -nE 's/^  errors ([0-9]+).*/\1/p' "$r")"
    record "$p.connected" "$(sed -nE 's/^loadgen: [a-z-]+, ([0-9]+)\/.*/\1/p' "$r")"
}

# attacker_figures REPORT PREFIX: records a hostile loadgen's connects made and, as the mode
# reports them, its reconnects or (churn) the refusals it provoked by class.
attacker_figures() {
    local r=$1 p=$2
    record "$p.made" "$(sed -nE 's/^  connects attempted [0-9]+  made ([0-9]+) .*/\1/p' "$r")"
    record "$p.closed_by_server" "$(sed -nE 's/^  closed by the server ([0-9]+) .*/\1/p' "$r")"
    if grep -q '^  refusals provoked' "$r"; then
        record "$p.refusals" "$(sed -nE 's/^  refusals provoked ([0-9]+):.*/\1/p' "$r")"
        record "$p.closed_at_once" "$(sed -nE 's/.*closed at once ([0-9]+) .*/\1/p' "$r")"
        record "$p.refused" "$(sed -nE 's/.*\)  refused ([0-9]+)  unanswered.*/\1/p' "$r")"
        record "$p.unanswered" "$(sed -nE 's/.*  unanswered ([0-9]+)$/\1/p' "$r")"
    else
        record "$p.reconnects" "$(sed -nE 's/^  reconnects ([0-9]+)$/\1/p' "$r")"
    fi
}

# window NAME: one measured window of scenario A on the running shard ($hostile = 1 with the
# attack). Prints the reports; records the figures.
window_a() {
    local name=$1 from rss before_saved a0 r0 a1 r1 c0 c1 t0 t1
    rss=$work/$name.rss
    from=$(wc -l <"$log")
    before_saved=$(grep -c 'world saved' "$log" || true)
    : >"$rss"
    rss_watch "$rss" &
    local watcher=$!
    read -r a0 r0 <<<"$(connects)"
    c0=$(loop_ns)
    t0=$(date +%s%N)
    loadgen --mode walk --connections 1 --ramp 0s --duration "${seconds}s" >"$work/$name.player" &
    local player=$!
    sleep $((seconds / 2))
    console save
    wait "$player" || true
    c1=$(loop_ns)
    t1=$(date +%s%N)
    read -r a1 r1 <<<"$(connects)"
    record "A.$name.loop_thread_cpu" "$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", 100 * c / t }')"
    record "A.$name.accepted_per_s" "$(awk -v n=$((a1 - a0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", n * 1e9 / t }')"
    record "A.$name.refused_per_s" "$(awk -v n=$((r1 - r0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", n * 1e9 / t }')"
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    echo "  player ($name):"
    sed 's/^/    /' "$work/$name.player"
    player_figures "$work/$name.player" "A.$name"
    echo "  loop: lines ($name, first dropped; log lines $from..$(wc -l <"$log")):"
    local c p k m li
    read -r c p k m li <<<"$(loop_figures "$from" 2>/dev/null)"
    tail -n +"$((from + 1))" "$log" | grep -o 'loop: .*' | tail -n +2 | sed 's/^/    /' || true
    record "A.$name.loop_cpu" "$c"
    record "A.$name.lag_p99_ms" "$p"
    record "A.$name.lag_peak_ms" "$k"
    record "A.$name.lag_p99_median_ms" "$m"
    record "A.$name.longest_iteration_ms" "$li"
    record "A.$name.rss_mb" "$(sort -n "$rss" | tail -1 | awk '{ printf "%.0f", $1 / 1024 }')"
    # Wait for the save asked halfway to finish (it takes a few seconds on the default world).
    for _ in $(seq 300); do
        (($(grep -c 'world saved' "$log" || true) > before_saved)) && break
        sleep 0.1
    done
    record "A.$name.saved" $(($(grep -c 'world saved' "$log" || true) - before_saved))
    # The window's save: how long it held the loop (issue 35's "save stall under scenario A").
    local stall
    stall=$(grep 'world saved' "$log" | tail -n +"$((before_saved + 1))" | head -1 |
        sed -nE 's/.*loop_stall=([^ ]+).*/\1/p')
    if [[ -n $stall ]]; then record "A.$name.save_stall_ms" "$(to_ms "$stall")"; fi
    console netstats
    sleep 1
    echo "  netstats ($name):"
    tail -n 6 "$out" | sed 's/^/    /'
}

for round in $(seq "$rounds"); do
    echo "== round $round: A, one player, quiet then facing 2000 hostile sockets (${seconds}s windows)"
    echo "   load: $(cut -d' ' -f1-3 /proc/loadavg)"
    start_shard "a-$round" "$bin" SHARD_NETWORK__LOGIN_TIMEOUT=5s
    window_a quiet
    attack_for=$((seconds + 6))
    attackers=()
    for mode in idle ping-only slow-reader churn; do
        # shellcheck disable=SC2046 # no flag, or one
        loadgen --mode "$mode" --connections 500 --ramp 2s --duration "${attack_for}s" \
            --source-range 127.0.0.2-127.0.0.9 $([[ -n ${HOSTILE_NO_RECONNECT:-} && $mode != churn ]] && echo --no-reconnect) \
            >"$work/attack-$mode-$round" 2>&1 &
        attackers+=($!)
    done
    sleep 3
    window_a hostile
    for a in "${attackers[@]}"; do wait "$a" || true; done
    for mode in idle ping-only slow-reader churn; do
        echo "  attacker $mode:"
        sed 's/^/    /' "$work/attack-$mode-$round"
        attacker_figures "$work/attack-$mode-$round" "A.attack.$mode"
    done
    console netstats
    sleep 1
    echo "  netstats after the attack:"
    tail -n 6 "$out" | sed 's/^/    /'
    saved_before=$(grep -c 'world saved' "$log" || true)
    stop_shard
    record A.exit_code "$rc"
    record A.final_save $(($(grep -c 'world saved' "$log" || true) - saved_before))
    echo "  shutdown: exit $rc, final save logged: $(($(grep -c 'world saved' "$log" || true) - saved_before))"
    grep -E 'churn: connections in the last second' "$log" | tail -2 | sed 's/^/    /' || true

    echo "== round $round: B, 200 walkers, then with 20 move-flood bots among them (${seconds}s)"
    echo "   load: $(cut -d' ' -f1-3 /proc/loadavg)"
    start_shard "b-$round" "$bin"
    for phase in quiet flood; do
        if [[ $phase == flood ]]; then
            # The shard disconnects a move-flood bot within about a millisecond ("flood"), and
            # loadgen does not reconnect it: so the 20 bots are relaunched, a wave every
            # ~0.5 s, for the whole walkers' run (ramp included), as an attacker would.
            (
                end=$((SECONDS + seconds + 8))
                while ((SECONDS < end)); do
                    loadgen --mode move-flood --connections 20 --ramp 0s --duration 1s \
                        --source-range 127.0.1.1-127.0.1.16 --no-reconnect \
                        >>"$work/flood-$round" 2>&1
                    sleep 0.5
                done
            ) &
            flood=$!
            sleep 1
        fi
        from=$(wc -l <"$log")
        cpu0=$(cpu_ns "$spid")
        t0=$(date +%s%N)
        loadgen --mode walk --connections 200 --ramp 5s --duration "${seconds}s" \
            --source-range 127.0.1.1-127.0.1.16 >"$work/walk-$phase-$round"
        cpu1=$(cpu_ns "$spid")
        t1=$(date +%s%N)
        echo "  walkers ($phase):"
        sed 's/^/    /' "$work/walk-$phase-$round"
        player_figures "$work/walk-$phase-$round" "B.$phase"
        read -r c p k m li <<<"$(loop_figures "$from" 2>/dev/null)"
        echo "  loop: lines ($phase, first dropped):"
        tail -n +"$((from + 1))" "$log" | grep -o 'loop: .*' | tail -n +2 | sed 's/^/    /' || true
        record "B.$phase.loop_cpu" "$c"
        record "B.$phase.lag_p99_ms" "$p"
        record "B.$phase.proc_cpu" "$(awk -v c=$((cpu1 - cpu0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.1f", 100 * c / t }')"
        if [[ $phase == flood ]]; then
            wait "$flood" || true
            echo "  move-flood bots: $(grep -c '^loadgen: move-flood' "$work/flood-$round") waves of 20; the last:"
            grep -A7 '^loadgen: move-flood' "$work/flood-$round" | tail -8 | sed 's/^/    /'
            echo "    closed by the server over all waves: $(awk '/closed by the server/ { n += $5 } END { print n }' "$work/flood-$round")"
        fi
    done
    console netstats
    sleep 1
    echo "  netstats:"
    tail -n 6 "$out" | sed 's/^/    /'
    stop_shard
    echo "  shutdown: exit $rc"
done

# Summary: the median over rounds of each figure (med, each: shard-session.sh).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
verdict() {
    awk -v v="$1" -v t="$2" 'BEGIN {
        if (v == "n/a" || v == "nan" || v == "") print "not measured"
        else print (v + 0 <= t + 0) ? "met" : "NOT met" }'
}

echo
echo "== summary: median over $rounds round(s), ${seconds}s windows"
printf '%-48s %10s %10s %8s  %s\n' figure quiet hostile ratio target
row() { # label quiet hostile target_ratio|"" abs_target|""
    local r v=""
    r=$(ratio "$3" "$2")
    if [[ -n $4 ]]; then v="≤ $4×: $(verdict "$r" "$4")"; fi
    if [[ -n ${5:-} ]]; then v="≤ $5: $(verdict "$3" "$5")"; fi
    printf '%-48s %10s %10s %8s  %s\n' "$1" "$2" "$3" "$r" "$v"
}
row "A player setup (connect+login), ms" "$(med A.quiet.setup_ms)" "$(med A.hostile.setup_ms)" "" 1000
row "A player move RTT p50, ms" "$(med A.quiet.rtt_p50_ms)" "$(med A.hostile.rtt_p50_ms)" "" ""
row "A player move RTT p99 (≈ max: 4 moves/s), ms" "$(med A.quiet.rtt_p99_ms)" "$(med A.hostile.rtt_p99_ms)" 2 ""
row "A player errors" "$(med A.quiet.errors)" "$(med A.hostile.errors)" "" 0
row "A loop wheel lag p99 (max of windows), ms" "$(med A.quiet.lag_p99_ms)" "$(med A.hostile.lag_p99_ms)" "" 2
row "A loop wheel lag p99 (median of windows), ms" "$(med A.quiet.lag_p99_median_ms)" "$(med A.hostile.lag_p99_median_ms)" "" 2
row "A loop wheel lag peak, ms" "$(med A.quiet.lag_peak_ms)" "$(med A.hostile.lag_peak_ms)" "" ""
row "A loop longest iteration (max of windows), ms" "$(med A.quiet.longest_iteration_ms)" "$(med A.hostile.longest_iteration_ms)" "" ""
row "A loop cpu (median of windows), %" "$(med A.quiet.loop_cpu)" "$(med A.hostile.loop_cpu)" "" ""
row "A loop thread cpu over the window, %" "$(med A.quiet.loop_thread_cpu)" "$(med A.hostile.loop_thread_cpu)" "" ""
extra=$(awk -v h="$(med A.hostile.loop_thread_cpu)" -v q="$(med A.quiet.loop_thread_cpu)" 'BEGIN { printf "%.2f", h - q }')
printf '%-48s %10s %10s %8s  %s\n' "A loop thread cpu the attack added, %" "" "$extra" "" "≤ 10 (bounds refused connects' share): $(verdict "$extra" 10)"
row "A connects refused by the server, /s" "$(med A.quiet.refused_per_s)" "$(med A.hostile.refused_per_s)" "" ""
row "A connects accepted by the server, /s" "$(med A.quiet.accepted_per_s)" "$(med A.hostile.accepted_per_s)" "" ""
echo "A attackers (median over rounds): churn made $(med A.attack.churn.made), refusals provoked $(med A.attack.churn.refusals) (closed at once $(med A.attack.churn.closed_at_once), refused $(med A.attack.churn.refused), unanswered $(med A.attack.churn.unanswered)); reconnects: idle $(med A.attack.idle.reconnects), ping-only $(med A.attack.ping-only.reconnects), slow-reader $(med A.attack.slow-reader.reconnects)"
row "A peak VmRSS, MB" "$(med A.quiet.rss_mb)" "$(med A.hostile.rss_mb)" 2 ""
row "A saves logged during the window" "$(med A.quiet.saved)" "$(med A.hostile.saved)" "" ""
row "A save loop stall (the window's save), ms" "$(med A.quiet.save_stall_ms)" "$(med A.hostile.save_stall_ms)" "" 4
echo "A final save at SIGTERM: $(med A.final_save) logged, exit code $(med A.exit_code)"
row "B walkers RTT p99, ms" "$(med B.quiet.rtt_p99_ms)" "$(med B.flood.rtt_p99_ms)" 2 ""
row "B walkers RTT p50, ms" "$(med B.quiet.rtt_p50_ms)" "$(med B.flood.rtt_p50_ms)" "" ""
row "B loop cpu (median of windows), %" "$(med B.quiet.loop_cpu)" "$(med B.flood.loop_cpu)" 1.5 ""
row "B shard process cpu over the run, %" "$(med B.quiet.proc_cpu)" "$(med B.flood.proc_cpu)" "" ""
row "B loop wheel lag p99 (max of windows), ms" "$(med B.quiet.lag_p99_ms)" "$(med B.flood.lag_p99_ms)" "" ""
row "B walkers connected (of 200)" "$(med B.quiet.connected)" "$(med B.flood.connected)" "" ""
row "B walkers errors (closed/failed)" "$(med B.quiet.errors)" "$(med B.flood.errors)" "" 0
echo
echo "every round's values:"
for k in $(awk '{ print $1 }' "$results" | awk '!seen[$0]++'); do
    printf '  %-28s %s\n' "$k" "$(each "$k")"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
