#!/usr/bin/env python3
"""hostile.py - hostile clients against one embedded daemon (issue 41, item 7).

Usage: hostile.py [--seconds S] [--seed N] [--out DIR] [--attacks a,b,...]
                  [--strict] [--daemon PATH]

Starts one embedded lockbrokerd (LOCKBROKERD, or the built daemon) with a
plain port, a users file (sha512crypt and yescrypt users, the fixed hashes
of tests/e2e/test_auth.py), a TLS port (a throw-away CA made with the
openssl command, as tests/e2e/lbpki.py makes them) and metrics_listen.
Two well-behaved clients, one plain (alice, sha512crypt) and one over TLS
(slow, yescrypt), log in, take a lock each and send PING every 100 ms for
the whole run, recording every round trip. Then the attacks run one after
the other, each for --seconds:

  keep      one connection: LOCK kN 0 + UNLOCK kN keep=86400000, pipelined
  delay     connections that LOCK 200 names with delay=60000 and close
  lease     a user allowed only atk-* takes leases with ttl=86400000, then
            watches, until refused; then a well-behaved user tries one of each
  auth      100 anonymous connections, one wrong password a second each for
            the yescrypt user (from --auth-addresses source addresses)
  fds       connections to every port (plain, TLS, metrics) until refused,
            held, and more tried all along
  idle      connections that never log in (silent, PING only, half a line),
            plain and TLS, trying to fill max_clients
  locks     ~10,000 names held, then 100 clients that send LOCKS and never read

Each attack is then stopped as its user could stop it (its connections
closed; kept and delayed holds ended with BREAK by an operator, leases with
UNLOCK and their tokens). Per attack the report gives the well-behaved
clients' worst and 99th-percentile round trip during it, the PINGs that went
unanswered (100 ms slots with none answered), fresh logins tried every 2 s
(plain and TLS) and how they ended, the daemon's RSS, open descriptors and
CPU time before, at the end of and after the attack, the growth of its log,
and what the attacker achieved (holds, leases, refusals and their text).

Attackers connect from their own loopback addresses (127.0.<attack>.x), so
that the per-address AUTH back-off one of them provokes does not lock out
the well-behaved clients and the probes (127.0.0.1).

Features not built yet are not failures: the harness reports what it saw.
Exit status 1 when the daemon died or a well-behaved client lost its lock
or its connection; with --strict also when the bounds of the issue's "Done
when" are not met (listed at the end). Output: a table on stdout, and
summary.json, summary.md and the daemon's log (daemon.log) in --out.

Python 3 standard library only; the openssl command for the certificates.
"""

import argparse
import collections
import json
import os
import random
import re
import resource
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

from lbpki import Pki, have_openssl  # noqa: E402

# The fixed hashes and passwords of tests/e2e/test_auth.py.
from test_auth import HASHES, PASSWORDS  # noqa: E402

# alice: the plain well-behaved client and the probes; slow (yescrypt): the
# TLS one; bob: every attacker that logs in; carol: the operator (BREAK).
PATTERNS = {"alice": "good-*", "slow": "good-*", "bob": "atk-*", "carol": "*, break=*"}

ATTACKS = ("keep", "delay", "lease", "auth", "fds", "idle", "locks")
HOST = "127.0.0.1"
PING_EVERY = 0.1
PING_TIMEOUT = 10.0


def log(msg):
    sys.stdout.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stdout.flush()


def src(attack_no, i, spread=16):
    """The source address of an attacker's i-th connection."""
    return "127.0.%d.%d" % (attack_no, 1 + i % spread)


def short(line, n=100):
    return line if len(line) <= n else line[:n] + "..."


class Tally:
    """Outcomes by kind, with the first full text of each kind."""

    def __init__(self):
        self.counts = collections.Counter()
        self.texts = {}
        self.mu = threading.Lock()

    def add(self, kind, text=None, n=1):
        with self.mu:
            self.counts[kind] += n
            if text is not None and kind not in self.texts:
                self.texts[kind] = short(text, 160)

    def reply(self, prefix, line):
        """Counts a reply line under prefix + its first words."""
        words = line.split()
        if not words:
            self.add(prefix + "empty")
        elif words[0] == "ERR":
            self.add("%s%s" % (prefix, " ".join(words[:2])), line)
        else:
            self.add(prefix + words[0])

    def as_dict(self):
        with self.mu:
            return {"counts": dict(sorted(self.counts.items())), "texts": dict(self.texts)}


# ------------------------------------------------------------------ connections

