#!/bin/bash
# ab-daemons.sh - two builds of lockbrokerd, same machine, same run: A/B rows.
#
#   bash bench/ab-daemons.sh OLD_LOCKBROKERD NEW_LOCKBROKERD
#
# Starts both daemons in embedded mode on free loopback ports and runs
# lockbroker-bench against them alternately (A B A B ...; BENCH_REPEAT times
# per workload), then prints, per workload and daemon, the medians of
# throughput, grant latency and the daemon's CPU time per LOCK/UNLOCK cycle.
# Used for docs/PERFORMANCE.md ("Metrics: the cost of the histograms").
#
# Environment:
#   BENCH_DURATION   measured seconds per run (default 10)
#   BENCH_WARMUP     warm-up seconds per run (default 2)
#   BENCH_REPEAT     runs per workload and daemon (default 3)
#   BENCH_CONNS      connections (default 50)
#   BENCH_WORKLOADS  lockbroker-bench -W values (default "hot distinct")
#   LOCKBROKER_BENCH the benchmark client (default ./bench/lockbroker-bench)
#   PYTHON           prints the table (default python3)
set -u

[ $# -eq 2 ] || { echo "usage: $0 OLD_LOCKBROKERD NEW_LOCKBROKERD" >&2; exit 2; }
D=${BENCH_DURATION:-10}
W=${BENCH_WARMUP:-2}
R=${BENCH_REPEAT:-3}
C=${BENCH_CONNS:-50}
WORKLOADS=${BENCH_WORKLOADS:-hot distinct}
BENCH=${LOCKBROKER_BENCH:-$PWD/bench/lockbroker-bench}
PYTHON=${PYTHON:-python3}
for p in "$1" "$2" "$BENCH"; do
    [ -x "$p" ] || { echo "ab-daemons: $p is not an executable" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/lockbroker-ab.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Starts daemon $2 as label $1 on a free port; sets addr_<label> and pid_<label>.
start() {
    local label=$1 bin=$2 addr i
    # exec: $! is the daemon itself, whose CPU time lockbroker-bench reads.
    ( exec "$bin" -l 127.0.0.1:0 2>"$tmp/$label.log" ) &
    pids+=($!)
    eval "pid_$label=$!"
    for i in $(seq 100); do
        addr=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\).*/\1/p' "$tmp/$label.log")
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { echo "ab-daemons: $bin did not start" >&2; cat "$tmp/$label.log" >&2; exit 1; }
    eval "addr_$label=$addr"
}

start A "$1"
start B "$2"
for w in $WORKLOADS; do
    for r in $(seq "$R"); do
        for label in A B; do
            eval "addr=\$addr_$label pid=\$pid_$label"
            printf '%s run %s/%s %s against %s\n' "$(date +%H:%M:%S)" "$r" "$R" "$w" "$label" >&2
            "$BENCH" -H "$addr" -W "$w" -c "$C" -d "$D" -w "$W" --pid "$pid" -o json \
                --prefix "ab$label$r-" | sed "s/^{/{\"daemon\": \"$label\", /" >>"$tmp/runs.jsonl" ||
                { echo "ab-daemons: lockbroker-bench failed" >&2; exit 1; }
        done
    done
done

"$PYTHON" - "$tmp/runs.jsonl" "$1" "$2" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("A = %s\nB = %s\n" % (sys.argv[2], sys.argv[3]))
print("| workload | daemon | runs | cycles/s | grant p50 us | grant p99 us | daemon CPU us/cycle |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for w in dict.fromkeys(r["workload"] for r in runs):
    for d in ("A", "B"):
        rs = [r for r in runs if r["workload"] == w and r["daemon"] == d]
        med = lambda k: statistics.median(r[k] for r in rs)
        print("| %s | %s | %d | %.0f | %.1f | %.1f | %.2f |" % (
            w, d, len(rs), med("cycles_per_s"), med("grant_p50_us"), med("grant_p99_us"),
            med("daemon_cpu_us_per_cycle")))
bad = [r for r in runs if r.get("errors") or r.get("mutex_violations") or r.get("token_regressions")]
if bad:
    sys.exit("ab-daemons: runs with errors: %r" % bad)
EOF
