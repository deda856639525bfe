# Sourced by the measure-* scripts: CPU time of a process from /proc.

# CPU time of every thread of process $1, in nanoseconds (first field of each schedstat).
cpu_ns() {
    local total=0 t
    for t in /proc/"$1"/task/*/schedstat; do
        read -r ns _ <"$t" || continue
        total=$((total + ns))
    done
    echo "$total"
}

# Time the main thread of process $1 (the shard's loop thread) spent runnable but not running,
# in nanoseconds (second field of its schedstat): the host's scheduler, not the loop, made it
# wait.
runqueue_wait_ns() {
    local _run wait
    read -r _run wait _ <"/proc/$1/task/$1/schedstat" || wait=0
    echo "$wait"
}

# CPU time the hypervisor took from this guest, all CPUs, in nanoseconds ("steal" in
# /proc/stat, in USER_HZ ticks).
steal_ns() {
    awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%.0f\n", $9 * 1e9 / hz }' /proc/stat
}
