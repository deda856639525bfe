#!/usr/bin/env bash
# Off-site uploads against boto3 (docs/performance.md, "Off-site archives (issue 34)").
#
#   scripts/measure-offsite.sh [rounds]        (default 6)
#
# 1. Builds `examples/offsite_upload.rs` (release) and prepares a day's archives of the
#    default world: 24 hourly, the day's, the month's (26 .tar.zst, ~1.7 MB each).
# 2. Starts a moto server on loopback (`moto_server`, as the tests do; `scripts/test`
#    installs it) and, `rounds` times in alternation, uploads the same 26 files:
#    - boto3: `upload_file` of each file in turn (boto3 comes with moto), to its own prefix;
#      (moto runs as SCHED_IDLE, standing in for a store on another machine);
#    - ours: the shard's uploader (sum, look-up, conditional PUT, look-up, mark, per archive)
#      on a loop running the demo world's timers and an 8 ms probe timer, whose wheel lag is
#      recorded during the upload and, for as long again, without one.
#    Each prints bytes, seconds and MB/s; ours also the probe's lag p50/p99/max both ways.
#    - the control: the same loop and probe (`watch`) in a process of their own while boto3
#      uploads for as long from another: what the upload itself costs this machine (moto's
#      and a client's CPU, the loopback's), apart from what our uploader costs the loop.
# 3. Ends with the median MB/s of each, and the probe's lag pooled over every round (p50,
#    p99, max) with and without an upload: the machine's own noise (other processes) falls
#    on both sides alike.
# Needs python3 with boto3 (moto's own dependency) and moto_server on PATH (or in the
# suite's virtual environment, ~/.cache/shardloop/venv).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-6}
venv=${SHARDLOOP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/shardloop/venv}
export PATH="$PATH:$venv/bin"
python=python3
command -v moto_server >/dev/null || { echo "moto_server not installed: scripts/test installs it" >&2; exit 1; }
# The Python that runs moto has boto3.
head -1 "$(command -v moto_server)" | grep -q python && python=$(head -1 "$(command -v moto_server)" | sed 's/^#!//')
"$python" -c 'import boto3' 2>/dev/null || python=python3

cargo build --release --quiet --example offsite_upload
bin=${CARGO_TARGET_DIR:-target}/release/examples/offsite_upload
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
"$bin" prepare "$work"

port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# As SCHED_IDLE (runs only on a core nothing else wants): the store stands in for one on
# another machine, whose CPU is not the shard's. Both clients talk to the same server.
chrt --idle 0 moto_server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
endpoint="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -s "$endpoint" >/dev/null 2>&1 && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=measure AWS_SECRET_ACCESS_KEY=measure AWS_DEFAULT_REGION=us-east-1
curl -s -X PUT "$endpoint/measure" >/dev/null

boto3_round() {
    "$python" - "$work/data/Archives" "$endpoint" "$1" "${2:-0}" <<'EOF'
import os, sys, time
import boto3
root, endpoint, prefix, busy = sys.argv[1:4] + [float(sys.argv[4])]
s3 = boto3.client("s3", endpoint_url=endpoint)
files = [(kind, name) for kind in ("Hourly", "Daily", "Monthly")
         for name in sorted(os.listdir(os.path.join(root, kind)))]
total = sum(os.path.getsize(os.path.join(root, k, n)) for k, n in files)
began = time.perf_counter()
for kind, name in files:
    s3.upload_file(os.path.join(root, kind, name), "measure", f"{prefix}/{kind}/{name}")
took = time.perf_counter() - began
# As the control's load: go on uploading (the same files again) until `busy` seconds passed.
again = 0
while time.perf_counter() - began < busy:
    kind, name = files[again % len(files)]
    s3.upload_file(os.path.join(root, kind, name), "measure", f"{prefix}-busy/{kind}/{again}-{name}")
    again += 1
print(f"boto3: {len(files)} archives, {total} bytes in {took:.3f} s = {total / 1e6 / took:.1f} MB/s")
EOF
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
    echo "round $round"
    boto3_round "boto3-$round" | tee -a "$work/rounds"
    "$bin" upload "$work" "$endpoint" "s3://measure/ours-$round" "$work/lags" | tee -a "$work/rounds"
    boto3_round "control-$round" 2.0 >/dev/null &
    control=$!
    sleep 0.3
    "$bin" watch 1.2 "$work/lags" boto3-upload
    wait "$control"
done

echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" - "$work/rounds" "$work/lags" <<'EOF'
import re, statistics, sys
rates = {}
for line in open(sys.argv[1]):
    who, rate = line.split(":")[0], re.search(r"= ([0-9.]+) MB/s", line)
    rates.setdefault(who, []).append(float(rate.group(1)))
for who, values in rates.items():
    print(f"{who}: median {statistics.median(values):.1f} MB/s over {len(values)} rounds "
          f"({', '.join(f'{v:.1f}' for v in values)})")
print(f"ours / boto3: {statistics.median(rates['ours']) / statistics.median(rates['boto3']):.2f}x")
lags = {}
for line in open(sys.argv[2]):
    what, nanos = line.split()
    lags.setdefault(what, []).append(int(nanos))
for what in ("baseline", "upload", "boto3-upload"):
    v = sorted(lags[what])
    rank = lambda p: v[max(1, -(-len(v) * p // 100)) - 1]
    print(f"wheel lag, {what:>12}: n={len(v)} p50={rank(50) / 1e6:.3f} ms "
          f"p99={rank(99) / 1e6:.3f} ms max={v[-1] / 1e6:.3f} ms")
EOF