class Conn:
    """A blocking connection read line by line, each read with a timeout."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, text):
        self.sock.sendall(text.encode() if isinstance(text, str) else text)

    def readline(self, timeout=10.0):
        """The next line without its newline; TimeoutError; EOFError at the end."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no line within %.1f s" % timeout)
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError("no line within %.1f s" % timeout)
            except (ssl.SSLError, ConnectionError) as e:
                raise EOFError(str(e))
            if not data:
                raise EOFError("closed by the daemon")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").rstrip("\r")

    def request(self, line, timeout=10.0):
        self.send(line + "\n")
        return self.readline(timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Env:
    """The daemon's addresses and what it takes to reach them."""

    def __init__(self, port, tls_port, metrics_port, tls_ctx):
        self.port, self.tls_port, self.metrics_port = port, tls_port, metrics_port
        self.tls_ctx = tls_ctx

    def raw(self, port, source=None, timeout=5.0):
        s = socket.create_connection((HOST, port), timeout=timeout,
                                     source_address=(source, 0) if source else None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def connect(self, tls=False, source=None, timeout=5.0):
        s = self.raw(self.tls_port if tls else self.port, source, timeout)
        if tls:
            try:
                s.settimeout(timeout)
                s = self.tls_ctx.wrap_socket(s, server_hostname="localhost")
            except BaseException:
                s.close()
                raise
        return Conn(s)

    def login(self, user, tls=False, source=None, timeout=10.0):
        """A connection logged in as user; AUTH again while the daemon says
        too many are being checked (ERR LIMIT)."""
        c = self.connect(tls, source, timeout)
        try:
            for _ in range(200):
                line = c.request("AUTH %s %s" % (user, PASSWORDS[user]), timeout)
                if line == "OK %s" % user:
                    return c
                if not line.startswith("ERR LIMIT"):
                    raise RuntimeError("AUTH %s from %s: %s" % (user, source or HOST, line))
                time.sleep(0.05)
            raise RuntimeError("AUTH %s: ERR LIMIT 200 times" % user)
        except BaseException:
            c.close()
            raise


def pipeline(conn, lines, chunk=500, timeout=30.0, on_reply=None, skip=None):
    """Sends lines in chunks, reading each chunk's replies before the next;
    returns the replies in order (None for those lost to a close). Lines
    skip() accepts (pushed EVENT lines) are not replies."""
    replies = []
    for i in range(0, len(lines), chunk):
        part = lines[i:i + chunk]
        try:
            conn.send("".join(x + "\n" for x in part))
            got = 0
            while got < len(part):
                line = conn.readline(timeout)
                if skip and skip(line):
                    continue
                replies.append(line)
                got += 1
                if on_reply:
                    on_reply(part[got - 1], line)
        except (EOFError, OSError, TimeoutError):
            replies += [None] * (len(lines) - len(replies))
            break
    return replies


# ------------------------------------------------------------------ the daemon

class Daemon:
    """lockbrokerd writing its log to a file (a flood of lines must not end
    up in this process's memory)."""

    READY_RE = re.compile(r"ready: (\S+) mode, (?:[^,]*, )*?listening on (\S+)")

    def __init__(self, binary, out, config):
        self.out = out
        self.conf = os.path.join(out, "lockbrokerd.conf")
        with open(self.conf, "w") as f:
            f.write(config)
        self.log_path = os.path.join(out, "daemon.log")
        self.logf = open(self.log_path, "wb")
        self.proc = subprocess.Popen([binary, "-c", self.conf, "-l", HOST + ":0"],
                                     stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        self.port = self.tls_port = self.metrics_port = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            text = self.log_text(0, 1 << 20)
            m = self.READY_RE.search(text)
            if m:
                self.port = int(m.group(2).rsplit(":", 1)[1])
                t = re.search(r"TLS on \S+:(\d+)", text)
                mt = re.search(r"serving /metrics and /healthz on http://\S+:(\d+)", text)
                self.tls_port = int(t.group(1)) if t else None
                self.metrics_port = int(mt.group(1)) if mt else None
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise SystemExit("lockbrokerd did not start:\n" + self.log_text(0, 4096))

    def log_text(self, offset, n):
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read(n).decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def sample(self):
        """RSS (kB), open descriptors, CPU seconds, threads, log bytes."""
        s = {"t": time.monotonic(), "log_bytes": os.path.getsize(self.log_path)}
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        s["rss_kb"] = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        s["threads"] = int(line.split()[1])
            s["fds"] = len(os.listdir("/proc/%d/fd" % self.pid))
            with open("/proc/%d/stat" % self.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            s["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            s["dead"] = True
        return s

    def log_growth(self, start, end, keep=5):
        """Lines between two offsets, and the most frequent shapes (digits
        folded) among the first 64 MB of them."""
        lines, shapes, seen = 0, collections.Counter(), 0
        with open(self.log_path, "rb") as f:
            f.seek(start)
            left, tail = end - start, b""
            while left > 0:
                data = f.read(min(left, 1 << 20))
                if not data:
                    break
                left -= len(data)
                lines += data.count(b"\n")
                if seen < (64 << 20):
                    seen += len(data)
                    parts = (tail + data).split(b"\n")
                    tail = parts.pop()
                    for p in parts:
                        text = p.decode("utf-8", "replace")
                        text = re.sub(r"^\S+ \S+ ", "", text)   # the time stamp
                        shapes[re.sub(r"\d+", "N", text)[:120]] += 1
        return lines, [[n, s] for s, n in shapes.most_common(keep)]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.logf.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


# ------------------------------------------------------------------ well-behaved

class Good(threading.Thread):
    """A logged-in client holding a lock and sending PING every 100 ms."""

    def __init__(self, env, name, tls, user, lock):
        super().__init__(name="good-" + name, daemon=True)
        self.label, self.lock_name = name, lock
        self.conn = env.login(user, tls=tls)
        reply = self.conn.request("LOCK %s 5000" % lock)
        m = re.match(r"OK %s (\d+)$" % re.escape(lock), reply)
        if not m:
            raise SystemExit("%s: LOCK %s answered %r" % (name, lock, reply))
        self.token = m.group(1)
        self.mu = threading.Lock()
        self.stopping = threading.Event()
        self.samples = []      # (send time, rtt s)
        self.missed = []       # 100 ms slots without an answered PING
        self.timeouts = []     # PINGs unanswered after PING_TIMEOUT
        self.problems = []     # LOST lines, a closed connection
        self.outstanding = 0

    def _read_pong(self, timeout):
        while True:
            line = self.conn.readline(timeout)
            if line == "PONG":
                if self.outstanding:
                    self.outstanding -= 1
                    continue
                return
            self.problems.append("%.1f %s" % (time.monotonic(), line))

    def run(self):
        slot = time.monotonic()
        while not self.stopping.is_set():
            now = time.monotonic()
            if now < slot:
                time.sleep(slot - now)
            with self.mu:
                t0 = time.monotonic()
                try:
                    self.conn.send("PING\n")
                    self._read_pong(PING_TIMEOUT)
                    self.samples.append((t0, time.monotonic() - t0))
                except TimeoutError:
                    self.timeouts.append(t0)
                    self.outstanding += 1
                except (EOFError, OSError) as e:
                    self.problems.append("%.1f connection: %s" % (time.monotonic(), e))
                    return
            slot += PING_EVERY
            now = time.monotonic()
            while slot < now:
                self.missed.append(slot)
                slot += PING_EVERY

    def check(self):
        """True while the lock is still this client's (CHECK)."""
        with self.mu:
            try:
                self.conn.send("CHECK %s\n" % self.lock_name)
                while True:
                    line = self.conn.readline(PING_TIMEOUT)
                    if line == "PONG" and self.outstanding:
                        self.outstanding -= 1
                        continue
                    break
            except (TimeoutError, EOFError, OSError) as e:
                self.problems.append("CHECK: %s" % e)
                return False
        if not line.startswith("OK %s %s " % (self.lock_name, self.token)):
            self.problems.append("CHECK %s: %s" % (self.lock_name, line))
            return False
        return True

    def window(self, t0, t1):
        rtts = sorted(r for t, r in self.samples if t0 <= t < t1)
        missed = sum(1 for t in self.missed if t0 <= t < t1)
        missed += sum(1 for t in self.timeouts if t0 <= t < t1)
        w = {"pings": len(rtts), "unanswered": missed}
        if rtts:
            w["worst_ms"] = round(rtts[-1] * 1000, 2)
            w["p99_ms"] = round(rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1000, 2)
            w["median_ms"] = round(rtts[len(rtts) // 2] * 1000, 2)
        return w


class Prober(threading.Thread):
    """A fresh login every 2 s, plain and TLS in turn, from 127.0.0.1: can a
    well-behaved newcomer get in?"""

    def __init__(self, env):
        super().__init__(name="prober", daemon=True)
        self.env = env
        self.stopping = threading.Event()
        self.tally = {False: Tally(), True: Tally()}
        self.worst = {False: 0.0, True: 0.0}

    def probe(self, tls):
        t0 = time.monotonic()
        try:
            c = self.env.connect(tls=tls, timeout=5.0)
        except ssl.SSLError as e:
            return "TLS handshake failed: %s" % e.reason, t0
        except (OSError, EOFError) as e:
            return "connect: %s" % (e.strerror or e), t0
        try:
            line = c.request("AUTH alice %s" % PASSWORDS["alice"], 5.0)
            if line != "OK alice":
                return line, t0
            line = c.request("PING", 5.0)
            return ("ok" if line == "PONG" else line), t0
        except TimeoutError:
            return "no answer within 5 s", t0
        except (EOFError, OSError) as e:
            return "closed: %s" % e, t0
        finally:
            c.close()

    def run(self):
        tls = False
        while not self.stopping.wait(1.0):
            if tls and not self.env.tls_port:
                tls = False
            what, t0 = self.probe(tls)
            self.worst[tls] = max(self.worst[tls], time.monotonic() - t0)
            self.tally[tls].add("ok" if what == "ok" else "failed", None if what == "ok"
                                else what)
            self.tally[tls].add("text:" + re.sub(r"\d+", "N", short(what, 80)))
            tls = not tls

    def result(self):
        out = {}
        for tls, t in self.tally.items():
            d = t.as_dict()["counts"]
            out["tls" if tls else "plain"] = {
                "ok": d.get("ok", 0), "tried": d.get("ok", 0) + d.get("failed", 0),
                "worst_s": round(self.worst[tls], 2),
                "outcomes": {k[5:]: v for k, v in d.items() if k.startswith("text:")}}
        return out


# ------------------------------------------------------------------ attacks

class Attack:
    """Base: run() attacks until self.deadline, calls self.at_end() once the
    attack's last moment is measured, then stops the attack."""

    no = 0

    def __init__(self, h, seconds):
        self.h, self.env, self.seconds = h, h.env, seconds
        self.tally = Tally()
        self.result = {}
        self.deadline = None
        self.ended = None

    def start(self):
        self.deadline = time.monotonic() + self.seconds

    def over(self):
        return time.monotonic() >= self.deadline

    def at_end(self):
        if self.ended is None:
            self.ended = self.h.measure_end()

    def operator_stats(self):
        try:
            c = self.env.login("carol")
            c.send("STATS\n")
            stats = {}
            while True:
                line = c.readline(30)
                if line == "END":
                    break
                w = line.split()
                if len(w) == 3 and w[0] == "STAT":
                    stats[w[1]] = w[2]
            c.close()
            return stats
        except (RuntimeError, OSError, EOFError, TimeoutError) as e:
            return {"error": str(e)}

    def break_all(self, names):
        """The operator ends each name's holds (BREAK), pipelined."""
        t0 = time.monotonic()
        t = Tally()
        try:
            c = self.env.login("carol")
        except (RuntimeError, OSError, EOFError, TimeoutError) as e:
            return {"error": str(e)}
        for r in pipeline(c, ["BREAK %s" % n for n in names], chunk=1000, timeout=60):
            t.reply("", r or "lost")
        c.close()
        return {"names": len(names), "seconds": round(time.monotonic() - t0, 2),
                "replies": t.as_dict()["counts"]}


class KeepFlood(Attack):
    """1. LOCK kN 0 + UNLOCK kN keep=86400000 on one connection."""

    name, no = "keep", 1

    def run(self):
        kept, closes, n = [], 0, 0
        c = self.env.login("bob", source=src(self.no, 0))
        while not self.over() and len(kept) < self.h.args.keep_cap:
            lines = []
            for _ in range(500):
                lines += ["LOCK atk-k%d 0" % n, "UNLOCK atk-k%d keep=86400000" % n]
                n += 1
            replies = pipeline(c, lines, chunk=1000)
            for req, rep in zip(lines, replies):
                verb = req.split()[0]
                if rep is None:
                    self.tally.add(verb + " lost")
                    continue
                self.tally.reply(verb + " ", rep)
                if verb == "UNLOCK" and rep.startswith("OK "):
                    kept.append(req.split()[1])
            if replies and replies[-1] is None:
                closes += 1
                c.close()
                if self.over():
                    break
                c = self.env.login("bob", source=src(self.no, closes))
        self.result["kept"] = len(kept)
        self.result["pairs_sent"] = n
        self.result["rate_per_s"] = round(len(kept) / self.seconds)
        self.result["closed_by_daemon"] = closes
        self.result["stats_at_end"] = {k: v for k, v in self.operator_stats().items()
                                       if k in ("locks_delayed", "locks_kept", "locks_held")}
        self.at_end()
        c.close()
        self.result["cleanup"] = self.break_all(kept)


class DelayChurn(Attack):
    """2. Connections that LOCK 200 names with delay=60000 and close."""

    name, no = "delay", 2
    WORKERS, PER_CONN = 8, 200

    def worker(self, w, names):
        i = 0
        while not self.over():
            try:
                c = self.env.connect(source=src(self.no, w))
            except OSError as e:
                self.tally.add("connect failed", str(e))
                time.sleep(0.1)
                continue
            batch = ["atk-d%d-%d" % (w, i * self.PER_CONN + j) for j in range(self.PER_CONN)]
            i += 1
            lines = ["AUTH bob %s" % PASSWORDS["bob"]] + \
                ["LOCK %s 0 delay=60000" % x for x in batch]
            replies = pipeline(c, lines, chunk=len(lines))
            self.tally.reply("AUTH ", replies[0] or "lost")
            for x, rep in zip(batch, replies[1:]):
                self.tally.reply("LOCK ", rep or "lost")
                if rep and rep.startswith("OK "):
                    names.append(x)
            c.close()
            self.tally.add("connections")

    def run(self):
        names = [[] for _ in range(self.WORKERS)]
        ts = [threading.Thread(target=self.worker, args=(w, names[w]), daemon=True)
              for w in range(self.WORKERS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        allnames = [x for part in names for x in part]
        time.sleep(0.5)                   # the last closes reach the daemon
        self.result["delayed_taken"] = len(allnames)
        self.result["stats_at_end"] = {k: v for k, v in self.operator_stats().items()
                                       if k in ("locks_delayed", "lock_delays")}
        self.at_end()
        self.result["cleanup"] = self.break_all(allnames)


class LeaseGrab(Attack):
    """3. A user allowed only atk-* takes leases, then watches."""

    name, no = "lease", 3

    def victim(self):
        """Can a well-behaved user still take a lease and a watch?"""
        out = {}
        try:
            c = self.env.login("alice")
            line = c.request("LOCK good-lease 0 ttl=5000")
            out["lease"] = line
            m = re.match(r"OK good-lease (\d+)$", line)
            if m:
                c.request("UNLOCK good-lease %s" % m.group(1))
            out["watch"] = c.request("WATCH good-watch")
            c.close()
        except (RuntimeError, OSError, EOFError, TimeoutError) as e:
            out["error"] = str(e)
        return out

    def run(self):
        leases, n, refused = {}, 0, 0
        half = time.monotonic() + self.seconds / 2
        c = self.env.login("bob", source=src(self.no, 0))
        while time.monotonic() < half and refused < 3:
            lines = ["LOCK atk-l%d 0 ttl=86400000" % (n + j) for j in range(500)]
            n += 500
            ok = 0
            for req, rep in zip(lines, pipeline(c, lines)):
                self.tally.reply("LEASE ", rep or "lost")
                m = rep and re.match(r"OK (\S+) (\d+)$", rep)
                if m:
                    leases[m.group(1)] = m.group(2)
                    ok += 1
            refused = refused + 1 if not ok else 0
        self.result["leases"] = len(leases)
        self.result["lease_seconds"] = round(time.monotonic() - (half - self.seconds / 2), 2)
        watchers, w, refused = [], 0, 0
        watches = 0
        while not self.over() and refused < 3 and w < self.h.args.watch_conns:
            try:
                wc = self.env.login("bob", source=src(self.no, 1 + w, 64))
            except (RuntimeError, OSError, EOFError, TimeoutError) as e:
                self.tally.add("WATCH login failed", str(e))
                refused += 1
                continue
            watchers.append(wc)
            lines = ["WATCH atk-w%d-%d" % (w, j) for j in range(100)]
            w += 1
            ok = 0
            for rep in pipeline(wc, lines, chunk=100, skip=lambda x: x.startswith("EVENT ")):
                self.tally.reply("WATCH ", rep or "lost")
                if rep and rep.startswith("OK "):
                    ok += 1
            watches += ok
            refused = refused + 1 if not ok else 0
        self.result["watches"] = watches
        self.result["watch_connections"] = len(watchers)
        time.sleep(max(0.0, self.deadline - time.monotonic()))   # held to the end
        self.result["victim"] = self.victim()
        self.at_end()
        for wc in watchers:
            wc.close()
        t0 = time.monotonic()
        gone = Tally()
        for rep in pipeline(c, ["UNLOCK %s %s" % kv for kv in leases.items()]):
            gone.reply("", rep or "lost")
        c.close()
        self.result["cleanup"] = {"unlock_leases": gone.as_dict()["counts"],
                                  "seconds": round(time.monotonic() - t0, 2)}


class AuthFlood(Attack):
    """4. Anonymous connections sending a wrong password for the yescrypt
    user, each once a second (after its answer)."""

    name, no = "auth", 4

    def open(self, i):
        try:
            return self.env.raw(self.env.port, src(self.no, i, self.h.args.auth_addresses))
        except OSError as e:
            self.tally.add("connect failed", str(e))
            return None

    def run(self):
        sel = selectors.DefaultSelector()
        conns = {}            # sock -> [index, next send, waiting, buf]
        for i in range(self.h.args.auth_conns):
            s = self.open(i)
            if s:
                s.setblocking(False)
                conns[s] = [i, 0.0, False, b""]
                sel.register(s, selectors.EVENT_READ)
        sent = 0
        while not self.over():
            now = time.monotonic()
            for s, st in list(conns.items()):
                if not st[2] and now >= st[1]:
                    try:
                        s.send(b"AUTH slow wrong\n")
                        sent += 1
                        st[1], st[2] = now + 1.0, True
                    except OSError:
                        pass
            for key, _ in sel.select(0.02):
                s = key.fileobj
                st = conns[s]
                try:
                    data = s.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.tally.add("closed by the daemon")
                    sel.unregister(s)
                    s.close()
                    del conns[s]
                    s2 = self.open(st[0])
                    if s2:
                        s2.setblocking(False)
                        conns[s2] = [st[0], 0.0, False, b""]
                        sel.register(s2, selectors.EVENT_READ)
                    continue
                st[3] += data
                while b"\n" in st[3]:
                    line, st[3] = st[3].split(b"\n", 1)
                    self.tally.reply("", line.decode("utf-8", "replace"))
                    st[2] = False
        self.result["auth_sent"] = sent
        self.result["connections"] = self.h.args.auth_conns
        self.result["addresses"] = self.h.args.auth_addresses
        self.at_end()
        for s in conns:
            s.close()
        sel.close()


class Holder:
    """Connections held open; finds those the daemon closes."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.conns = {}       # sock -> (kind, opened)
        self.closed = Tally()
        self.lifetimes = collections.defaultdict(list)
        self.last_talk = time.monotonic()

    def add(self, sock, kind):
        sock.setblocking(False)
        self.conns[sock] = (kind, time.monotonic())
        self.sel.register(sock, selectors.EVENT_READ)

    def poll(self):
        for key, _ in self.sel.select(0):
            s = key.fileobj
            kind, opened = self.conns[s]
            try:
                data = s.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (OSError, ssl.SSLError):
                data = b""
            if data:
                line = data.decode("utf-8", "replace").split("\n")[0]
                if line.startswith("ERR") or line.startswith("HTTP"):
                    self.closed.add("%s said: %s" % (kind, re.sub(r"\d+", "N", short(line, 60))),
                                    line)
                continue
            self.closed.add(kind)
            self.lifetimes[kind].append(time.monotonic() - opened)
            self.sel.unregister(s)
            s.close()
            del self.conns[s]

    def count(self):
        return collections.Counter(k for k, _ in self.conns.values())

    def close(self):
        for s in self.conns:
            try:
                s.close()
            except OSError:
                pass
        self.conns = {}
        self.sel.close()


class Opener(Attack):
    """Opens connections of self.kinds until refused, holds them, and keeps
    trying (5 and 6)."""

    def first_answer(self, s, send, timeout):
        """Sends send and reads one line: the line, "" at the end, None for none."""
        try:
            s.settimeout(timeout)
            if send:
                s.sendall(send)
            data = s.recv(4096)
            return data.decode("utf-8", "replace").split("\n")[0] if data else ""
        except socket.timeout:
            return None
        except (OSError, ssl.SSLError) as e:
            return "" if not isinstance(e, socket.timeout) else None

    def attempt(self, kind, i):
        """One connection of kind: ("held", sock) or (outcome, None)."""
        tls = kind.startswith("tls")
        port = {"plain": self.env.port, "tls": self.env.tls_port,
                "metrics": self.env.metrics_port}[kind.split("-")[0]]
        if not port:
            return "no such port", None
        try:
            s = self.env.raw(port, src(self.no, i), timeout=1.0)
        except ConnectionRefusedError:
            return "connect refused", None
        except OSError as e:
            return "connect: %s" % (e.strerror or e), None
        if tls:
            try:
                s.settimeout(2.0)
                s = self.env.tls_ctx.wrap_socket(s, server_hostname="localhost")
            except socket.timeout:
                s.close()
                return "TLS handshake: no answer", None
            except (ssl.SSLError, OSError) as e:
                s.close()
                return "TLS handshake failed (%s)" % getattr(e, "reason", e), None
        return self.greet(kind, s)

    def greet(self, kind, s):
        base = kind.split("-", 1)[-1] if "-" in kind else kind
        if base == "metrics":
            line = self.first_answer(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 1.0)
            ok = line is not None and line.startswith("HTTP/1.1 200")
        elif base in ("plain", "tls", "ping"):
            line = self.first_answer(s, b"PING\n", 1.0)
            ok = line == "PONG"
        else:
            line = self.first_answer(s, b"LOCK half-a-line-" if base == "half" else b"", 0.1)
            ok = line is None          # nothing said: kept open, waiting for us
        if ok:
            return "held", s
        s.close()
        if line is None:
            return "no answer within 1 s (in the backlog)", None
        if line == "":
            return "closed at once", None
        return re.sub(r"\d+", "N", short(line, 80)), None

    def open_loop(self, t, kind_of, holder, cap, tick=None):
        """Opener thread t: connections of kind_of(rng) until the deadline."""
        rng = random.Random(self.h.args.seed * 1000 + self.no * 100 + t)
        i, last_tick = t, time.monotonic()
        while not self.over():
            kind = kind_of(rng)
            if len(holder.conns) < cap:
                what, s = self.attempt(kind, i)
                i += self.threads
                if s is not None:
                    holder.add(s, kind)
                    self.tally.add("held " + kind)
                else:
                    self.tally.add("%s: %s" % (kind, what))
                    time.sleep(0.02)
            else:
                time.sleep(0.05)
            if time.monotonic() - last_tick >= 1.0:
                holder.poll()
                if tick:
                    tick(holder)
                last_tick = time.monotonic()
        holder.poll()
        self.attempts += (i - t) // self.threads

    def open_all(self, kind_for_thread, tick=None):
        """self.threads opener threads; returns their holders, still open."""
        self.threads = self.h.args.openers
        self.attempts = 0
        holders = [Holder() for _ in range(self.threads)]
        cap = max(1, self.h.args.fd_cap // self.threads)
        ts = [threading.Thread(target=self.open_loop, daemon=True,
                               args=(t, kind_for_thread(t), holders[t], cap, tick))
              for t in range(self.threads)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        held = collections.Counter()
        closed, lifetimes = Tally(), collections.defaultdict(list)
        for h in holders:
            held.update(h.count())
            for k, v in h.closed.counts.items():
                closed.add(k, h.closed.texts.get(k), v)
            for k, v in h.lifetimes.items():
                lifetimes[k] += v
        self.result["attempts"] = self.attempts
        self.result["held_at_end"] = dict(sorted(held.items()))
        self.result["closed_by_daemon"] = closed.as_dict()
        self.result["closed_lifetime_s"] = {k: [round(min(v), 1), round(max(v), 1)]
                                            for k, v in lifetimes.items()}
        return holders


class FdExhaustion(Opener):
    """5. Connections to the plain, TLS and metrics ports until refused."""

    name, no = "fds", 5

    def run(self):
        ports = ["plain", "tls", "metrics"] if self.env.tls_port else ["plain", "metrics"]
        holders = self.open_all(lambda t: (lambda rng: ports[t % len(ports)]))
        self.at_end()
        for h in holders:
            h.close()
        self.result["accepts_again_after_s"] = self.h.recovery()


class IdleAnon(Opener):
    """6. Anonymous connections that never log in."""

    name, no = "idle", 6
    KINDS = ("plain-silent", "plain-ping", "plain-half", "tls-silent", "tls-ping", "tls-half")

    def tick(self, holder):
        """PING and half-line connections say something every 5 s."""
        now = time.monotonic()
        if now - holder.last_talk < 5.0:
            return
        holder.last_talk = now
        for s, (kind, _) in list(holder.conns.items()):
            msg = b"PING\n" if kind.endswith("ping") else b"x" if kind.endswith("half") else None
            if msg:
                try:
                    s.send(msg)
                except (OSError, ssl.SSLError):
                    pass

    def run(self):
        kinds = self.KINDS if self.env.tls_port else self.KINDS[:3]
        holders = self.open_all(lambda t: (lambda rng: rng.choice(kinds)), self.tick)
        self.at_end()
        for h in holders:
            h.close()
        self.result["accepts_again_after_s"] = self.h.recovery()


class LocksNonReaders(Attack):
    """7. ~10,000 names held, then clients that send LOCKS and never read."""

    name, no = "locks", 7

    def setup(self):
        """Holds the names (40 connections of 250): before the 'before' sample."""
        self.fillers, names = [], 0
        per = 250
        pad = "-" + "x" * 80
        for k in range((self.h.args.locks_names + per - 1) // per):
            c = self.env.login("bob", source=src(self.no, 0))
            c.request("CLIENT atk-filler-%d-%s" % (k, "y" * 80))
            replies = pipeline(c, ["LOCK atk-f%d-%d%s 0" % (k, j, pad) for j in range(per)])
            names += sum(1 for r in replies if r and r.startswith("OK "))
            self.fillers.append(c)
        self.result["names_held"] = names

    def run(self):
        readers, t = [], Tally()
        for i in range(self.h.args.locks_clients):
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.bind((src(self.no, 1 + i, 64), 0))
                s.settimeout(10)
                s.connect((HOST, self.env.port))
                c = Conn(s)
                while True:
                    line = c.request("AUTH bob %s" % PASSWORDS["bob"])
                    if not line.startswith("ERR LIMIT"):
                        break
                    time.sleep(0.05)
                t.reply("AUTH ", line)
                c.send("LOCKS\n" * self.h.args.locks_repeat)
                s.setblocking(False)
                readers.append(s)
            except OSError as e:
                t.add("connect failed", str(e))
        sends = len(readers) * self.h.args.locks_repeat
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        # A reader's LOCKS meanwhile: how long one whole listing takes.
        try:
            c = self.env.login("bob")
            t0 = time.monotonic()
            c.send("LOCKS\n")
            n = 0
            while c.readline(60) != "END":
                n += 1
            self.result["one_reader_locks"] = {"lines": n,
                                               "seconds": round(time.monotonic() - t0, 3)}
            c.close()
        except (RuntimeError, OSError, EOFError, TimeoutError) as e:
            self.result["one_reader_locks"] = {"error": str(e)}
        self.result["non_readers"] = len(readers)
        self.result["locks_sent"] = sends
        self.result["logins"] = t.as_dict()["counts"]
        self.at_end()
        for s in readers:
            s.close()
        for c in self.fillers:
            c.close()


CLASSES = {c.name: c for c in (KeepFlood, DelayChurn, LeaseGrab, AuthFlood, FdExhaustion,
                               IdleAnon, LocksNonReaders)}


# ------------------------------------------------------------------ the run

class Harness:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.failures = []
        self.results = []

    def config(self, out):
        users = os.path.join(out, "users")
        with open(users, "w") as f:
            for u, p in PATTERNS.items():
                f.write("%s:%s:%s\n" % (u, HASHES[u], p))
        os.chmod(users, 0o600)
        text = ("[server]\nusers_file = %s\nmax_clients = %d\nmetrics_listen = %s:0\n"
                % (users, self.args.max_clients, HOST))
        text += "".join(x + "\n" for x in self.args.conf)
        self.tls_ctx = None
        if have_openssl():
            pki = Pki(os.path.join(out, "pki"))
            cert, key = pki.issue("localhost", server=True)
            text += ("[tls]\nlisten = %s:0\ncert_file = %s\nkey_file = %s\nca_file = %s\n"
                     "client_certs = none\n" % (HOST, cert, key, pki.ca))
            self.tls_ctx = ssl.create_default_context(cafile=pki.ca)
        else:
            log("no openssl command: no TLS port, no TLS client")
        return text

    def measure_end(self):
        return (time.monotonic(), self.d.sample())

    def recovery(self, limit=10.0):
        """Seconds until a fresh plain login gets in again, or None."""
        t0 = time.monotonic()
        p = Prober(self.env)
        while time.monotonic() - t0 < limit:
            what, _ = p.probe(False)
            if what == "ok":
                return round(time.monotonic() - t0, 3)
            time.sleep(0.05)
        return None

    def run_attack(self, cls):
        a = cls(self, self.args.seconds)
        log("attack %s: %s" % (a.name, cls.__doc__.split("\n")[0]))
        if hasattr(a, "setup"):
            a.setup()
        time.sleep(self.args.settle)
        before = self.d.sample()
        prober = Prober(self.env)
        prober.start()
        t0 = time.monotonic()
        a.start()
        try:
            a.run()
        except Exception as e:          # noqa: BLE001 - reported, the run goes on
            a.result["harness_error"] = "%s: %s" % (type(e).__name__, e)
            log("attack %s: harness error %s" % (a.name, a.result["harness_error"]))
        a.at_end()
        t_end, end = a.ended
        t_stop = time.monotonic()
        prober.stopping.set()
        prober.join()
        time.sleep(self.args.settle)
        after = self.d.sample()
        lines, shapes = self.d.log_growth(before["log_bytes"], after["log_bytes"])
        lines_during, _ = self.d.log_growth(before["log_bytes"], end["log_bytes"], 0)
        r = {"attack": a.name, "seconds": round(t_end - t0, 1),
             "stop_seconds": round(t_stop - t_end, 1),
             "clients": {g.label: g.window(t0, t_end) for g in self.goods},
             "clients_while_stopping": {g.label: g.window(t_end, t_stop) for g in self.goods},
             "probes": prober.result(),
             "before": before, "end": end, "after": after,
             "cpu_percent_during": round(100 * (end.get("cpu_s", 0) - before.get("cpu_s", 0))
                                         / max(0.001, t_end - t0), 1),
             "log": {"bytes": after["log_bytes"] - before["log_bytes"], "lines": lines,
                     "lines_during": lines_during, "top": shapes},
             "achieved": a.result, "replies": a.tally.as_dict()}
        alive = self.d.alive()
        r["daemon_alive"] = alive
        if not alive:
            self.failures.append("%s: the daemon died (exit %s)" % (a.name,
                                                                    self.d.proc.returncode))
        for g in self.goods:
            if alive and not g.check():
                self.failures.append("%s: %s lost its lock: %s" % (a.name, g.label,
                                                                   g.problems[-3:]))
            elif g.problems:
                self.failures.append("%s: %s: %s" % (a.name, g.label, g.problems[-3:]))
                g.problems.clear()
        self.results.append(r)
        log(one_line(r))
        return alive

    def main(self):
        a = self.args
        out = os.path.abspath(a.out)
        os.makedirs(out, exist_ok=True)
        self.d = Daemon(a.daemon, out, self.config(out))
        log("lockbrokerd %d: plain %s, TLS %s, metrics %s; log %s"
            % (self.d.pid, self.d.port, self.d.tls_port, self.d.metrics_port, self.d.log_path))
        self.env = Env(self.d.port, self.d.tls_port, self.d.metrics_port, self.tls_ctx)
        self.goods = [Good(self.env, "plain", False, "alice", "good-plain")]
        if self.d.tls_port:
            self.goods.append(Good(self.env, "tls", True, "slow", "good-tls"))
        for g in self.goods:
            g.start()
        start = self.d.sample()
        try:
            for name in a.attacks:
                if not self.run_attack(CLASSES[name]):
                    break
        finally:
            for g in self.goods:
                g.stopping.set()
            for g in self.goods:
                g.join(PING_TIMEOUT + 1)
            final = self.d.sample()
            rc = self.d.stop()
        if rc not in (0, None) and not self.failures:
            self.failures.append("the daemon exited %s on SIGTERM" % rc)
        strict = strict_checks(self.results, a)
        summary = {"daemon": a.daemon, "commit": git_commit(), "settings": settings(a),
                   "start": start, "final": final, "exit_code": rc, "attacks": self.results,
                   "failures": self.failures, "strict": strict}
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        table = markdown(self.results)
        with open(os.path.join(out, "summary.md"), "w") as f:
            f.write(table)
        print()
        print(table)
        for ok, what in strict:
            print("%s %s" % ("met    " if ok else "NOT MET", what))
        for what in self.failures:
            print("FAILURE " + what)
        print("summary: %s" % os.path.join(out, "summary.json"))
        if self.failures:
            return 1
        if a.strict and not all(ok for ok, _ in strict):
            return 1
        return 0


def one_line(r):
    c = r["clients"]
    return ("%s: worst %s; RSS %s; fds %s; CPU %s%%; log +%d lines; %s" % (
        r["attack"], ", ".join("%s %s ms" % (k, v.get("worst_ms")) for k, v in c.items()),
        "/".join(mb(r[x]) for x in ("before", "end", "after")),
        "/".join(str(r[x].get("fds")) for x in ("before", "end", "after")),
        r["cpu_percent_during"], r["log"]["lines"], achieved_text(r)))


def mb(sample):
    return "%.1f" % (sample.get("rss_kb", 0) / 1024.0)


def achieved_text(r):
    a = r["achieved"]
    keys = {"keep": ["kept", "closed_by_daemon"], "delay": ["delayed_taken"],
            "lease": ["leases", "watches"], "auth": ["auth_sent"],
            "fds": ["held_at_end", "closed_by_daemon", "accepts_again_after_s"],
            "idle": ["held_at_end", "closed_by_daemon", "closed_lifetime_s",
                     "accepts_again_after_s"],
            "locks": ["names_held", "non_readers", "locks_sent", "one_reader_locks"]}[r["attack"]]
    def brief(v):
        return v["counts"] if isinstance(v, dict) and "counts" in v else v
    parts = ["%s=%s" % (k, json.dumps(brief(a.get(k))).replace('"', "")) for k in keys]
    if r["attack"] == "lease":
        v = a.get("victim", {})
        parts.append("victim lease: %s; watch: %s" % (v.get("lease"), v.get("watch")))
    refusals = {k: v for k, v in r["replies"]["counts"].items() if "ERR" in k or "closed" in k
                or ": " in k}
    if refusals:
        parts.append("refusals " + ", ".join("%s x%d" % (k, v) for k, v in
                                            sorted(refusals.items(), key=lambda x: -x[1])[:4]))
    return "; ".join(parts)


def markdown(results):
    rows = ["| attack | PING worst / p99 ms (plain; TLS) | unanswered | logins ok (plain; TLS) "
            "| RSS MB before / end / after | fds before / end / after | CPU during | log lines "
            "| attacker achieved |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        c = r["clients"]
        p = r["probes"]
        rows.append("| %s | %s | %d | %s | %s | %s | %s %% | %d | %s |" % (
            r["attack"],
            "; ".join("%s / %s" % (v.get("worst_ms"), v.get("p99_ms")) for v in c.values()),
            sum(v["unanswered"] for v in c.values()),
            "; ".join("%d/%d" % (v["ok"], v["tried"]) for v in p.values()),
            " / ".join(mb(r[x]) for x in ("before", "end", "after")),
            " / ".join(str(r[x].get("fds")) for x in ("before", "end", "after")),
            r["cpu_percent_during"], r["log"]["lines"],
            achieved_text(r).replace("|", "/")))
    return "\n".join(rows) + "\n"


def strict_checks(results, a):
    """The issue's "Done when", as far as this run can tell: (met, what)."""
    by = {r["attack"]: r for r in results}
    out = []
    if "keep" in by:
        k = by["keep"]["achieved"].get("kept", 0)
        out.append((k <= a.strict_holds, "keep: %d kept holds <= %d" % (k, a.strict_holds)))
    if "delay" in by:
        k = by["delay"]["achieved"].get("delayed_taken", 0)
        out.append((k <= a.strict_holds, "delay: %d delayed holds <= %d" % (k, a.strict_holds)))
    if "lease" in by:
        v = by["lease"]["achieved"].get("victim", {})
        ok = (v.get("lease") or "").startswith("OK") and (v.get("watch") or "").startswith("OK")
        out.append((ok, "lease: a well-behaved user still gets a lease and a watch (%s; %s)"
                    % (v.get("lease"), v.get("watch"))))
    if "auth" in by:
        w = max(v.get("worst_ms") or 1e9 for v in by["auth"]["clients"].values())
        out.append((w < 50, "auth: PING worst %.1f ms < 50 ms" % w))
    if "fds" in by:
        r = by["fds"]
        out.append((r["cpu_percent_during"] <= a.strict_cpu,
                    "fds: CPU %.1f %% <= %d %%" % (r["cpu_percent_during"], a.strict_cpu)))
        out.append((r["log"]["lines"] <= a.strict_log_lines,
                    "fds: %d log lines <= %d" % (r["log"]["lines"], a.strict_log_lines)))
        again = r["achieved"].get("accepts_again_after_s")
        out.append((again is not None and again <= 2,
                    "fds: accepts again within 2 s of the close (%s s)" % again))
    if "idle" in by:
        closed = by["idle"]["achieved"].get("closed_by_daemon", {})
        n = sum(v for k, v in closed.get("counts", {}).items() if "said" not in k)
        out.append((n > 0, "idle: the daemon closed connections that did not log in (%d)" % n))
        p = by["idle"]["probes"]
        ok = all(v["ok"] * 2 >= v["tried"] for v in p.values())
        out.append((ok, "idle: at least half the fresh logins got in (%s)" % "; ".join(
            "%s %d/%d" % (k, v["ok"], v["tried"]) for k, v in p.items())))
    if "locks" in by:
        r = by["locks"]
        g = (r["end"].get("rss_kb", 0) - r["before"].get("rss_kb", 0)) / 1024.0
        out.append((g <= a.strict_locks_mb, "locks: RSS +%.1f MB <= %d MB" % (g, a.strict_locks_mb)))
    return out


def git_commit():
    try:
        return subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def settings(a):
    return {k: v for k, v in vars(a).items()}


def default_daemon():
    return os.environ.get("LOCKBROKERD") or os.path.normpath(
        os.path.join(HERE, "..", "..", "daemon", "lockbrokerd"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--daemon", default=default_daemon())
    ap.add_argument("--seconds", type=float, default=25.0, help="per attack (25)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="hostile-out")
    ap.add_argument("--attacks", default=",".join(ATTACKS),
                    help="comma-separated, of: " + ", ".join(ATTACKS))
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds of quiet before and after each attack (3)")
    ap.add_argument("--max-clients", type=int, default=1000,
                    help="the daemon's max_clients (1000): the descriptor limit follows")
    ap.add_argument("--conf", action="append", default=[],
                    help="one more line of the daemon's [server] section, e.g. "
                         "'auth_threads = 2' (repeat for more)")
    ap.add_argument("--keep-cap", type=int, default=300000,
                    help="keep: stop after this many kept holds, to spare the machine (300000)")
    ap.add_argument("--auth-conns", type=int, default=100)
    ap.add_argument("--auth-addresses", type=int, default=100,
                    help="auth: source addresses the connections come from (100)")
    ap.add_argument("--watch-conns", type=int, default=150,
                    help="lease: at most this many connections of 100 watches (150)")
    ap.add_argument("--fd-cap", type=int, default=2000,
                    help="fds, idle: hold at most this many connections (2000)")
    ap.add_argument("--openers", type=int, default=12,
                    help="fds, idle: threads opening connections (12)")
    ap.add_argument("--locks-names", type=int, default=10000)
    ap.add_argument("--locks-repeat", type=int, default=2,
                    help="locks: LOCKS each non-reader sends at once (2)")
    ap.add_argument("--locks-clients", type=int, default=100)
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 too when a bound of the issue's 'Done when' is not met")
    ap.add_argument("--strict-holds", type=int, default=10000)
    ap.add_argument("--strict-cpu", type=int, default=20)
    ap.add_argument("--strict-log-lines", type=int, default=100)
    ap.add_argument("--strict-locks-mb", type=int, default=8)
    a = ap.parse_args()
    a.attacks = [x.strip() for x in a.attacks.split(",") if x.strip()]
    bad = [x for x in a.attacks if x not in CLASSES]
    if bad:
        ap.error("unknown attack(s) %s; the attacks are %s" % (bad, ", ".join(ATTACKS)))
    if not os.access(a.daemon, os.X_OK):
        ap.error("no daemon at %s (build it, or set LOCKBROKERD or --daemon)" % a.daemon)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.fd_cap + a.max_clients + 500
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))
    log("seed %d, %g s per attack, attacks %s" % (a.seed, a.seconds, ",".join(a.attacks)))
    sys.exit(Harness(a).main())


if __name__ == "__main__":
    main()
