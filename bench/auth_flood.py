#!/usr/bin/env python3
"""auth_flood.py - a well-behaved client's PING round trip while anonymous
connections send wrong passwords (issue 41, item 2).

Usage: auth_flood.py [-n CONNS] [-d SECONDS] [--conf LINES] [LOCKBROKERD]

Starts LOCKBROKERD (default: the built daemon/lockbrokerd) on loopback
with a users file of one yescrypt user (~20 ms a check) and the extra
[server] lines of --conf (e.g. "auth_fail_limit = 0" to measure the
threads alone, without the per-address back-off). CONNS connections
each send `AUTH slow wrong` and send it again once answered, at most
once a second (the issue's attack); one more connection sends PING
every 100 ms. After SECONDS it prints the PING round trips (median,
99th percentile, largest, in ms), the AUTH answers by kind, and the
daemon's CPU time.

With --timing it measures instead what the issue's timing attack saw,
for an unknown user and for the yescrypt user in turn (ROUNDS times
each): the round trip of a PING sent behind 10 wrong AUTHs on 10 other
connections, and how long one wrong AUTH takes to be refused.
"""

import argparse
import os
import select
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))

SLOW = "$y$j9T$lbtestslowsalt0$x60hiTC2JXrXU1pEmHf9MjnWwiKYK9O33THiS8NVOx7"


def flood(port, n, stop, answers):
    socks, next_at, buf = [], {}, {}
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
        next_at[s], buf[s] = 0.0, b""
    waiting = set()
    while not stop.is_set():
        now = time.monotonic()
        for s in socks:
            if s not in waiting and now >= next_at[s]:
                s.sendall(b"AUTH slow wrong\n")
                waiting.add(s)
                next_at[s] = now + 1.0
        r, _, _ = select.select(list(waiting), [], [], 0.05)
        for s in r:
            data = s.recv(4096)
            if not data:
                raise SystemExit("the daemon closed a flooding connection")
            buf[s] += data
            while b"\n" in buf[s]:
                line, buf[s] = buf[s].split(b"\n", 1)
                key = " ".join(line.decode().split()[:2])
                answers[key] = answers.get(key, 0) + 1
                waiting.discard(s)
    for s in socks:
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("-d", type=float, default=20.0)
    ap.add_argument("--conf", default="")
    ap.add_argument("--timing", type=int, metavar="ROUNDS", default=0)
    ap.add_argument("lockbrokerd", nargs="?")
    a = ap.parse_args()
    if a.lockbrokerd:
        os.environ["LOCKBROKERD"] = os.path.abspath(a.lockbrokerd)
    import lbharness  # noqa: E402 (reads LOCKBROKERD)

    def config(tmp):
        path = os.path.join(tmp, "users")
        with open(path, "w") as f:
            f.write("slow:%s:*\n" % SLOW)
        os.chmod(path, 0o600)
        return "[server]\nusers_file = %s\n%s\n" % (path, a.conf.replace(";", "\n"))

    d = lbharness.Daemon(config=config, verbose=False, name="auth-flood").start()
    try:
        port = d.port
        pinger = socket.create_connection(("127.0.0.1", port))
        pinger.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if a.timing:
            timing(port, pinger, a.timing)
            return
        cpu0 = cpu_seconds(d.pid)
        stop, answers = threading.Event(), {}
        t = threading.Thread(target=flood, args=(port, a.n, stop, answers))
        t.start()
        rtts, end = [], time.monotonic() + a.d
        while time.monotonic() < end:
            t0 = time.monotonic()
            pinger.sendall(b"PING\n")
            got = b""
            while not got.endswith(b"\n"):
                got += pinger.recv(64)
            rtts.append((time.monotonic() - t0) * 1000)
            time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
        stop.set()
        t.join()
        cpu = cpu_seconds(d.pid) - cpu0
    finally:
        d.stop()
    rtts.sort()
    print("%d connections, %.0f s: PING rtt ms median %.2f p99 %.2f max %.2f (%d pings); "
          "daemon CPU %.0f %%; AUTH answers %s" % (
              a.n, a.d, rtts[len(rtts) // 2], rtts[int(len(rtts) * 0.99)], rtts[-1], len(rtts),
              100 * cpu / a.d, dict(sorted(answers.items()))))


def rtt(sock, line):
    t0 = time.monotonic()
    sock.sendall(line)
    got = b""
    while not got.endswith(b"\n"):
        got += sock.recv(256)
    return (time.monotonic() - t0) * 1000, got


def timing(port, pinger, rounds):
    """PING behind 10 wrong AUTHs, and one AUTH's refusal, per user kind."""
    result = {}
    for _ in range(rounds):
        for who in ("nobody", "slow"):
            conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
            for c in conns:
                c.sendall(b"AUTH %s wrong\n" % who.encode())
            ping, _ = rtt(pinger, b"PING\n")
            for c in conns:
                c.recv(256)
                c.close()
            one = socket.create_connection(("127.0.0.1", port))
            refuse, line = rtt(one, b"AUTH %s wrong\n" % who.encode())
            one.close()
            assert line.startswith(b"ERR AUTH_FAILED wrong"), line
            result.setdefault(who, ([], []))
            result[who][0].append(ping)
            result[who][1].append(refuse)
    for who, (pings, refusals) in result.items():
        pings.sort()
        refusals.sort()
        print("%-6s user: PING behind 10 wrong AUTHs median %.2f max %.2f ms; one AUTH "
              "refused in median %.2f max %.2f ms (%d rounds)" % (
                  "unknown" if who == "nobody" else "yescrypt", pings[len(pings) // 2],
                  pings[-1], refusals[len(refusals) // 2], refusals[-1], len(pings)))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
