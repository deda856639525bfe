#!/usr/bin/env bash
# The metrics endpoint's figures (docs/performance.md, "Metrics (issue 21)").
#
#   scripts/measure-metrics.sh [rounds] [seconds]        (defaults: 3 20)
#
# 1. Scrape cost: the default world with 500 walking clients (loadgen), in alternating phases
#    of `seconds`: without scrapes, then with a real Prometheus scraping /metrics every second,
#    `rounds` times, in one run of one shard. Per phase: the loop thread's CPU (its schedstat)
#    and the wheel lag of the ticks fired in it (mean and p99, from the difference of
#    /metrics' histogram read at the start and the end of the phase — both kinds of phase read
#    it twice).
# 2. /metrics latency, idle and then with 1000 clients connected and pinging flat out: per
#    round 300 GETs of /metrics and 300 of /healthz, alternating, one after another (curl's
#    time_total); p50, p99 and max of each per round, and the median of the rounds of each.
#    /healthz never touches the loop's figures: it is the floor of this host at that moment.
#
# The ping clients never log in: the login and idle timeouts are lifted so that they stay
# connected through every round. MODE=latency skips part 1. It builds nothing: run `cargo build --release` first (or set SHARDLOOP_BIN). Needs curl and
# Debian's prometheus.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-20}
bin=$(realpath "${SHARDLOOP_BIN:-target/release/shardloop}")
port=${PORT:-26200}
mport=${METRICS_PORT:-26201}
pport=${PROMETHEUS_PORT:-26202}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

(cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_SERVER__LOOP_STATS_INTERVAL=0s \
    SHARD_NETWORK__MAX_PER_IP=4096 SHARD_NETWORK__PING_RATE=0 SHARD_NETWORK__CONNECT_RATE=0 \
    SHARD_NETWORK__MAX_PRELOGIN=1024 \
    SHARD_NETWORK__LOGIN_TIMEOUT=1h SHARD_NETWORK__IDLE_TIMEOUT=2h SHARD_AUTOSAVE__ENABLED=false \
    SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" SHARD_METRICS__LISTEN="127.0.0.1:$mport" \
    "$bin" </dev/null >/dev/null 2>"$work/shard.log") &
pid=$!
for _ in $(seq 600); do
    grep -q "shard ready" "$work/shard.log" 2>/dev/null && break
    sleep 0.1
done
grep -q "shard ready" "$work/shard.log" || { cat "$work/shard.log" >&2; exit 1; }

# The wheel lag histogram's buckets as "le count" lines, then "sum S" and "count N".
lag() {
    curl -s "http://127.0.0.1:$mport/metrics" | awk '
        /^shardloop_loop_wheel_lag_seconds_bucket/ { match($0, /le="[^"]*"/); print substr($0, RSTART + 4, RLENGTH - 5), $2 }
        /^shardloop_loop_wheel_lag_seconds_sum/ { print "sum", $2 }
        /^shardloop_loop_wheel_lag_seconds_count/ { print "count", $2 }'
}

# phase NAME: one phase of $seconds; prints loop CPU % and the lag of the ticks fired in it.
phase() {
    local name=$1 cpu0 cpu1
    lag >"$work/lag0"
    cpu0=$(read -r ns _ <"/proc/$pid/task/$pid/schedstat"; echo "$ns")
    sleep "$seconds"
    cpu1=$(read -r ns _ <"/proc/$pid/task/$pid/schedstat"; echo "$ns")
    lag >"$work/lag1"
    paste "$work/lag0" "$work/lag1" | awk -v name="$name" -v cpu=$((cpu1 - cpu0)) -v secs="$seconds" '
        $1 == "sum" { sum = $4 - $2; next }
        $1 == "count" { count = $4 - $2; next }
        { le[n] = $1; c[n] = $4 - $2; n++ }
        END {
            p99 = "-"; seen = 0
            for (i = 0; i < n; i++) { seen += c[i]; if (p99 == "-" && seen >= 0.99 * count) p99 = le[i] }
            printf "%-12s loop CPU %5.1f %%   fired ticks %7d   wheel lag mean %7.1f us   p99 <= %s s\n",
                name, cpu / secs / 1e7, count, (count ? sum / count * 1e6 : 0), p99
        }'
}

cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: shardloop
    static_configs: [{targets: ['127.0.0.1:$mport']}]
YML

if [ "${MODE:-all}" != latency ]; then
echo "== scrape cost: 500 walking clients, phases of ${seconds}s"
timeout $((2 * rounds * (seconds + 10) + 60)) "$bin" loadgen --connect "127.0.0.1:$port" \
    --connections 500 --duration $((2 * rounds * (seconds + 10) + 30))s --mode walk --ramp 5s \
    >"$work/walk.txt" &
walkers=$!
sleep 8
for round in $(seq "$rounds"); do
    phase "off-$round"
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb-$round" \
        --web.listen-address="127.0.0.1:$pport" >/dev/null 2>&1 &
    prom=$!
    sleep 3
    phase "scraped-$round"
    kill "$prom"; wait "$prom" 2>/dev/null || true
    sleep 2
done
kill "$walkers" 2>/dev/null || true
wait "$walkers" 2>/dev/null || true

fi

# latency NAME: one round of alternating GETs; prints a line per path.
latency() {
    local name=$1
    for _ in $(seq 300); do
        for path in metrics healthz; do
            printf '%s ' "$path"
            curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$mport/$path"
        done
    done | sort -k1,1 -k2,2n | awk -v name="$name" '
        { n[$1]++; t[$1, n[$1]] = $2 }
        END { for (p in n) printf "%-12s /%-8s GETs %d   p50 %6.2f ms   p99 %6.2f ms   max %6.2f ms\n", name, p, n[p],
            t[p, int(n[p] * 0.5)] * 1e3, t[p, int(n[p] * 0.99)] * 1e3, t[p, n[p]] * 1e3 }' | sort
}

# median FILE: the median over rounds of p50, p99 and max, per path.
median() {
    awk '{ p = $2; k = ++n[p]; p50[p, k] = $6; p99[p, k] = $9; mx[p, k] = $12 }
        function med(a, p, k,   i, j, v, tmp) {
            for (i = 1; i <= k; i++) v[i] = a[p, i]
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
            return v[int((k + 1) / 2)]
        }
        END { for (p in n) printf "median of %d  %-8s   p50 %6.2f ms   p99 %6.2f ms   max %6.2f ms\n", n[p], p,
            med(p50, p, n[p]), med(p99, p, n[p]), med(mx, p, n[p]) }' "$1" | sort
}

echo "== latency, idle ($rounds rounds)"
for round in $(seq "$rounds"); do latency "idle-$round"; done | tee "$work/idle.txt"
median "$work/idle.txt"

echo "== latency with 1000 clients pinging ($rounds rounds)"
"$bin" loadgen --connect "127.0.0.1:$port" --connections 1000 --duration $((60 * rounds + 30))s \
    --ramp 3s >"$work/ping.txt" &
pingers=$!
sleep 6
# connected: the clients connected now (from /metrics, so up to a second old).
connected() { curl -s "http://127.0.0.1:$mport/metrics" | awk '/^shardloop_net_connections / { print $2 }'; }
for round in $(seq "$rounds"); do
    echo "round $round: $(connected) clients connected before" >&2
    latency "1000-$round"
    echo "round $round: $(connected) clients connected after" >&2
done | tee "$work/busy.txt"
median "$work/busy.txt"
echo "loadgen:"; tail -n 5 "$work/ping.txt"
kill "$pingers" 2>/dev/null || true
wait "$pingers" 2>/dev/null || true
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
