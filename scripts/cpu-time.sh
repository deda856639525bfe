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
