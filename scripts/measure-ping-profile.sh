#!/usr/bin/env bash
# Where a round trip's CPU goes (issue 35, item 2): 1,000 paced ping clients against the
# shard (epoll, or BACKEND=io_uring) and against examples/tokio_echo.rs, one after the other,
# each looked at the same way while the clients ping:
#
#   scripts/measure-ping-profile.sh [seconds-per-look]        (default 10)
#
#   1. clean window: the server's CPU over the window (all threads, from /proc) and the round
#      trips loadgen reports, so CPU per round trip;
#   2. `perf record -g -e cpu-clock` on the server's main thread (the loop thread; tokio_echo's
#      one runtime thread), top symbols by self time and by DSO;
#   3. `perf trace -s` on the process for the same length: syscalls by kind, divided by the
#      round trips made meanwhile (tracing slows each call a little, for both peers alike).
#
# After the looks, the samples of look 2 split by what any server must do and what it need
# not (`split_samples`): the TCP work of one read and one write on loopback (every sample
# with `tcp_sendmsg` or `tcp_recvmsg` on its stack, which includes the delivery to the client
# the kernel does inside the sender's `tcp_sendmsg`; other TCP/IP work the thread did, in
# softirqs or timers, apart) against the rest, by kind. Multiplied by the clean window's CPU
# per round trip, that is the floor a server cannot go under on loopback (issue 35, item 2).
#
# The clients never log in, so the login and idle timeouts are lifted (the run is longer than
# the default 30 s login timeout). Each client pings every INTERVAL (default 50ms: 20,000 round trips a second offered), so
# both servers do the same work. Loopback only; everything started here is stopped by the
# EXIT trap. It builds nothing: run `cargo build --release --bins --examples` first, or point
# SHARDLOOP_BIN / ECHO_BIN at binaries. KEEP_WORK=1 keeps perf.data and the traces.
set -euo pipefail

