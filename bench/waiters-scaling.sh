#!/bin/bash
# waiters-scaling.sh - does the daemon's cost grow with work, not with waiters?
# And what does an idle connection cost it?
#
# Starts its own embedded lockbrokerd on a free loopback port, with a config
# file raising [server] max_clients to 20000, then runs
#   lockbroker-bench -W waiters -c 100     and   -c 10000
#       daemon CPU per grant (the lock passed to the head of the queue) and
#       per cancel (a random waiter disconnects; a new one queues), net of a
#       bare connect/PING/close; equal figures for 100 and 10,000 waiters
#       mean both operations are O(1) in the queue's length;
#   lockbroker-bench -W idle -c 10000
#       the daemon's RSS and anonymous memory growth per idle connection.
# Prints a small table; the JSON records go to stderr's log lines.
#
# Environment: BENCH_DURATION (seconds per phase, default 3), LOCKBROKERD,
# LOCKBROKER_BENCH (default: under the current build directory),
# SCALING_WAITERS (default "100 10000"), SCALING_IDLE (default 10000).
set -u

D=${BENCH_DURATION:-3}
LOCKBROKERD=${LOCKBROKERD:-$PWD/daemon/lockbrokerd}
LOCKBROKER_BENCH=${LOCKBROKER_BENCH:-$PWD/bench/lockbroker-bench}
WAITERS=${SCALING_WAITERS:-100 10000}
IDLE=${SCALING_IDLE:-10000}

for p in "$LOCKBROKERD" "$LOCKBROKER_BENCH"; do
    [ -x "$p" ] || { echo "waiters-scaling: $p is not built (run make)" >&2; exit 1; }
done
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 21000 ]; then ulimit -n 21000; else ulimit -n "$hard"; fi

tmp=$(mktemp -d /tmp/lockbroker-scaling.XXXXXX)
lb_pid=
stop_daemon() {
    if [ -n "$lb_pid" ]; then
        kill "$lb_pid" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$lb_pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$lb_pid" 2>/dev/null
        wait "$lb_pid" 2>/dev/null
        lb_pid=
    fi
}
cleanup() {
    stop_daemon
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

log() { printf '%s waiters-scaling: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
jget() { sed -n "s/.*\"$2\": \"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$1"; }

cat >"$tmp/lockbrokerd.conf" <<EOF
[server]
max_clients = 20000
EOF

# Starts a fresh embedded daemon: sets lb_pid and port.
start_daemon() {
    "$LOCKBROKERD" -c "$tmp/lockbrokerd.conf" -l 127.0.0.1:0 2>"$tmp/lockbrokerd.log" &
    lb_pid=$!
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*ready: .* listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/lockbrokerd.log")
        [ -n "$port" ] && return 0
        kill -0 "$lb_pid" 2>/dev/null || break
        sleep 0.1
    done
    log "lockbrokerd did not start:"; cat "$tmp/lockbrokerd.log" >&2; exit 1
}

start_daemon
declare -A W
for n in $WAITERS; do
    log "$n waiters: grant / cancel / connect-close phases of ${D}s"
    W[$n]=$("$LOCKBROKER_BENCH" -H "127.0.0.1:$port" --pid "$lb_pid" -W waiters -c "$n" -d "$D" -o json) ||
        { log "waiters run with $n failed"; W[$n]=""; }
    log "${W[$n]}"
done
# Memory is measured on a fresh daemon: the waiters runs have grown its heap.
stop_daemon
start_daemon
log "$IDLE idle connections"
I=$("$LOCKBROKER_BENCH" -H "127.0.0.1:$port" --pid "$lb_pid" -W idle -c "$IDLE" -o json) ||
    { log "idle run failed"; I=""; }
log "$I"

printf '%-24s %12s %12s %14s %12s %12s\n' "waiters on one name" "us/grant" "grants/s" "us/cancel" \
    "us/conn+close" "us/cancel net"
first=
for n in $WAITERS; do
    j=${W[$n]}
    printf '%-24s %12s %12s %14s %12s %12s\n' "$n" "$(jget "$j" daemon_cpu_us_per_grant)" \
        "$(jget "$j" grants_per_s)" "$(jget "$j" daemon_cpu_us_per_cancel)" \
        "$(jget "$j" daemon_cpu_us_per_connect_close)" "$(jget "$j" daemon_cpu_us_per_cancel_net)"
    [ -z "$first" ] && first=$n
    last=$n
done
if [ -n "$first" ] && [ "$first" != "$last" ]; then
    awk -v g1="$(jget "${W[$first]}" daemon_cpu_us_per_grant)" -v g2="$(jget "${W[$last]}" daemon_cpu_us_per_grant)" \
        -v c1="$(jget "${W[$first]}" daemon_cpu_us_per_cancel)" -v c2="$(jget "${W[$last]}" daemon_cpu_us_per_cancel)" \
        -v a="$first" -v b="$last" 'BEGIN {
            if (g1 > 0 && c1 > 0)
                printf "%s vs %s waiters: grant cost x%.2f, cancel cost x%.2f (about 1 = O(1))\n", b, a, g2 / g1, c2 / c1
        }'
fi
if [ -n "$I" ]; then
    printf '%s idle connections: daemon RSS +%s bytes/conn, anonymous memory +%s bytes/conn (target <= 2048); RSS %s kB -> %s kB, %s kB after closing\n' \
        "$(jget "$I" conns)" "$(jget "$I" rss_bytes_per_conn)" "$(jget "$I" anon_bytes_per_conn)" \
        "$(jget "$I" rss_before_kb)" "$(jget "$I" rss_open_kb)" "$(jget "$I" rss_after_close_kb)"
fi
