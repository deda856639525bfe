#!/usr/bin/env bash
# The loop stall of world saves on the release binary, default world, quiet.
#
#   scripts/measure-saves.sh [saves] [gap_seconds]        (defaults: 21 1)
#
# Starts target/release/shardloop (or $SHARDLOOP_BIN) with the repository's configuration
# (config/shard.toml: the default world) in a temp data dir, listening on 127.0.0.1 only,
# autosave off, a `loop:` line every 5 s; sends `saves` console `save`s, each after the last
# one is logged and `gap_seconds` later; stops it with SIGTERM (its final save is not
# counted). Every process has a timeout, and the EXIT trap stops what is left and removes
# the temp dir (KEEP_WORK=1 keeps it).
#
# Prints each save's `loop_stall` (the `world saved` log line: the time the loop was held
# for the snapshot, the same figure as the shardloop_save_loop_stall_seconds histogram),
# their median, p99 (nearest rank) and max, the `loop:` lines' wheel-lag peaks over the
# run, and `uptime` before and after.
#
# Builds nothing: run `cargo build --release` first.
set -euo pipefail

saves=${1:-21}
gap=${2:-1}
bin=${SHARDLOOP_BIN:-target/release/shardloop}
port=${PORT:-26300}
config=$(realpath config/shard.toml)

# shellcheck source=scripts/shard-session.sh
source "$(dirname "$0")/shard-session.sh"
begin_session bin

echo "before: $(uptime)"
# The repository's configuration, where the shard looks for it (config/shard.toml under its
# working directory); start_shard's variables override its listener, autosave and probe.
mkdir -p "$work/quiet/config"
cp "$config" "$work/quiet/config/shard.toml"
start_shard quiet "$bin"
sleep 2
for i in $(seq "$saves"); do
    before=$(grep -c 'world saved' "$log" || true)
    console save
    for _ in $(seq 300); do
        (($(grep -c 'world saved' "$log" || true) > before)) && break
        sleep 0.1
    done
    if (($(grep -c 'world saved' "$log" || true) <= before)); then
        echo "measure-saves: save $i not logged within 30 s" >&2
        tail -20 "$log" >&2
        exit 1
    fi
    sleep "$gap"
done
stop_shard
echo "after:  $(uptime)"

stalls=$(grep 'world saved' "$log" | head -n "$saves" |
    sed -E 's/.*loop_stall=([^ ]+).*/\1/' | while read -r s; do to_ms "$s"; done)
echo "loop_stall of $saves saves (ms): $(tr '\n' ' ' <<<"$stalls")"
sort -g <<<"$stalls" | awk '{ a[NR] = $1 } END {
    r = int((NR * 99 + 99) / 100); if (r > NR) r = NR
    med = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
    printf "stall: median %.3f ms, p99 %.3f ms, max %.3f ms over %d saves\n", med, a[r], a[NR], NR }'
peaks=$(grep -o 'loop: .*' "$log" | sed -E 's/.*wheel lag peak ([^ |]+).*/\1/' |
    while read -r s; do to_ms "$s"; done | tr '\n' ' ')
echo "loop: lines' wheel-lag peaks (ms, one per 5 s): $peaks"
echo "shard exit code at SIGTERM: $rc"