look=${1:-10}
interval=${INTERVAL:-50ms}
backend=${BACKEND:-epoll}
bin=$(realpath "${SHARDLOOP_BIN:-target/release/shardloop}")
echo_bin=$(realpath "${ECHO_BIN:-target/release/examples/tokio_echo}")
port=${PORT:-26500}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true;
      if [[ -n ${KEEP_WORK:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi' EXIT
command -v perf >/dev/null || { echo "measure-ping-profile: perf not found" >&2; exit 2; }
ulimit -n "$(ulimit -Hn)"
# shellcheck source=scripts/cpu-time.sh
source "$(dirname "$0")/cpu-time.sh"

# profile NAME PID: the three looks at server PID while loadgen runs (started by the caller).
profile() {
    local name=$1 server=$2 c0 c1 t0 t1
    echo "-- $name: 1. clean window, ${look}s (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    c0=$(cpu_ns "$server"); t0=$(date +%s%N)
    sleep "$look"
    c1=$(cpu_ns "$server"); t1=$(date +%s%N)
    awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) \
        'BEGIN { printf "    server CPU: %.1f%% of a core\n", 100 * c / t }'
    echo "$(((c1 - c0) / 1000)) $(((t1 - t0) / 1000))" >"$work/$name.window"
    echo "-- $name: 2. perf record -g on the main thread, ${look}s"
    perf record -q -g -e cpu-clock -t "$server" -o "$work/$name.perf" -- sleep "$look" \
        2>/dev/null
    perf report -i "$work/$name.perf" --no-children --sort symbol --stdio 2>/dev/null \
        | grep -E '^ +[0-9]' | awk 'NR <= 25' | sed 's/^/    /'
    echo "   by DSO:"
    perf report -i "$work/$name.perf" --no-children --sort dso --stdio 2>/dev/null \
        | grep -E '^ +[0-9]' | awk 'NR <= 6' | sed 's/^/    /'
    echo "-- $name: 3. perf trace -s on the process, ${look}s"
    perf trace -s -p "$server" -o "$work/$name.trace" -- sleep "$look" 2>/dev/null || true
    # Per round trip: each client has one ping in flight, so each answer is one write of its
    # own (`writev` on the shard, `sendto` in tokio_echo), counted here as the round trips.
    grep -E '^\s+[a-z_0-9]+\s+[0-9]+' "$work/$name.trace" | awk '{ n[$1] += $2; e[$1] += $3 }
        END { rt = n["writev"] + n["sendto"]; if (rt == 0) rt = 1
              for (k in n) printf "    %-16s %8d calls (%d errors), %6.0f/s, %5.2f per round trip\n",
                  k, n[k], e[k], n[k] / '"$look"', n[k] / rt }' |
        sort -k2 -n -r
}

# split_samples PERF_DATA: each sample of the thread, by the first rule its stack matches,
# in per cent of all samples.
split_samples() {
    perf script -i "$1" -F ip,sym,dso 2>/dev/null | awk '
        function kind(   i, all) {
            all = " "
            for (i = 0; i < n; i++) all = all sym[i] " "
            if (all ~ / tcp_sendmsg /) return "a. TCP: tcp_sendmsg (incl. delivery to the peer)"
            if (all ~ / tcp_recvmsg /) return "b. TCP: tcp_recvmsg"
            if (all ~ / (net_rx_action|tcp_v4_rcv|tcp_write_timer|tcp_delack_timer[a-z_]*) /)
                return "c. other TCP/IP (softirq, timers)"
            if (dso[0] !~ /kernel/) return "j. user space"
            if (sym[0] ~ /^(fget|__fget[a-z_]*|fdget[a-z_]*|fput|__fput[a-z_]*|fput_many|sock_from_file|io_file_get[a-z_]*)$/)
                return "d. file lookups (fget, fput, sock_from_file)"
            if (all ~ / (do_epoll_wait|ep_poll|__x64_sys_epoll_wait|ep_send_events) /) return "e. epoll_wait"
            if (all ~ / (schedule|__schedule|finish_task_switch[a-z_.0-9]*) /) return "f. scheduler (sleep, wake)"
            if (all ~ / (io_uring_enter|__do_sys_io_uring_enter|__x64_sys_io_uring_enter|tctx_task_work|io_submit_sqes) /)
                return "g. io_uring (not TCP)"
            if (all ~ / (__x64_sys_recvfrom|__sys_recvfrom|__x64_sys_sendto|__sys_sendto|__x64_sys_writev|do_writev|sock_sendmsg|sock_recvmsg) /)
                return "h. socket syscalls, around TCP"
            return "i. other kernel (syscall entry and exit, interrupts, timers)"
        }
        function flush() { if (n) { count[kind()]++; total++ } n = 0 }
        /^[ \t]*$/ { flush(); next }
        { sym[n] = $2; dso[n] = $NF; n++ }
        END {
            flush()
            for (k in count) printf "    %-60s %5.1f %%\n", k, 100 * count[k] / total
        }' | sort
}

# run NAME PID: loadgen for the three looks plus margins, then the looks' figures.
run() {
    local name=$1 server=$2 cpu wall rate
    "$bin" loadgen --connect "127.0.0.1:$port" --connections 1000 --interval "$interval" \
        --duration "$((3 * look + 12))s" --ramp 2s >"$work/$name.loadgen" 2>&1 &
    local loadgen=$!
    sleep 6
    profile "$name" "$server"
    wait "$loadgen" || true
    sed 's/^/    /' "$work/$name.loadgen"
    read -r cpu wall <"$work/$name.window"
    rate=$(grep -o 'round trips [0-9]* ([0-9.]*/s)' "$work/$name.loadgen" | tr -d '()/s' |
        awk '{ print $4 }')
    awk -v c="$cpu" -v w="$wall" -v r="${rate:-0}" 'BEGIN { if (r > 0)
        printf "    %s: clean window CPU per round trip %.2f us (at %.0f round trips/s)\n",
            "'"$name"'", c / (r * w / 1e6), r }'
    echo "   $name: the thread's samples (look 2), what any server does and the rest:"
    split_samples "$work/$name.perf"
}

echo "== $(date -u +%FT%TZ) 1000 ping clients every $interval; load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd "$work" && exec env SHARD_SERVER__PROBE_HOST=false SHARD_SERVER__LOOP_STATS_INTERVAL=5s \
    SHARD_AUTOSAVE__ENABLED=false SHARD_NETWORK__BACKEND="$backend" \
    SHARD_NETWORK__LOGIN_TIMEOUT=1h SHARD_NETWORK__IDLE_TIMEOUT=2h \
    SHARD_NETWORK__MAX_PER_IP=4096 SHARD_NETWORK__PING_RATE=0 SHARD_NETWORK__CONNECT_RATE=0 \
    SHARD_NETWORK__MAX_CONNECTIONS=2000 SHARD_NETWORK__MAX_PRELOGIN=2000 \
    SHARD_NETWORK__LISTEN="[\"127.0.0.1:$port\"]" "$bin" </dev/null >/dev/null 2>"$work/shard.log") &
shard=$!
for _ in $(seq 600); do grep -q "shard ready" "$work/shard.log" 2>/dev/null && break; sleep 0.1; done
grep -q "shard ready" "$work/shard.log" || { cat "$work/shard.log" >&2; exit 1; }
run "shard-$backend" "$shard"
kill -TERM "$shard"; wait "$shard" 2>/dev/null || true

"$echo_bin" "127.0.0.1:$port" >/dev/null &
echo_pid=$!
sleep 0.5
run tokio_echo "$echo_pid"
kill -TERM "$echo_pid"; wait "$echo_pid" 2>/dev/null || true
echo "== done, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
