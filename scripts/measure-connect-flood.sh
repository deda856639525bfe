#!/usr/bin/env bash
# What a connect flood costs the loop: the loop thread's CPU while `loadgen --mode churn`
# connects and hangs up as fast as it can from 8 loopback addresses, and a real player's moves
# meanwhile, against a quiet window on the same shard.
#
#   scripts/measure-connect-flood.sh [rounds] [seconds]        (defaults: 3 20)
#
# SHARDLOOP_BIN (default target/release/shardloop) is the shard measured, twice a round: as
# configured by default ("after": a source connecting far over network.connect_rate is banned,
# and its connects are then dropped by the listener's kernel filter), and with
# network.connect_ban = "0s" ("noban": every connect over the rate is accepted and closed at
# once, the path every refusal takes). BEFORE_BIN, when set, is another commit's build, run in
# the same rounds, interleaved, with its default configuration ("before"). Nothing else is set
# but the listener, the status line, the probe and autosave; the attacker and the player are
# always SHARDLOOP_BIN's loadgen. Loopback only, bounded in time: every process has a timeout
# and the EXIT trap stops what is left. About (2 × seconds + 15) s per shard and round.
#
# Each round, for each binary: start the shard (default world, autosave off), then
#   - quiet:  the player alone, `loadgen --mode walk --connections 1` from 127.0.0.1 (logs in,
#             moves every 250 ms), for `seconds`;
#   - flood:  the same player while `loadgen --mode churn --connections 500 --source-range
#             127.0.0.2-127.0.0.9` connects and hangs up flat out, for `seconds`.
# Figures per window: the loop thread's CPU (the main thread's schedstat: the shard's loop)
# and the whole process's, as % of a core; the connects the server saw (accepted + refused,
# from `netstats` before and after) per second, and of them the refused; the loop's µs per
# connect; the connects the attacker made per second (a banned source's connects go
# unanswered, so few); the player's move RTT p50/p99. The attacker runs on the same cores as
# the shard: its CPU use slows the shard too.
#
# Builds nothing: run `cargo build --release` first.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-20}
bin=${SHARDLOOP_BIN:-target/release/shardloop}
before=${BEFORE_BIN:-}
port=${PORT:-26400}

# shellcheck source=scripts/shard-session.sh
source "$(dirname "$0")/shard-session.sh"
# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"
begin_session bin before

# window KEY FLOOD(0|1): one measured window; records KEY.* figures.
window() {
    local key=$1 flood=$2 a0 r0 a1 r1 c0 c1 p0 p1 t0 t1 attacker="" recorded
    recorded=$(wc -l <"$results")
    if ((flood)); then
        timeout -k 5 $((seconds + 30)) "$bin" loadgen --connect "127.0.0.1:$port" --mode churn \
            --connections 500 --ramp 1s --duration "$((seconds + 3))s" \
            --source-range 127.0.0.2-127.0.0.9 >"$work/$key.attack" 2>&1 &
        attacker=$!
        sleep 2
    fi
    read -r a0 r0 <<<"$(connects)"
    c0=$(loop_ns)
    p0=$(cpu_ns "$spid")
    t0=$(date +%s%N)
    timeout -k 5 $((seconds + 30)) "$bin" loadgen --connect "127.0.0.1:$port" --mode walk \
        --connections 1 --ramp 0s --duration "${seconds}s" >"$work/$key.player" 2>&1 || true
    c1=$(loop_ns)
    p1=$(cpu_ns "$spid")
    t1=$(date +%s%N)
    read -r a1 r1 <<<"$(connects)"
    if [[ -n $attacker ]]; then wait "$attacker" || true; fi
    local secs conns
    secs=$(awk -v t=$((t1 - t0)) 'BEGIN { print t / 1e9 }')
    conns=$((a1 - a0 + r1 - r0))
    record "$key.loop_cpu" "$(awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", 100 * c / t }')"
    record "$key.process_cpu" "$(awk -v c=$((p1 - p0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.2f", 100 * c / t }')"
    record "$key.connects_per_s" "$(awk -v n=$conns -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
    record "$key.refused_per_s" "$(awk -v n=$((r1 - r0)) -v s="$secs" 'BEGIN { printf "%.0f", n / s }')"
    # Per connect only where there were many: a quiet window's is the player's one connect.
    record "$key.us_per_connect" "$(awk -v c=$((c1 - c0)) -v n=$conns 'BEGIN { if (n >= 1000) printf "%.2f", c / n / 1000; else print "nan" }')"
    if ((flood)); then
        record "$key.attacker_made_per_s" "$(sed -nE 's/.*\(([0-9.]+) made\/s\).*/\1/p' "$work/$key.attack")"
    fi
    record "$key.rtt_p50_ms" "$(to_ms "$(sed -nE 's/.*rtt p50 (.+)  p99 .*/\1/p' "$work/$key.player")")"
    record "$key.rtt_p99_ms" "$(to_ms "$(sed -nE 's/.*rtt p50 .+  p99 (.+)  max .*/\1/p' "$work/$key.player")")"
    record "$key.player_errors" "$(sed -nE 's/^  errors ([0-9]+).*/\1/p' "$work/$key.player")"
    echo "  $key: $(tail -n +"$((recorded + 1))" "$results" | awk '{ sub(/^[^.]*\.[^.]*\./, "", $1); printf "%s=%s ", $1, $2 }')"
    if ((flood)); then
        sed 's/^/    attacker: /' "$work/$key.attack" | head -3
    fi
}

labels=(after noban)
if [[ -n $before ]]; then labels=(before after noban); fi
for round in $(seq "$rounds"); do
    for label in "${labels[@]}"; do
        shard=$bin
        settings=()
        if [[ $label == before ]]; then shard=$before; fi
        if [[ $label == noban ]]; then settings=(SHARD_NETWORK__CONNECT_BAN=0s); fi
        echo "== round $round, $label ($shard ${settings[*]}), load $(cut -d' ' -f1-3 /proc/loadavg)"
        start_shard "$label-$round" "$shard" "${settings[@]}"
        window "$label.quiet" 0
        window "$label.flood" 1
        echo netstats >&3
        sleep 1
        echo "  netstats after the flood:"
        tail -n 8 "$out" | sed 's/^/    /'
        stop_shard
    done
done

echo
echo "== summary: median over $rounds round(s), ${seconds}s windows"
printf '%-22s' figure
for label in "${labels[@]}"; do printf '%14s %14s' "$label quiet" "$label flood"; done
echo
figures=(loop_cpu process_cpu connects_per_s refused_per_s us_per_connect attacker_made_per_s
    rtt_p50_ms rtt_p99_ms player_errors)
for f in "${figures[@]}"; do
    printf '%-22s' "$f"
    for label in "${labels[@]}"; do
        for w in quiet flood; do printf '%14s' "$(med "$label.$w.$f")"; done
        printf ' '
    done
    echo
done
echo
echo "every round's values:"
for label in "${labels[@]}"; do
    for w in quiet flood; do
        for f in "${figures[@]}"; do
            if [[ -n $(each "$label.$w.$f") ]]; then
                printf '  %-36s %s\n' "$label.$w.$f" "$(each "$label.$w.$f")"
            fi
        done
    done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
