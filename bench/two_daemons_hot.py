#!/usr/bin/env python3
"""two_daemons_hot.py - one hot lock name wanted by clients of several daemons.

lockbroker-bench talks to one daemon, so it cannot tell how the grants of one
name are shared between daemons, nor check that fencing tokens increase
across them. This driver opens -c connections to each daemon given with -H
(all in one process, one selector loop), and every connection cycles
LOCK <name> / UNLOCK <name> on the same name, with nothing in between, like
`lockbroker-bench -W hot`. After the warm-up it measures for -d seconds and
prints one record:

  - throughput (cycles_per_s: UNLOCK answered; grants_per_s),
  - grant latency (LOCK sent -> OK received) percentiles and the longest
    wait, counting LOCKs still unanswered at the end as waits that long,
  - each daemon's share of the grants (share_0, share_1, ... in -H order),
    and how the grants came in runs on one daemon (turns),
  - token_regressions: grants whose token was not greater than the token of
    the grant before it, in the order this loop saw the OKs (a holder's UNLOCK
    is sent only after its OK was handled, so the next grant, on whatever
    daemon, is seen later); counted over the whole run, warm-up included,
  - mutex_violations: an OK while another connection held the name,
  - max_bypass: most LOCKs sent after one waiter's own that were granted
    before it (as lockbroker-bench reports it),
  - given --pid for each daemon, --zk and --zk-pid: the daemons' and the
    ZooKeeper server's CPU per cycle and ZooKeeper writes per cycle;
    local_handoffs_per_cycle from each daemon's STATS.

Standard library only. Usage:
  two_daemons_hot.py -H 127.0.0.1:PORT1 -H 127.0.0.1:PORT2 -c 6 -d 10 -w 2 -o json
"""
import argparse
import json
import os
import re
import resource
import selectors
import socket
import sys
import time

OK_LOCK = re.compile(rb"OK (\S+) ([0-9]+)")


def hostport(s):
    host, _, port = s.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT, got %r" % s)
    return host.strip("[]"), int(port)


