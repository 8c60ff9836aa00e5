#!/bin/bash
# ab-distributed.sh - two builds of lockbrokerd in distributed mode, same
# ZooKeeper, same run: A/B rows of a hot name.
#
#   bash bench/ab-distributed.sh OLD_LOCKBROKERD NEW_LOCKBROKERD [MODE]
#
# Starts a standalone ZooKeeper on a free loopback port (Debian's zookeeper
# package), one daemon of each build (roots /old and /new), and runs
# `lockbroker-bench -W hot -c 16 -m MODE` against them alternately, printing
# cycles per second per run. MODE: exclusive (default), shared, limit=N.
#
# Environment: BENCH_DURATION (default 5), BENCH_REPEAT (default 3),
# BENCH_WORKLOAD (default hot; distinct, cold, ...), BENCH_CLIENTS (default
# 16), LOCKBROKER_BENCH (default ./bench/lockbroker-bench).
set -u
[ $# -ge 2 ] || { echo "usage: $0 OLD_LOCKBROKERD NEW_LOCKBROKERD [MODE]" >&2; exit 2; }
OLD=$1 NEW=$2 MODE=${3:-exclusive}
D=${BENCH_DURATION:-5} R=${BENCH_REPEAT:-3} W=${BENCH_WORKLOAD:-hot} C=${BENCH_CLIENTS:-16}
BENCH=${LOCKBROKER_BENCH:-$PWD/bench/lockbroker-bench}
tmp=$(mktemp -d /tmp/lockbroker-abd.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
zkport=$(free_port)
printf 'tickTime=2000\ndataDir=%s/data\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n' \
    "$tmp" "$zkport" >"$tmp/zoo.cfg"
java -cp '/etc/zookeeper/conf:/usr/share/java/*' org.apache.zookeeper.server.quorum.QuorumPeerMain \
    "$tmp/zoo.cfg" >"$tmp/zk.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    [ "$(echo ruok | nc -q1 127.0.0.1 "$zkport" 2>/dev/null)" = imok ] && break
    sleep 0.2
done
start() {   # binary root: sets port and pid (not in a subshell, so cleanup sees the pid)
    port=$(free_port)
    printf '[zookeeper]\nhosts = 127.0.0.1:%s\nroot = %s\n' "$zkport" "$2" >"$tmp/${2#/}.conf"
    "$1" -c "$tmp/${2#/}.conf" -l "127.0.0.1:$port" >"$tmp/${2#/}.log" 2>&1 &
    pid=$!
    pids+=("$pid")
}
start "$OLD" /old; pa=$port ida=$pid
start "$NEW" /new; pb=$port idb=$pid
for d in old new; do
    until grep -q "zk: new session" "$tmp/$d.log"; do sleep 0.2; done
done
for _ in $(seq 1 "$R"); do
    for run in "old $pa $ida" "new $pb $idb"; do
        read -r name port pid <<<"$run"
        "$BENCH" -H "127.0.0.1:$port" --pid "$pid" -W "$W" -c "$C" -m "$MODE" -d "$D" -w 1 -o json |
            python3 -c 'import json, sys; print(sys.argv[1], json.load(sys.stdin)["cycles_per_s"])' "$name"
    done
done
