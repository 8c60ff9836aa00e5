#!/usr/bin/env python3
"""handover_pause.py - what a handover (SIGUSR2) costs the clients of a busy daemon.

Run by bench/handover.sh, which starts the daemon (max_clients raised, the
open-file limit too) and passes its port, pid and log file. Standard library
only.

1. Opens --conns connections and takes --locks exclusive locks on each
   (names hb<conn>.<i>, all distinct), pipelined, and keeps every token.
2. --runs times: sends SIGUSR2 to the daemon while --probes of those
   connections each send a PING, wait for its PONG, pause --probe-gap-ms
   and send the next. Per run it reports
     - the daemon's own figures, from its two log lines: the snapshot
       written T ms after the old daemon stopped parsing, the successor
       serving X ms after that; and the check of the successor (from the
       signal to parsing stopped, from the log's millisecond timestamps);
     - the client-visible pause: the longest PING round trip seen by a
       probe in the run, and when (from the signal) that PING was answered;
   then checks the state: STATS on a new connection (handovers, locks
   held, connections) and CHECK <name> <token> of every lock on --sample
   connections (a different sample each run): the same token, still held.
3. Prints one table, and one JSON record per run to --json if given.

Exit status 1 when a run failed (no handover, a token changed, a lock or a
connection gone), 0 otherwise.
"""

import argparse
import calendar
import json
import os
import random
import re
import selectors
import signal
import socket
import statistics
import sys
import time

TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")
OUT_RE = re.compile(r"handover: (\d+) connections, (\d+) holds, (\d+) waits; snapshot of (\d+) "
                    r"bytes, (\d+) ms after parsing stopped")
IN_RE = re.compile(r"handover: took over (\d+) connections, (\d+) holds and waits, .*; "
                   r"(\d+) ms after the daemon before stopped parsing")
FAIL_RE = re.compile(r"handover: (refused|given up|refusing|the snapshot passed on does not)")


def log_ms(line):
    """The log line's timestamp, in ms since the epoch (None if it has none)."""
    m = TS_RE.match(line)
    if not m:
        return None
    t = time.strptime(m.group(1)[:19], "%Y-%m-%dT%H:%M:%S")
    return calendar.timegm(t) * 1000 + int(m.group(1)[20:])


