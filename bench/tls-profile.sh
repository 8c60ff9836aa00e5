#!/bin/bash
# tls-profile.sh - where a TLS cycle's daemon CPU goes, against a plain one.
#
#   bash bench/tls-profile.sh [LOCKBROKERD]
#
# Starts one embedded lockbrokerd with a TLS listener (a throw-away P-256 CA
# and server certificate, as bench/run-bench.sh makes) and runs
# lockbroker-bench's distinct workload, 50 connections, against its plain
# port and its TLS port in turn, BENCH_REPEAT times. During the middle of
# each run, for PROFILE_SECONDS, it counts the daemon's system calls
# (perf stat on the syscalls tracepoints) and samples where its CPU goes by
# shared object (perf record), and divides both by the cycles the daemon
# served meanwhile (STATS cmd_unlock before and after). Prints one block per
# run. Needs perf and the openssl command; run as root (or with
# perf_event_paranoid low enough) for the tracepoints.
#
# Environment:
#   BENCH_DURATION   measured seconds per run (default 8)
#   BENCH_REPEAT     plain/TLS pairs (default 2)
#   PROFILE_SECONDS  profiled seconds in each run (default 3)
#   LOCKBROKER_BENCH the benchmark client (default ./bench/lockbroker-bench)
set -u

LOCKBROKERD=${1:-$PWD/daemon/lockbrokerd}
BENCH=${LOCKBROKER_BENCH:-$PWD/bench/lockbroker-bench}
D=${BENCH_DURATION:-8}
R=${BENCH_REPEAT:-2}
PS=${PROFILE_SECONDS:-3}
for p in "$LOCKBROKERD" "$BENCH"; do
    [ -x "$p" ] || { echo "tls-profile: $p is not an executable" >&2; exit 1; }
done
for c in perf openssl; do
    command -v "$c" >/dev/null || { echo "tls-profile: needs $c" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/lockbroker-tls-profile.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

bash "$(dirname "$0")/tls-files.sh" "$tmp" || { cat "$tmp/openssl.log" >&2; exit 1; }

"$LOCKBROKERD" -l 127.0.0.1:0 -c "$tmp/tls.conf" 2>"$tmp/daemon.log" &
pid=$!
for _ in $(seq 100); do
    grep -q 'ready:' "$tmp/daemon.log" && break
    sleep 0.1
done
port=$(sed -n 's/.*ready: .* listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/daemon.log")
tport=$(sed -n 's/.* TLS on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/daemon.log")
[ -n "$port" ] && [ -n "$tport" ] || { echo "tls-profile: the daemon did not start:" >&2; cat "$tmp/daemon.log" >&2; exit 1; }

unlocks() {
    local ans
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf 'STATS\nQUIT\n' >&3
    ans=$(timeout 2 cat <&3)
    exec 3<&- 3>&-
    sed -n 's/^STAT cmd_unlock \([0-9]*\).*/\1/p' <<<"$ans"
}

events=syscalls:sys_enter_read,syscalls:sys_enter_readv,syscalls:sys_enter_write,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_epoll_wait

profile() {   # NAME ARGS...: one run, profiled in its middle
    local name=$1 u0 u1 n
    shift
    "$BENCH" --pid "$pid" -W distinct -c 50 -w 2 -d "$D" -o json "$@" >"$tmp/$name.json" &
    local bench=$!
    sleep $(awk -v d="$D" -v p="$PS" 'BEGIN { print 2 + (d - p) / 2 }')
    u0=$(unlocks)
    perf stat -x, -e "$events" -p "$pid" -o "$tmp/$name.stat" -- \
        perf record -q -F 1999 -p "$pid" -o "$tmp/$name.data" -- sleep "$PS" >/dev/null 2>&1
    u1=$(unlocks)
    wait "$bench"
    n=$((u1 - u0))
    echo "== $name: $(sed -n 's/.*"cycles_per_s": \([0-9]*\).*"daemon_cpu_us_per_cycle": \([0-9.]*\).*/\1 cycles\/s, daemon \2 us CPU per cycle/p' "$tmp/$name.json"); $n cycles profiled"
    # The cycles are counted from just before the profile to just after
    # it, so the figures per cycle come out a few per cent low.
    awk -F, -v n="$n" '$3 ~ /syscalls/ { sub("syscalls:sys_enter_", "", $3); printf "  %-12s %6.2f per cycle\n", $3, $1 / n }' "$tmp/$name.stat"
    perf report -i "$tmp/$name.data" --sort dso -q 2>/dev/null |
        awk -v c="$(sed -n 's/.*"daemon_cpu_us_per_cycle": \([0-9.]*\).*/\1/p' "$tmp/$name.json")" \
            'NF >= 2 { p = $1; sub("%", "", p); if (p >= 0.5) printf "  %-30s %5.1f%%  ~%5.2f us per cycle\n", $2, p, p * c / 100 }'
}

for i in $(seq "$R"); do
    profile "plain-$i" -H "127.0.0.1:$port"
    profile "tls-$i" -H "127.0.0.1:$tport" --tls-ca "$tmp/ca.pem"
done
