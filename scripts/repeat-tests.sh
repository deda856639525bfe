#!/usr/bin/env bash
# Runs the whole test suite N times in a row (default 20) and reports how many runs passed,
# each run's wall time and the slowest test files (median and worst over the runs). A flaky
# test shows up here long before it fails a CI run.
#
#   scripts/repeat-tests.sh [RUNS] [extra cargo test args...]
#
# Logs of failed runs are kept under target/repeat-tests/. Never sets SHARDLOOP_ALLOW_SKIP:
# a test that cannot run here fails, as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20}
shift || true
out=target/repeat-tests
rm -rf "$out" && mkdir -p "$out"
unset SHARDLOOP_ALLOW_SKIP

echo "building the tests once" >&2
cargo test --locked --no-run "$@" >/dev/null 2>&1

passed=0
for ((i = 1; i <= runs; i++)); do
    log="$out/run-$i.log"
    start=$(date +%s%N)
    if cargo test --locked "$@" >"$log" 2>&1; then
        passed=$((passed + 1))
        verdict=pass
    else
        verdict=FAIL
    fi
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'run %2d: %s in %d.%d s\n' "$i" "$verdict" $((ms / 1000)) $((ms % 1000 / 100))
    # One line per test binary: "<file> <seconds>".
    awk '/^ *Running /{name=$2} /^ *Doc-tests /{name="doc-tests"}
         /^test result:/{for(k=1;k<=NF;k++) if($k=="in"){t=$(k+1); sub("s","",t); print name, t}}' \
        "$log" >"$out/times-$i.txt"
    [[ $verdict == pass ]] && rm "$log"
done

echo
echo "$passed of $runs runs passed"
echo
echo "slowest test files (seconds, over $runs runs): median, worst"
cat "$out"/times-*.txt | sort -k1,1 -k2,2n | awk '
    { t[$1] = t[$1] " " $2; n[$1]++ }
    END {
        for (f in t) {
            split(substr(t[f], 2), v, " ")
            printf "%8.2f %8.2f  %s\n", v[int((n[f] + 1) / 2)], v[n[f]], f
        }
    }' | sort -rn | head -8
[[ $passed == "$runs" ]]