class Conn:
    """One client connection: a socket and what it has read but not consumed."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.tokens = {}

    def readline(self, timeout=60.0):
        while b"\n" not in self.buf:
            self.sock.settimeout(timeout)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the daemon closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def ask(self, lines):
        self.sock.sendall("".join(l + "\n" for l in lines).encode())
        return [self.readline() for _ in lines]


def stats(port):
    c = Conn(port)
    c.sock.sendall(b"STATS\n")
    out = {}
    while True:
        line = c.readline()
        if line == "END":
            break
        _, k, v = line.split(" ", 2)
        out[k] = v
    c.sock.sendall(b"QUIT\n")
    c.sock.close()
    return out


def take_locks(port, nconns, nlocks):
    conns = []
    t0 = time.monotonic()
    # Connect and send every LOCK first, read the grants after: the replies
    # wait in the kernel's buffers meanwhile.
    for i in range(nconns):
        c = Conn(port)
        c.names = ["hb%d.%d" % (i, j) for j in range(nlocks)]
        c.sock.sendall("".join("LOCK %s\n" % n for n in c.names).encode())
        conns.append(c)
    for c in conns:
        for n in c.names:
            parts = c.readline().split()
            if len(parts) != 3 or parts[0] != "OK" or parts[1] != n:
                sys.exit("handover_pause: LOCK %s answered %s" % (n, " ".join(parts)))
            c.tokens[n] = parts[2]
    return conns, time.monotonic() - t0


def check_sample(conns, sample, rng):
    """CHECK every lock of sample connections with its token; the failures."""
    bad = []
    picked = rng.sample(conns, min(sample, len(conns)))
    for c in picked:
        c.sock.sendall("".join("CHECK %s %s\n" % (n, c.tokens[n]) for n in c.names).encode())
    for c in picked:
        for n in c.names:
            parts = c.readline().split()
            if len(parts) != 4 or parts[:3] != ["OK", n, c.tokens[n]]:
                bad.append("CHECK %s %s: %s" % (n, c.tokens[n], " ".join(parts)))
    return len(picked) * len(picked[0].names) if picked else 0, bad


def read_new_log(f):
    return [l.rstrip("\n") for l in f.readlines()]


def one_run(args, run, probes, logf, port):
    """SIGUSR2 with probes pinging; the run's record."""
    sel = selectors.DefaultSelector()
    state = {}
    for p in probes:
        p.sock.setblocking(False)
        sel.register(p.sock, selectors.EVENT_READ, p)
        state[p] = {"sent": None, "next": 0.0}
    gap = args.probe_gap_ms / 1000.0
    rec = {"run": run}
    longest = (0.0, 0.0)           # (round trip, answered at), seconds from the signal
    lines = []
    t_sig = None
    deadline = time.monotonic() + args.timeout
    took_over_at = None
    settle = 0.2                   # PINGs answered after the successor's line, then stop

    def send_due(now):
        for p, st in state.items():
            if st["sent"] is None and now >= st["next"]:
                p.sock.send(b"PING\n")
                st["sent"] = time.monotonic()

    # A little probing before the signal: the round trip of a quiet daemon.
    pre = []
    t_end = time.monotonic() + 0.2
    while True:
        now = time.monotonic()
        if t_sig is None and now >= t_end:
            quiet = max(pre) if pre else 0.0
            rec["quiet_rtt_ms"] = round(quiet * 1000, 2)
            t_sig = time.monotonic()
            os.kill(args.pid, signal.SIGUSR2)
        send_due(now)
        for key, _ in sel.select(timeout=0.0005):
            p = key.data
            data = p.sock.recv(65536)
            if not data:
                sys.exit("handover_pause: run %d: a probe connection was closed" % run)
            p.buf += data
            while b"\n" in p.buf:
                line, p.buf = p.buf.split(b"\n", 1)
                if line != b"PONG":
                    sys.exit("handover_pause: run %d: PING answered %r" % (run, line))
                now = time.monotonic()
                rtt = now - state[p]["sent"]
                if t_sig is None:
                    pre.append(rtt)
                elif rtt > longest[0]:
                    longest = (rtt, now - t_sig)
                state[p]["sent"] = None
                state[p]["next"] = now + gap
        if t_sig is not None:
            lines += read_new_log(logf)
            if took_over_at is None and any(IN_RE.search(l) for l in lines):
                took_over_at = time.monotonic()
            failed = [l for l in lines if FAIL_RE.search(l)]
            if failed:
                rec["failed"] = failed[0]
                break
            if took_over_at is not None and time.monotonic() - took_over_at > settle and \
                    all(st["sent"] is None for st in state.values()):
                break
        if time.monotonic() > deadline:
            rec["failed"] = "no handover within %d s" % args.timeout
            break
    for p in probes:
        sel.unregister(p.sock)
        p.sock.setblocking(True)
    sel.close()
    rec["pause_ms"] = round(longest[0] * 1000, 1)
    rec["answered_ms"] = round(longest[1] * 1000, 1)
    caught = next((log_ms(l) for l in lines if "caught SIGUSR2" in l), None)
    for l in lines:
        m = OUT_RE.search(l)
        if m:
            rec.update(conns=int(m.group(1)), holds=int(m.group(2)), waits=int(m.group(3)),
                       snapshot_bytes=int(m.group(4)), snapshot_ms=int(m.group(5)))
            if caught is not None and log_ms(l) is not None:
                rec["check_ms"] = int(log_ms(l) - caught - int(m.group(5)))
        m = IN_RE.search(l)
        if m:
            rec.update(took_over_conns=int(m.group(1)), took_over_holds=int(m.group(2)),
                       serving_ms=int(m.group(3)))
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--log", required=True, help="the daemon's stderr, being written")
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--locks", type=int, default=10, help="locks per connection")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--probes", type=int, default=4, help="connections that PING throughout")
    ap.add_argument("--probe-gap-ms", type=float, default=1.0)
    ap.add_argument("--sample", type=int, default=200, help="connections CHECKed after a run")
    ap.add_argument("--timeout", type=int, default=60, help="seconds a run may take")
    ap.add_argument("--json", help="append one JSON record per run to this file")
    args = ap.parse_args()

    rng = random.Random(1)
    logf = open(args.log)
    logf.seek(0, os.SEEK_END)
    conns, setup_s = take_locks(args.port, args.conns, args.locks)
    total = args.conns * args.locks
    st = stats(args.port)
    print("handover_pause: %d connections holding %d locks in %.1f s; daemon: %s locks held, "
          "%s connections" % (args.conns, total, setup_s, st.get("locks_held"),
                              st.get("curr_connections")), file=sys.stderr)
    if int(st.get("locks_held", 0)) != total:
        sys.exit("handover_pause: the daemon holds %s locks, not %d" % (st.get("locks_held"), total))
    probes = [conns[i * len(conns) // args.probes] for i in range(args.probes)]
    base_handovers = int(st.get("handovers", 0))
    records, failures = [], 0
    for run in range(1, args.runs + 1):
        time.sleep(0.5)
        rec = one_run(args, run, probes, logf, args.port)
        if "failed" not in rec:
            checked, bad = check_sample(conns, args.sample, rng)
            st = stats(args.port)
            rec.update(checked=checked, check_failures=len(bad),
                       handovers=int(st.get("handovers", 0)) - base_handovers,
                       locks_held=int(st.get("locks_held", 0)),
                       curr_connections=int(st.get("curr_connections", 0)))
            if bad:
                rec["failed"] = "%d of %d CHECKs failed, e.g. %s" % (len(bad), checked, bad[0])
            elif rec["handovers"] != run or rec["locks_held"] != total:
                rec["failed"] = "STATS: handovers %d (want %d), locks_held %d (want %d)" % (
                    rec["handovers"], run, rec["locks_held"], total)
        if "failed" in rec:
            failures += 1
        records.append(rec)
        print("handover_pause: run %d: %s" % (run, json.dumps(rec)), file=sys.stderr)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
        if "failed" in rec and "no handover" in rec["failed"]:
            break

    cols = [("run", "run"), ("check_ms", "check ms"), ("snapshot_ms", "snapshot ms"),
            ("serving_ms", "serving ms"), ("snapshot_bytes", "snapshot MB"),
            ("pause_ms", "pause ms"), ("answered_ms", "answered ms"), ("quiet_rtt_ms", "quiet ms"),
            ("checked", "CHECKs ok")]
    print("handover with %d connections holding %d locks (%d each), %d CPUs; %d probes PINGing "
          "every %.1f ms" % (args.conns, total, args.locks, os.cpu_count(), args.probes,
                             args.probe_gap_ms))
    print(" ".join("%12s" % h for _, h in cols))
    for r in records:
        row = []
        for k, _ in cols:
            v = r.get(k, "-")
            if k == "snapshot_bytes" and v != "-":
                v = "%.1f" % (v / 1e6)
            if k == "checked" and v != "-":
                v = "%d/%d" % (v - r.get("check_failures", 0), v)
            row.append("%12s" % v)
        print(" ".join(row) + ("  FAILED: " + r["failed"] if "failed" in r else ""))
    ok = [r for r in records if "failed" not in r]
    if len(ok) > 1:
        print("%12s" % "median", " ".join(
            "%12s" % (round(statistics.median(r[k] for r in ok), 1) if k in ok[0] and
                      k not in ("checked", "snapshot_bytes") else "")
            for k, _ in cols[1:]))
    print("check: signal -> parsing stopped (the successor's --check-handover), from the log's "
          "timestamps;\nsnapshot: parsing stopped -> snapshot written (old daemon's log); serving: "
          "parsing stopped -> the successor\nserving (its log); pause: the longest PING round trip a "
          "probe saw; answered: signal -> that PONG;\nquiet: the longest round trip in the 0.2 s "
          "before the signal; CHECKs: CHECK <name> <token> of every lock\nof %d connections after "
          "the run (same token, still held)." % args.sample)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
