#!/bin/bash
# handover.sh - how long do clients wait while the daemon hands over (SIGUSR2)?
#
# Starts its own embedded lockbrokerd on a free loopback port, with a config
# file raising [server] max_clients above the connections it opens, then runs
# bench/handover_pause.py, which opens HANDOVER_CONNS connections holding
# HANDOVER_LOCKS locks each (10,000 x 10 = 100,000 locks by default), sends
# the daemon SIGUSR2 HANDOVER_RUNS times (one handover after the other, the
# same connections and locks carried through each), and prints a table: per
# run the daemon's own figures from its two log lines, the longest PING
# round trip clients saw, and whether every CHECKed lock kept its token.
# `make bench-handover` runs it; so does `make bench` (BENCH_HANDOVER=0
# skips it there). Results: docs/PERFORMANCE.md, "Handover".
#
# Environment: HANDOVER_CONNS (default 10000), HANDOVER_LOCKS (locks per
# connection, default 10), HANDOVER_RUNS (default 5), HANDOVER_SAMPLE
# (connections whose locks are CHECKed after each run, default 200),
# HANDOVER_JSON (file receiving one JSON record per run), HANDOVER_ZK
# (ZooKeeper hosts: distributed mode, under a root of its own, where the
# successor attaches to the same session; the log's "zk: reconnected"
# line says when), LOCKBROKERD
# (default: under the current build directory), PYTHON (default python3),
# BENCH_KEEP=1 (keep the temporary directory, with the daemon's log).
# Exit status 1 when a run failed (no handover, a lock lost or its token
# changed).
set -u

here=$(cd "$(dirname "$0")" && pwd)
LOCKBROKERD=${LOCKBROKERD:-$PWD/daemon/lockbrokerd}
PYTHON=${PYTHON:-python3}
CONNS=${HANDOVER_CONNS:-10000}
LOCKS=${HANDOVER_LOCKS:-10}
RUNS=${HANDOVER_RUNS:-5}
SAMPLE=${HANDOVER_SAMPLE:-200}

[ -x "$LOCKBROKERD" ] || { echo "handover: $LOCKBROKERD is not built (run make)" >&2; exit 1; }

# The daemon and the client each keep CONNS sockets open.
want=$(( CONNS + 256 ))
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
    echo "handover: the open-file hard limit is $hard; $CONNS connections need $want" \
         "(lower HANDOVER_CONNS, or raise the limit)" >&2
    exit 1
fi
ulimit -n "$want"

tmp=$(mktemp -d /tmp/lockbroker-handover.XXXXXX)
lb_pid=
cleanup() {
    if [ -n "$lb_pid" ]; then
        kill "$lb_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$lb_pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$lb_pid" 2>/dev/null
        wait "$lb_pid" 2>/dev/null
    fi
    if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "handover: logs kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

log() { printf '%s handover: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The check of the successor (--check-handover) reads this file again at
# every run: it stays until the end.
cat >"$tmp/lockbrokerd.conf" <<EOF
[server]
max_clients = $(( CONNS + 100 ))
max_locks_per_client = $(( LOCKS > 256 ? LOCKS : 256 ))
EOF
if [ -n "${HANDOVER_ZK:-}" ]; then
    printf '[zookeeper]\nhosts = %s\nroot = /lbbench-handover-%s\n' "$HANDOVER_ZK" "$$" \
        >>"$tmp/lockbrokerd.conf"
fi

"$LOCKBROKERD" -c "$tmp/lockbrokerd.conf" -l 127.0.0.1:0 2>"$tmp/lockbrokerd.log" &
lb_pid=$!
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*ready: .* listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/lockbrokerd.log")
    [ -n "$port" ] && break
    kill -0 "$lb_pid" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$port" ]; then
    log "lockbrokerd did not start:"; cat "$tmp/lockbrokerd.log" >&2; exit 1
fi

log "$CONNS connections x $LOCKS locks, then $RUNS handovers (pid $lb_pid, port $port)"
rc=0
"$PYTHON" "$here/handover_pause.py" --port "$port" --pid "$lb_pid" --log "$tmp/lockbrokerd.log" \
    --conns "$CONNS" --locks "$LOCKS" --runs "$RUNS" --sample "$SAMPLE" \
    ${HANDOVER_JSON:+--json "$HANDOVER_JSON"} || rc=$?
if [ "$rc" != 0 ]; then
    log "failed; the daemon's handover lines:"
    grep -E 'handover|caught|ready' "$tmp/lockbrokerd.log" | tail -n 20 >&2
fi
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