def proc_cpu_us(pid):
    """utime + stime of a process, in microseconds; None if unreadable."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) * 1e6 / ticks


def zk_zxid(hosts):
    """The zxid from `srvr` on the first ZooKeeper host; None on failure."""
    try:
        host, port = hostport(hosts.split(",")[0])
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(b"srvr")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    m = re.search(rb"Zxid: 0x([0-9a-fA-F]+)", data)
    return int(m.group(1), 16) if m else None


def daemon_stats(addr):
    """STAT lines of one daemon as a dict; {} on failure."""
    try:
        with socket.create_connection(addr, timeout=2) as s:
            s.sendall(b"STATS\n")
            data = b""
            while not data.endswith(b"END\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return {}
    stats = {}
    for line in data.decode("latin-1").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            stats[parts[1]] = parts[2]
    return stats


def quantile(sorted_vals, q):
    if not sorted_vals:
        return 0.0
    i = min(len(sorted_vals) - 1, max(0, int(q * len(sorted_vals) + 0.5) - 1))
    return sorted_vals[i]


class Conn:
    def __init__(self, bench, idx, daemon, addr):
        self.bench = bench
        self.idx = idx
        self.daemon = daemon
        self.sock = socket.create_connection(addr, timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(None)
        self.buf = b""
        self.state = "idle"        # idle -> locking -> unlocking -> locking ...
        self.sent = 0.0            # when the outstanding LOCK went out
        self.bypassed = 0

    def lock(self):
        self.state = "locking"
        self.sent = time.monotonic()
        self.bypassed = 0
        self.sock.sendall(self.bench.lock_line)

    def unlock(self):
        self.state = "unlocking"
        self.sock.sendall(self.bench.unlock_line)


class Bench:
    def __init__(self, args):
        self.args = args
        self.name = (args.prefix + "hot").encode()
        self.lock_line = b"LOCK " + self.name + b"\n"
        self.unlock_line = b"UNLOCK " + self.name + b"\n"
        self.unlock_ok = b"OK " + self.name
        self.sel = selectors.DefaultSelector()
        self.conns = []
        for d, addr in enumerate(args.hosts):
            for _ in range(args.conns):
                c = Conn(self, len(self.conns), d, addr)
                self.conns.append(c)
                self.sel.register(c.sock, selectors.EVENT_READ, c)
        self.measuring = False
        self.holder = None
        self.last_token = None
        self.regressions = 0
        self.violations = 0
        self.errors = 0
        self.lost = 0
        self.first_error = ""
        self.reset()

    def reset(self):
        self.lat = []              # grant latencies, seconds
        self.grants = [0] * len(self.args.hosts)
        self.cycles = 0
        self.max_bypass = 0
        self.trace = []            # (grant time, token, daemon)
        self.turns = 0
        self.longest_turn = 0
        self.turn_daemon = None
        self.turn_len = 0

    def error(self, c, line):
        self.errors += 1
        if not self.first_error:
            self.first_error = "daemon %d: %s" % (c.daemon, line[:100].decode("latin-1"))

    def granted(self, c, token, now):
        if self.holder is not None:
            self.violations += 1
        self.holder = c
        if self.last_token is not None and token <= self.last_token:
            self.regressions += 1
        self.last_token = token
        if not self.measuring:
            return
        self.lat.append(now - c.sent)
        self.grants[c.daemon] += 1
        if self.args.trace:
            self.trace.append((now, token, c.daemon))
        for w in self.conns:
            if w is not c and w.state == "locking" and w.sent < c.sent:
                w.bypassed += 1
        self.max_bypass = max(self.max_bypass, c.bypassed)
        if c.daemon != self.turn_daemon:
            self.turns += 1
            self.turn_daemon = c.daemon
            self.turn_len = 0
        self.turn_len += 1
        self.longest_turn = max(self.longest_turn, self.turn_len)

    def on_line(self, c, line, now):
        if line.startswith(b"LOST "):
            self.lost += 1
            self.error(c, line)
            if self.holder is c:
                self.holder = None
            return
        if c.state == "locking":
            m = OK_LOCK.fullmatch(line)
            if not m or m.group(1) != self.name:
                self.error(c, line)
                c.lock()
                return
            self.granted(c, int(m.group(2)), now)
            self.holder = None     # cleared just before the UNLOCK goes out
            c.unlock()
        elif c.state == "unlocking":
            if line != self.unlock_ok:
                self.error(c, line)
            elif self.measuring:
                self.cycles += 1
            c.lock()
        else:
            self.error(c, line)

    def pump_until(self, deadline):
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return
            for key, _ in self.sel.select(timeout):
                c = key.data
                data = c.sock.recv(65536)
                now = time.monotonic()
                if not data:
                    raise SystemExit("two_daemons_hot: daemon %d closed a connection (%s)"
                                     % (c.daemon, self.first_error or "no error seen"))
                c.buf += data
                while b"\n" in c.buf:
                    line, c.buf = c.buf.split(b"\n", 1)
                    self.on_line(c, line, now)

    def snap(self):
        a = self.args
        return {
            "t": time.monotonic(),
            "cpu": [proc_cpu_us(p) for p in a.pid] if a.pid else None,
            "zcpu": proc_cpu_us(a.zk_pid) if a.zk_pid else None,
            "zxid": zk_zxid(a.zk) if a.zk else None,
            "handoffs": [daemon_stats(h).get("local_handoffs") for h in a.hosts],
            "ru": resource.getrusage(resource.RUSAGE_SELF),
        }

    def run(self):
        a = self.args
        for c in self.conns:
            c.lock()
        self.pump_until(time.monotonic() + a.warmup)
        self.reset()
        s0 = self.snap()
        self.measuring = True
        self.pump_until(s0["t"] + a.duration)
        self.measuring = False
        end = time.monotonic()
        # A LOCK still unanswered waited at least this long, and was bypassed.
        waits = [end - c.sent for c in self.conns if c.state == "locking"]
        for c in self.conns:
            if c.state == "locking":
                self.max_bypass = max(self.max_bypass, c.bypassed)
        s1 = self.snap()
        return self.report(s0, s1, end, waits)

    def report(self, s0, s1, end, waits):
        a = self.args
        secs = end - s0["t"]
        total = sum(self.grants)
        cyc = self.cycles
        lat = sorted(self.lat)
        max_wait = max(lat + waits) if lat or waits else 0.0
        r = {
            "tool": "two_daemons_hot",
            "workload": "hot",
            "targets": ",".join("%s:%d" % h for h in a.hosts),
            "daemons": len(a.hosts),
            "conns_per_daemon": a.conns,
            "conns": len(self.conns),
            "names": 1,
            "seconds": round(secs, 2),
            "grants": total,
            "grants_per_s": round(total / secs),
            "cycles": cyc,
            "cycles_per_s": round(cyc / secs),
            "grant_p50_us": round(quantile(lat, 0.50) * 1e6, 1),
            "grant_p99_us": round(quantile(lat, 0.99) * 1e6, 1),
            "grant_p999_us": round(quantile(lat, 0.999) * 1e6, 1),
            "grant_max_us": round((lat[-1] if lat else 0.0) * 1e6, 1),
            "max_wait_ms": round(max_wait * 1e3, 1),
            "unanswered_at_end": len(waits),
        }
        for d in range(len(a.hosts)):
            r["share_%d" % d] = round(self.grants[d] / total, 3) if total else 0.0
        r["min_share"] = round(min(self.grants) / total, 3) if total else 0.0
        r["turns"] = self.turns
        r["mean_turn"] = round(total / self.turns, 1) if self.turns else 0.0
        r["longest_turn"] = self.longest_turn
        r["max_bypass"] = self.max_bypass
        r["token_regressions"] = self.regressions
        r["mutex_violations"] = self.violations
        r["errors"] = self.errors
        r["lost"] = self.lost
        h0, h1 = s0["handoffs"], s1["handoffs"]
        if cyc and all(x is not None for x in h0 + h1):
            r["local_handoffs_per_cycle"] = round(
                sum(int(y) - int(x) for x, y in zip(h0, h1)) / cyc, 2)
        if cyc and s0["cpu"] and s1["cpu"] and None not in s0["cpu"] + s1["cpu"]:
            d = sum(s1["cpu"]) - sum(s0["cpu"])
            r["daemon_cpu_us_per_cycle"] = round(d / cyc, 2)
            r["daemon_cpu_pct"] = round(d / (secs * 1e4), 1)
        if cyc and s0["zxid"] is not None and s1["zxid"] is not None:
            r["zk_writes"] = s1["zxid"] - s0["zxid"]
            r["zk_writes_per_cycle"] = round((s1["zxid"] - s0["zxid"]) / cyc, 2)
        if cyc and s0["zcpu"] is not None and s1["zcpu"] is not None:
            d = s1["zcpu"] - s0["zcpu"]
            r["zk_cpu_us_per_cycle"] = round(d / cyc, 2)
            r["zk_cpu_pct"] = round(d / (secs * 1e4), 1)
        ru0, ru1 = s0["ru"], s1["ru"]
        client = (ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime) * 1e6
        r["client_cpu_pct"] = round(client / (secs * 1e4), 1)
        if self.first_error:
            r["first_error"] = self.first_error
        if a.trace:
            with open(a.trace, "w") as f:
                for t, token, d in self.trace:
                    f.write("%.6f %d %d\n" % (t - s0["t"], token, d))
        return r


def main():
    p = argparse.ArgumentParser(
        description="LOCK/UNLOCK cycles on one name through several daemons at once.")
    p.add_argument("-H", dest="hosts", type=hostport, action="append", required=True,
                   metavar="HOST:PORT", help="a daemon; give it once per daemon")
    p.add_argument("-c", dest="conns", type=int, default=6,
                   help="connections to each daemon (default 6)")
    p.add_argument("-d", dest="duration", type=float, default=10, help="measured seconds")
    p.add_argument("-w", dest="warmup", type=float, default=2, help="warm-up seconds")
    p.add_argument("--prefix", default="tdh%d-" % os.getpid(),
                   help="lock name prefix; the name is PREFIXhot (default tdh<pid>-)")
    p.add_argument("--pid", type=int, action="append", default=[],
                   help="a daemon's pid, once per daemon: their CPU per cycle")
    p.add_argument("--zk", help="ZooKeeper hosts: writes per cycle (zxid from srvr)")
    p.add_argument("--zk-pid", type=int, help="the ZooKeeper server's pid: its CPU per cycle")
    p.add_argument("--trace", metavar="FILE",
                   help="write every measured grant as 'seconds token daemon'")
    p.add_argument("-o", dest="out", choices=("table", "json"), default="table")
    args = p.parse_args()
    if args.pid and len(args.pid) != len(args.hosts):
        p.error("give --pid once per -H, or not at all")
    if args.conns < 1:
        p.error("-c must be at least 1")
    r = Bench(args).run()
    if args.out == "json":
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print("%-26s %s" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
