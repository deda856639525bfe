# Sourced by the measure-* scripts that drive a shard through its console (measure-hostile.sh,
# measure-connect-flood.sh, measure-crowd.sh, measure-saves.sh, measure-walkers.sh): the
# session's set-up, starting and stopping a shard, reading figures. The sourcing script sets
# $port, then calls begin_session (which sets $work and $results).

# cleanup: the EXIT trap: stops every background job, then removes $work unless KEEP_WORK is
# set.
cleanup() {
    local j
    for j in $(jobs -p); do kill "$j" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [[ -n ${KEEP_WORK:-} ]]; then echo "logs kept in $work" >&2; else rm -rf "$work"; fi
}

# begin_session [VAR ...]: the run's temp directory ($work) and figures file ($results), the
# EXIT trap, the descriptor limit raised to the hard one (a thousand clients need more than
# 1024), and each named variable's binary checked (exit 2 naming it when it is not built) and
# made absolute, as the shards run from their own directories. An empty variable is skipped
# (an optional binary that was not given).
begin_session() {
    work=$(mktemp -d)
    results=$work/results
    : >"$results"
    trap cleanup EXIT
    local name
    for name in "$@"; do
        local -n binary=$name
        if [[ -n $binary ]]; then
            if [[ ! -x $binary ]]; then
                echo "$(basename "$0"): $binary not found; run 'cargo build --release' first" >&2
                exit 2
            fi
            binary=$(realpath "$binary")
        fi
        unset -n binary
    done
    ulimit -n "$(ulimit -Hn)"
}

# record KEY VALUE: one figure of this round, for the summary.
record() { echo "$1 $2" >>"$results"; }

# start_shard NAME BIN [VAR=value ...]: starts BIN in its own data dir under $work with its
# console on fd 3 (a fifo), listening on 127.0.0.1:$port, the probe and autosave off, a
# `loop:` line every 5 s, and the settings given; waits for "shard ready". Sets $pid (the
# `timeout` around the shard), $spid (the shard), $log and $out.
start_shard() {
    local name=$1 shard=$2
    shift 2
    mkdir -p "$work/$name"
    log=$work/$name.log
    out=$work/$name.out
    rm -f "$work/console"
    mkfifo "$work/console"
    exec 3<>"$work/console"
    (cd "$work/$name" && exec env SHARD_SERVER__PROBE_HOST=false \
        SHARD_SERVER__LOOP_STATS_INTERVAL=5s SHARD_AUTOSAVE__ENABLED=false \
        SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" "$@" \
        timeout -k 10 900 "$shard" <"$work/console" >"$out" 2>"$log") &
    pid=$!
    for _ in $(seq 1200); do
        grep -q "shard ready" "$log" 2>/dev/null && break
        sleep 0.1
    done
    if ! grep -q "shard ready" "$log"; then
        echo "$(basename "$0"): $name never became ready" >&2
        cat "$log" >&2
        exit 1
    fi
    # The shard runs under `timeout` ($pid), its only child: the shard itself, for /proc and
    # signals.
    spid=$(pgrep -P "$pid")
}

console() { echo "$1" >&3; }

# stop_shard: SIGTERM (the final save), waits for it (the `timeout` around it bounds that);
# sets $rc to its exit code.
stop_shard() {
    rc=0
    kill -TERM "$spid" 2>/dev/null || true
    wait "$pid" || rc=$?
    exec 3>&-
}

# loop_ns: the loop thread's CPU time so far (the shard's main thread), in nanoseconds.
loop_ns() {
    local ns
    read -r ns _ <"/proc/$spid/task/$spid/schedstat"
    echo "$ns"
}

# connects: "ACCEPTED REFUSED" from a fresh `netstats` (every number on its `refused` line
# added up, so the older binary's shorter line reads the same way).
connects() {
    local lines
    lines=$(wc -l <"$out")
    echo netstats >&3
    for _ in $(seq 100); do
        (($(wc -l <"$out") > lines)) && tail -n +"$((lines + 1))" "$out" | grep -q '^traffic' && break
        sleep 0.05
    done
    tail -n +"$((lines + 1))" "$out" | awk '
        /^open / { for (i = 1; i < NF; i++) if ($(i + 1) == "accepted") a = $i }
        /^refused / { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) r += $i }
        END { print a + 0, r + 0 }'
}

# to_ms "1.5 ms" | "512 µs" | "1.234ms" | "12.000µs" | "0.000ns" | "1.00 s" -> milliseconds
to_ms() {
    awk -v v="$*" 'BEGIN {
        n = v; sub(/[^0-9.].*$/, "", n); u = v; sub(/^[0-9.]+ */, "", u)
        f = (u ~ /^ms/) ? 1 : (u ~ /^(µs|us)/) ? 1e-3 : (u ~ /^ns/) ? 1e-6 : (u ~ /^s/) ? 1000 : 1
        printf "%.3f\n", n * f }'
}

# med KEY: the median over rounds of a recorded figure ("nan" when none was numeric).
med() {
    awk -v k="$1" '$1 == k && $2 ~ /^[0-9.]+$/ { print $2 }' "$results" | sort -g |
        awk '{ a[NR] = $1 } END {
            if (NR == 0) print "nan"
            else if (NR % 2) print a[(NR + 1) / 2]
            else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# each KEY: every round's value, for the record.
each() { awk -v k="$1" '$1 == k { printf "%s%s", sep, $2; sep = "," }' "$results"; }
