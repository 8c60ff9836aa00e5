#!/usr/bin/env python3
"""End-to-end tests of the handover (daemon/handover.h): SIGUSR2 makes the
daemon execute its successor in the same process, which takes over every
connection, hold, wait, lease and watch; under systemd (LOCKBROKERD_FDSTORE=1)
SIGTERM passes the same through the file descriptor store to the next start.

Embedded mode only. Covers: everything a client can have at the daemon
surviving a handover (holds with their tokens and labels, a waiter, a
watcher, shared and limit holds, a lease, a running lock-delay, half a
request line, a set waiting half way, `lockbroker run` and its command),
two handovers in a row, a successor whose check fails, one that does not
start, snapshots the successor refuses (another format, truncated, a
changed byte) or cannot restore, TLS connections (closed, not carried), and
the systemd path, with a stand-in for systemd's notify socket.

No test sleeps to synchronise: each waits for a reply, a log line or end of
file. The one bound on time (a lock-delay is not cut short by a handover)
only asserts that something did not happen too early.
"""

import http.client
import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import (Client, Daemon, TIMEOUT, daemon_path, make_tmpdir,  # noqa: E402
                       read_stats, run_daemon, scaled)
from lbpki import Pki, have_openssl, tls_section, TLS_LISTEN_RE  # noqa: E402
from test_embedded import tcp_queues  # noqa: E402
from test_tls import TlsClient  # noqa: E402

TOKEN = r"(\d+)"
# `openssl passwd -6 -salt lbtesthunter2 hunter2` (test_auth.py's alice)
ALICE_HASH = ("$6$lbtesthunter2$ms9bf49IIzrJYI8.ns.owCRM0MxFMINUOmhBJxmHyyFpPn3L88VTo."
              "ldPhMEMF/ZksVMlp/L/a8MQS5czeLx5/")
TOOK_OVER_RE = (r"handover: took over (\d+) connections, (\d+) holds and waits, (\d+) leases "
                r"and (\d+) watches from (the daemon before|systemd's file descriptor store); "
                r"(\d+) ms after the daemon before stopped parsing$")
REFUSING_RE = (r"handover: refusing the snapshot passed on: (.*); closing the connections it "
               r"carried \(their locks end, as in a crash\) and starting afresh$")
NOT_ADD_UP_RE = (r"handover: the snapshot passed on does not add up: (.*); closing the "
                 r"connections it carried \(their locks end, as in a crash\) and starting afresh$")
# How a handover ends, one way or another: waited for, so that a failure
# shows at once, with its reason, instead of a timeout.
HANDOVER_END_RE = (r"handover: (?:took over|the snapshot passed on does not add up|refusing the "
                   r"snapshot|refused|given up)")
ERR_CONFLICT_LIMIT = ("ERR CONFLICT the lock is in use with limit=%d; every holder and waiter "
                      "must ask for the same limit")
VALGRIND = ["valgrind", "--quiet", "--trace-children=yes", "--error-exitcode=99",
            "--leak-check=full", "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite"]


def client_path():
    return os.environ.get("LOCKBROKER") or os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "cli",
                     "lockbroker"))


def build_dir():
    """The top of the build tree: the daemon binary is daemon/lockbrokerd in it."""
    return os.path.dirname(os.path.dirname(os.path.abspath(daemon_path())))


def built_with_libsystemd():
    """True/False from the build's config.h; None when it cannot be found."""
    try:
        with open(os.path.join(build_dir(), "config.h")) as f:
            return re.search(r"^#define HAVE_LIBSYSTEMD 1$", f.read(), re.M) is not None
    except OSError:
        return None


def daemon_version():
    """What lockbrokerd -V says after its name."""
    r = run_daemon(["-V"])
    return r.stdout.split()[1]


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


def snapshot(records, fmt=1, version="test", count=None):
    """A snapshot (daemon/snap.h) of records (lines without "\\n"), with a
    right checksum; count: what the end line says instead of the truth."""
    body = ("lockbrokerd-snapshot %d %s\n" % (fmt, version)).encode()
    body += b"".join(r.encode("latin-1") + b"\n" for r in records)
    n = len(records) if count is None else count
    return body + b"end %d %016x\n" % (n, fnv1a64(body))


def reforge(snap, fmt):
    """A snapshot's records under another format number, checksum made good."""
    body = snap[:snap.rindex(b"\nend ") + 1]
    head, rest = body.split(b"\n", 1)
    words = head.split(b" ")
    words[1] = str(fmt).encode()
    body = b" ".join(words) + b"\n" + rest
    n = int(snap[snap.rindex(b"\nend ") + 5:].split()[0])
    return body + b"end %d %016x\n" % (n, fnv1a64(body))


def memfd_holding(data):
    """A memfd with data in it, read from its start; inheritable."""
    fd = os.memfd_create("lbtest-snapshot", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def listener_inode(port):
    """The inode of the socket listening on 127.0.0.1:port (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            if fields[1] == "0100007F:%04X" % port and fields[3] == "0A":
                return int(fields[9])
    return None


def socket_inodes(pid):
    """The inodes of pid's open sockets."""
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            m = re.match(r"socket:\[(\d+)\]$", os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            continue
        if m:
            out.add(int(m.group(1)))
    return out


def replace_with_script(exe, script):
    """The binary exe (running, so not writable) replaced by a shell script."""
    new = exe + ".new"
    with open(new, "w") as f:
        f.write("#!/bin/sh\n" + script)
    os.chmod(new, 0o755)
    os.rename(new, exe)


def wait_readable(fd, timeout, what):
    if not select.select([fd], [], [], timeout)[0]:
        raise AssertionError("%s: nothing within %.1fs" % (what, timeout))


class Job:
    """`lockbroker run NAME -- sh -c ...`: the command writes its token to a
    file, then a timestamp (ns since the epoch) to another file and "tick" to
    its stdout every 50 ms until a stop file appears, then exits 7."""

    SCRIPT = ('echo "$LOCKBROKER_TOKEN" > token; '
              'while [ ! -e stop ]; do date +%s%N >> ticks; echo tick; sleep 0.05; done; '
              'exit 7')

    def __init__(self, daemon, name):
        self.dir = make_tmpdir()
        self.buf = b""
        self.proc = subprocess.Popen(
            [client_path(), "-H", daemon.listen_addr, "run", name, "--", "sh", "-c",
             self.SCRIPT], cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)

    def tick(self, timeout=None):
        """Waits for the command's next "tick"."""
        timeout = TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            wait_readable(fd, max(0, deadline - time.monotonic()), "lockbroker run's command")
            data = os.read(fd, 4096)
            if not data:
                raise AssertionError("lockbroker run ended (%r): %r"
                                     % (self.proc.wait(), self.proc.stderr.read()))
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        if line != b"tick":
            raise AssertionError("the command printed %r" % line)

    def tick_after(self, ns, timeout=None):
        """Waits for ticks until the file has a timestamp later than ns
        (the pipe may hold ticks from before)."""
        deadline = time.monotonic() + (TIMEOUT if timeout is None else timeout)
        while True:
            self.tick(max(0, deadline - time.monotonic()))
            if int(self.file("ticks").split()[-1]) > ns:
                return

    def file(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def stop(self):
        """Makes the command exit 7; returns lockbroker's exit code and stderr."""
        open(os.path.join(self.dir, "stop"), "w").close()
        try:
            _, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("lockbroker run did not end")
        return self.proc.returncode, err.decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


class Case(unittest.TestCase):
    """Helpers; every daemon a test starts is stopped (exit 0 asserted) after
    it, unless the test saw it end."""

    def start(self, timeout=None, stop_sig=signal.SIGTERM, **kw):
        d = Daemon(**kw).start(timeout)
        self.addCleanup(self.stop_daemon, d, stop_sig)
        return d

    @staticmethod
    def stop_daemon(d, sig=signal.SIGTERM):
        if d.returncode is None:
            d.stop(sig)

    def connect(self, d, **kw):
        c = d.client(**kw)
        self.addCleanup(c.close)
        return c

    def granted(self, c, name, timeout=None):
        return int(c.expect_match(r"OK %s %s" % (re.escape(name), TOKEN), timeout).group(1))

    def lock(self, c, name, opts=""):
        c.send("LOCK %s%s\n" % (name, opts and " " + opts))
        return self.granted(c, name)

    def queue(self, d, c, name, req=None):
        c.send((req or "LOCK %s" % name) + "\n")
        d.wait_queued(c, name)

    def handover(self, d):
        """SIGUSR2, then waits for the successor's "took over" and "ready"
        lines. Returns the "took over" match."""
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        return self.took_over(d, mark)

    def took_over(self, d, mark, timeout=None):
        """Waits for the end of the handover begun after log line mark, which
        must be the successor's taking over, and its "ready" line. Returns
        the "took over" match."""
        end = d.wait_log(HANDOVER_END_RE, timeout=timeout or scaled(10), since=mark)
        m = re.search(TOOK_OVER_RE, end.string)
        if not m:
            self.fail("the handover ended otherwise: %s\n%s" % (end.string, d.log_tail()))
        d.wait_log(Daemon.READY_RE, since=mark)
        return m

    def wait_read_by_daemon(self, c):
        """Waits until the daemon has read everything c sent (polls the TCP
        queues: the kernel has no event for it)."""
        deadline = time.monotonic() + TIMEOUT
        while tcp_queues(c) != (0, 0):
            self.assertLess(time.monotonic(), deadline, "the daemon left %r unread"
                            % (tcp_queues(c),))
            time.sleep(0.005)

    def assert_sock_eof(self, sock, what):
        """sock's peer closed it (within TIMEOUT), having sent nothing."""
        sock.settimeout(TIMEOUT)
        try:
            data = sock.recv(100)
        except socket.timeout:
            self.fail("%s: still open after %.1fs" % (what, TIMEOUT))
        self.assertEqual(data, b"", "%s: not closed" % what)

    def assert_eof(self, c, what):
        try:
            c.read_to_eof()
        except AssertionError as e:
            raise AssertionError("%s: connection not closed: %s" % (what, e))

    def daemon_ids(self, d):
        with d._cond:
            return [m.group(1) for m in (re.search(r"daemon id (\S+)$", l) for l in d.lines)
                    if m]


# ------------------------------------------------------------------ a.

class EverythingSurvives(Case):
    """One daemon with every kind of client state, handed over once."""

    def test_everything_a_client_has_survives_a_handover(self):
        self.scenario(self.start())

    @lbharness.skip_unless(shutil.which("valgrind"), "valgrind", "valgrind not found")
    def test_under_valgrind(self):
        """The same with the daemon, its check and its successor under
        valgrind (--trace-children): the successor's findings make it exit
        99 (stop() asserts 0); the daemon before exits by exec, so its
        findings are looked for in the log."""
        d = self.start(wrapper=VALGRIND, timeout=scaled(60))
        # A longer lock-delay: under valgrind on a loaded machine the steps
        # from the close to the TRYLOCK after the handover took over 4 s.
        self.scenario(d, timeout=scaled(60), delay_ms=15000)
        d.stop(timeout=scaled(60))
        self.assertEqual([l for l in d.lines if re.match(r"==\d+== ", l)], [], d.log_tail(60))

    def scenario(self, d, timeout=None, delay_ms=4000):
        c = {k: self.connect(d) for k in ("holder", "waiter", "watcher", "reader", "sem",
                                          "leaser", "delayed", "half", "set", "other")}
        holder, waiter, watcher = c["holder"], c["waiter"], c["watcher"]
        self.assertEqual(holder.request("CLIENT holder-a"), "OK")
        ta = self.lock(holder, "a")
        self.queue(d, waiter, "a")
        watcher.send("WATCH a\n")
        watcher.expect("OK a")
        event_held = r"EVENT a held %d holders=1 label=%s holder=\S+/%s mode=exclusive$"
        watcher.expect_match(event_held % (ta, "holder-a", re.escape(holder.local)))
        ts = self.lock(c["reader"], "s", "shared")
        tl = self.lock(c["sem"], "l", "limit=3")
        tx = self.lock(c["leaser"], "x", "ttl=60000")
        c["leaser"].close()                     # the lease is no connection's
        d.wait_closed(c["leaser"])
        td = self.lock(c["delayed"], "d", "delay=%d" % delay_ms)
        closed_at = time.monotonic()
        c["delayed"].close()                    # abandoned: kept for its delay
        d.wait_closed(c["delayed"])
        closed_seen = time.monotonic()          # the delay began before this
        tb = self.lock(c["set"], "b")
        self.assertEqual(c["set"].request("UNLOCK b"), "OK b")
        self.queue(d, c["set"], "x", "LOCK b,x,z")      # b taken, waits for x
        c["half"].send("PIN")
        self.wait_read_by_daemon(c["half"])
        job = Job(d, "job")
        self.addCleanup(job.kill)
        job.tick()
        job_token = int(job.file("token"))

        other = c["other"]
        status_a = other.request("STATUS a")
        self.assertRegex(status_a, r"^STATUS a held holder=\S+ token=%d .*waiters=1 .*"
                         r"label=holder-a$" % ta)
        self.assertIn("delay=", other.request("STATUS d"))
        before = read_stats(other)
        self.assertEqual(before["handovers"], "0")
        ids_before = self.daemon_ids(d)
        listener = listener_inode(d.port)
        self.assertIn(listener, socket_inodes(d.pid))

        # Hand over; a client connecting meanwhile is served by one of them.
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        late = Client.tcp(d.host, d.port)
        late.daemon = d
        self.addCleanup(late.close)
        late.send("TRYLOCK a\n")
        m = self.took_over(d, mark, timeout)
        after_us = time.time_ns()
        # 9 connections (the leaser's and the delayed one's are gone, late
        # may be either side's), holds and waits: a, a's waiter, s, l, x
        # (the lease), d (its delay), the set's b and its wait for x, job.
        self.assertIn(int(m.group(1)), (9, 10), m.group(0))
        self.assertEqual(int(m.group(2)), 9, m.group(0))
        self.assertEqual(m.group(3), "1", m.group(0))      # leases
        self.assertEqual(m.group(4), "1", m.group(0))      # watches
        self.assertEqual(m.group(5), "the daemon before")
        self.assertEqual(late.line(), "BUSY a")
        # The ages come back with the holds (sorted again after the restore):
        # the oldest hold and the longest wait are older than they were.
        st = read_stats(other)
        self.assertGreater(int(before["oldest_hold_ms"]), 0)   # held since the set-up
        for age in ("oldest_hold_ms", "longest_wait_ms"):
            self.assertGreaterEqual(int(st[age]), int(before[age]), age)

        # Same process, same listening socket, same daemon id.
        self.assertTrue(d.running)
        self.assertEqual(listener_inode(d.port), listener)
        self.assertIn(listener, socket_inodes(d.pid))
        ids = self.daemon_ids(d)
        self.assertEqual(len(ids), 2, ids)
        self.assertEqual(ids, ids_before * 2)

        # The command of lockbroker run went on running with its lock.
        job.tick_after(after_us)
        self.assertRegex(other.request("STATUS job"), r"^STATUS job held .*token=%d " % job_token)

        # The holder holds with the same token and label; the half line completes.
        self.assertRegex(holder.request("CHECK a"), r"^OK a %d \d+$" % ta)
        self.assertRegex(other.request("STATUS a"), r"^STATUS a held holder=\S+/%s token=%d "
                         r".*waiters=1 .*label=holder-a$" % (re.escape(holder.local), ta))
        c["half"].send("G\n")
        c["half"].expect("PONG")
        # Released: the waiter is granted a greater token, the watcher sees it.
        self.assertEqual(holder.request("UNLOCK a"), "OK a")
        tw = self.granted(waiter, "a")
        self.assertGreater(tw, ta)
        watcher.expect_match(event_held % (tw, "-", re.escape(waiter.local)))

        # Shared and limit holds keep their modes.
        self.assertRegex(other.request("STATUS s"), r"^STATUS s held .*token=%d .*mode=shared" % ts)
        self.assertEqual(other.request("TRYLOCK s"), "BUSY s")
        t2 = self.lock(other, "s", "shared")
        self.assertGreater(t2, ts)
        self.assertEqual(other.request("UNLOCK s"), "OK s")
        self.assertRegex(other.request("STATUS l"),
                         r"^STATUS l held .*token=%d .*mode=limit limit=3 holders=1" % tl)
        self.assertEqual(other.request("TRYLOCK l limit=2"), ERR_CONFLICT_LIMIT % 3)
        self.assertGreater(self.lock(other, "l", "limit=3"), tl)
        self.assertEqual(other.request("UNLOCK l"), "OK l")
        self.assertEqual(c["reader"].request("UNLOCK s"), "OK s")
        self.assertEqual(c["sem"].request("UNLOCK l"), "OK l")

        # The lease is still x's holder; released from another connection,
        # the set waiting for it completes.
        self.assertRegex(other.request("CHECK x %d" % tx), r"^OK x %d \d+$" % tx)
        self.assertTrue(c["set"].silent())
        self.assertEqual(other.request("UNLOCK x %d" % tx), "OK x")
        m = c["set"].expect_match(r"OK b,x,z (\d+),(\d+),(\d+)")
        self.assertGreater(int(m.group(1)), tb)
        self.assertGreater(int(m.group(2)), tx)
        self.assertEqual(c["set"].request("UNLOCK b,x,z"), "OK b,x,z")

        # The lock-delay still runs, from where it was: not free until its
        # delay after the close, and not begun again by the handover.
        self.assertEqual(other.request("TRYLOCK d"), "BUSY d")
        sent = time.monotonic()
        other.send("STATUS d\n")
        left = int(other.expect_match(r"STATUS d held .*token=%d .*delay=(\d+)" % td).group(1))
        self.assertLessEqual(left, (closed_seen + delay_ms / 1000.0 - sent) * 1000 + 2,
                             "the lock-delay began again at the handover")
        other.send("LOCK d %d\n" % scaled(20000 + delay_ms))
        tn = self.granted(other, "d", timeout=delay_ms / 1000.0 + scaled(10))
        self.assertGreaterEqual(time.monotonic() - closed_at, delay_ms / 1000.0,
                                "a lock-delay of %d ms ended early across the handover" % delay_ms)
        self.assertGreater(tn, td)
        self.assertEqual(other.request("UNLOCK d"), "OK d")

        # lockbroker run exits with its command's status; its lock is freed.
        rc, err = job.stop()
        self.assertEqual(rc, 7, err)
        self.assertEqual(other.request("TRYLOCK job").split()[:2], ["OK", "job"])

        after = read_stats(other)
        self.assertEqual(after["handovers"], "1")
        self.assertGreaterEqual(int(after["uptime"]), int(before["uptime"]))
        self.assertGreater(int(after["total_connections"]), int(before["total_connections"]))


class DuringTheHandover(Case):
    def test_a_client_connecting_meanwhile_is_served_by_the_successor(self):
        """The successor is held at its start (a script waiting on a FIFO
        before it executes the daemon): a client that connects then waits in
        the listener's backlog and is accepted by the successor."""
        tmp = make_tmpdir()
        exe, fifo = os.path.join(tmp, "lockbrokerd"), os.path.join(tmp, "gate")
        shutil.copy(daemon_path(), exe)
        os.mkfifo(fifo)
        d = self.start(binary=exe)
        replace_with_script(exe, 'if [ "$1" != --check-handover ]; then read go < %s; fi\n'
                            'exec %s "$@"\n' % (fifo, daemon_path()))
        a = self.connect(d)
        ta = self.lock(a, "m")
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        d.wait_log(r"handover: 1 connections, .*executing %s$" % re.escape(exe), since=mark)
        late = Client.tcp(d.host, d.port)          # nobody accepts now
        late.daemon = d
        self.addCleanup(late.close)
        late.send("TRYLOCK m\n")
        gate = os.open(fifo, os.O_RDWR)              # never blocks; kept open until read
        try:
            os.write(gate, b"go\n")
            took = self.took_over(d, mark)
        finally:
            os.close(gate)
        self.assertEqual(took.group(1), "1", took.group(0))
        self.assertEqual(late.line(), "BUSY m")
        # Accepted after the successor took over (the log is read as it comes).
        opened_re = r"conn \d+ \(%s\): open$" % re.escape(late.local)
        d.wait_log(opened_re, since=mark)
        with d._cond:
            lines = d.lines[mark:]
        took_at = next(i for i, l in enumerate(lines) if re.search(TOOK_OVER_RE, l))
        opened = [i for i, l in enumerate(lines) if re.search(opened_re, l)]
        self.assertEqual(len(opened), 1, d.log_tail())
        self.assertGreater(opened[0], took_at, d.log_tail())
        self.assertRegex(a.request("CHECK m"), r"^OK m %d \d+$" % ta)


class Quotas(Case):
    def test_kept_holds_count_daemon_wide_after_a_handover(self):
        """The snapshot names no account (PROTOCOL.md, Quotas): a hold kept
        after its client let go counts against the daemon-wide cap only
        once carried over; a connection's hold with a lock-delay counts
        against its account again; nothing carried over is refused."""
        d = self.start(config="[server]\nmax_kept_holds = 3\nmax_kept_holds_per_user = 2\n"
                              "max_leases_per_user = 1\nmax_watches_per_user = 1\n")
        c = self.connect(d)
        self.lock(c, "k")
        self.assertEqual(c.request("UNLOCK k keep=600000"), "OK k")
        self.lock(c, "d", "delay=60000")
        full = "ERR LIMIT address 127.0.0.1 already has 2 holds with a lock-delay or keep="
        self.assertEqual(c.request("LOCK e delay=60000"), full)
        self.lock(c, "l", "ttl=600000")
        self.assertEqual(c.request("WATCH w"), "OK w")
        self.assertEqual(c.line(), "EVENT w free")
        self.handover(d)
        st = read_stats(c)
        self.assertEqual((st["locks_keepable"], st["locks_delayed"], st["leases"]),
                         ("2", "1", "1"))
        self.assertRegex(c.request("STATUS k"), r"^STATUS k held .* delay=\d+$")
        # The kept hold no longer counts against the address: room for one.
        self.lock(c, "e", "delay=60000")
        self.assertEqual(c.request("LOCK f delay=60000"), full)
        # The daemon-wide cap counts it still: k, d and e are its 3.
        self.assertEqual(read_stats(c)["locks_keepable"], "3")
        self.assertEqual(c.request("UNLOCK d"), "OK d")
        self.assertEqual(c.request("UNLOCK e"), "OK e")
        self.assertEqual(read_stats(c)["locks_keepable"], "1")
        # The lease carried over counts daemon-wide only; the watch is the
        # connection's, counted against its address again.
        self.lock(c, "l2", "ttl=600000")
        self.assertEqual(c.request("WATCH w2"),
                         "ERR LIMIT address 127.0.0.1 already has 1 watches in this daemon")


class MoreStates(Case):
    def test_kept_holds_deadlines_pipelines_and_listeners(self):
        """A hold kept after UNLOCK keep=, a wait with a deadline and a PING
        sent behind it, a shared waiter and a waiting lease queued behind
        it, a Unix socket client, and the metrics listener."""
        d = self.start(config=lambda t: "[server]\nunix_socket = %s/sock\n"
                       "metrics_listen = 127.0.0.1:0\n" % t)
        metrics = d.wait_log(r"metrics: serving /metrics and /healthz on http://(\S+)").group(1)
        k, h, timed, reader, lw, other = (self.connect(d) for _ in range(6))
        u = self.connect(d, unix=True)
        tk = self.lock(k, "k")
        kept_at = time.monotonic()
        self.assertEqual(k.request("UNLOCK k keep=3000"), "OK k")
        th = self.lock(h, "w")
        asked_at = time.monotonic()
        timed.send("LOCK w 1500\nPING\n")
        d.wait_queued(timed, "w")
        reader.send("LOCK w shared\n")
        d.wait_log(r"lock w: %s queued \(shared\)$" % re.escape(reader.local))
        lw.send("LOCK w ttl=60000\n")
        d.wait_log(r"lock w: lease:%s queued$" % re.escape(lw.local))
        tu = self.lock(u, "u")

        m = self.handover(d)
        self.assertEqual(m.group(1), "7", m.group(0))
        self.assertEqual(m.group(3), "1", m.group(0))      # the lease asked for

        # The wait ends at its deadline, not before, and the PING behind it
        # is answered after it.
        timed.expect("TIMEOUT w")
        self.assertGreaterEqual(time.monotonic() - asked_at, 1.5)
        timed.expect("PONG")
        # The queue goes on in its order: the reader, then the lease.
        self.assertEqual(h.request("UNLOCK w"), "OK w")
        self.assertGreater(self.granted(reader, "w"), th)
        self.assertTrue(lw.silent())
        self.assertEqual(reader.request("UNLOCK w"), "OK w")
        tl = self.granted(lw, "w")
        lw.close()                              # a lease: it stays held
        self.assertEqual(other.request("TRYLOCK w"), "BUSY w")
        self.assertEqual(other.request("UNLOCK w %d" % tl), "OK w")
        # The Unix socket: the client is carried, the listener too.
        self.assertRegex(u.request("CHECK u"), r"^OK u %d \d+$" % tu)
        with d.client(unix=True) as u2:
            self.assertEqual(u2.request("TRYLOCK u"), "BUSY u")
        # The metrics listener is carried.
        conn = http.client.HTTPConnection(*metrics.rsplit(":", 1), timeout=TIMEOUT)
        try:
            conn.request("GET", "/metrics")
            r = conn.getresponse()
            body = r.read().decode()
        finally:
            conn.close()
        self.assertEqual(r.status, 200)
        self.assertRegex(body, r"(?m)^lockbroker_handovers_total 1$")
        # The kept hold is kept for the rest of its 3 s.
        self.assertEqual(other.request("TRYLOCK k"), "BUSY k")
        self.assertRegex(other.request("STATUS k"), r"^STATUS k held .*token=%d .*delay=\d+" % tk)
        other.send("LOCK k %d\n" % scaled(20000))
        self.assertGreater(self.granted(other, "k"), tk)
        self.assertGreaterEqual(time.monotonic() - kept_at, 3.0)


    def test_logins_and_a_delayed_auth_failure(self):
        """A logged-in connection stays logged in; a failed AUTH, answered
        after its delay, is waited for, and what was sent behind it is
        answered by the successor."""
        def config(tmp):
            path = os.path.join(tmp, "users")
            with open(path, "w") as f:
                f.write("alice:%s:job-*\n" % ALICE_HASH)
            os.chmod(path, 0o600)
            return "[server]\nusers_file = %s\n" % path
        d = self.start(config=config)
        a, b = self.connect(d), self.connect(d)
        self.assertEqual(a.request("AUTH alice hunter2"), "OK alice")
        ta = self.lock(a, "job-1")
        mark = d.log_mark()
        b.send("AUTH alice wrong\nAUTH alice hunter2\nTRYLOCK job-1\n")
        d.wait_log(r"AUTH failed", since=mark)
        m = self.handover(d)
        self.assertEqual(m.group(1), "2", m.group(0))
        b.expect("ERR AUTH_FAILED wrong user name or password", "OK alice", "BUSY job-1")
        self.assertRegex(a.request("CHECK job-1"), r"^OK job-1 %d \d+$" % ta)
        # Its user's rights came with it.
        self.assertEqual(a.request("TRYLOCK other"), "ERR DENIED user alice may not use lock other")

    def test_a_connection_without_a_login_gets_a_full_deadline_again(self):
        """The snapshot has no field for the login deadline: the successor
        carries the anonymous connection and gives it a whole deadline of
        its own, after which it closes it with the deadline's line."""
        ms = lbharness.scaled_ms(2000)

        def config(tmp):
            path = os.path.join(tmp, "users")
            with open(path, "w") as f:
                f.write("alice:%s:job-*\n" % ALICE_HASH)
            os.chmod(path, 0o600)
            return "[server]\nusers_file = %s\nlogin_timeout_ms = %d\n" % (path, ms)
        d = self.start(config=config)
        anon, alice = self.connect(d), self.connect(d)
        self.assertEqual(alice.request("AUTH alice hunter2"), "OK alice")
        self.assertEqual(anon.request("PING"), "PONG")
        mark = d.log_mark()
        self.handover(d)
        self.assertEqual(anon.request("PING"), "PONG")       # carried over
        anon.expect("ERR NOAUTH no login within %d ms; closing" % ms)
        anon.expect_eof()
        d.wait_log(r"info conn \d+ \(%s\): no login within %d ms; closing$"
                   % (re.escape(anon.local), ms), since=mark)
        self.assertEqual(alice.request("PING"), "PONG")

    def test_a_user_gone_from_the_users_file_takes_only_their_connections(self):
        """As after a reload: the successor reads the users file again; a
        connection of a user no longer in it is closed (its holds end), the
        others are carried."""
        def config(tmp):
            path = os.path.join(tmp, "users")
            with open(path, "w") as f:
                f.write("alice:%s:job-*\nbob:%s:job-*\n" % (ALICE_HASH, ALICE_HASH))
            os.chmod(path, 0o600)
            return "[server]\nusers_file = %s\n" % path
        d = self.start(config=config)
        a, b = self.connect(d), self.connect(d)
        self.assertEqual(a.request("AUTH alice hunter2"), "OK alice")
        self.assertEqual(b.request("AUTH bob hunter2"), "OK bob")
        ta = self.lock(a, "job-a")
        self.lock(b, "job-b")
        users = os.path.join(d.tmpdir, "users")
        with open(users + ".new", "w") as f:
            f.write("alice:%s:job-*\n" % ALICE_HASH)
        os.chmod(users + ".new", 0o600)
        os.rename(users + ".new", users)
        mark = d.log_mark()
        m = self.handover(d)
        self.assertEqual(m.group(1), "2", m.group(0))
        self.assert_eof(b, "bob's connection")
        d.wait_log(r"\(%s\): user bob is no longer in the users file, closing$"
                   % re.escape(b.local), since=mark)
        self.assertRegex(a.request("CHECK job-a"), r"^OK job-a %d \d+$" % ta)
        a.send("LOCK job-b %d\n" % scaled(5000))        # freed once bob's connection ended
        self.granted(a, "job-b")

    def test_unread_requests_and_unsent_replies_are_carried(self):
        """A client that sends 1 MB of PINGs without reading: the daemon
        stops reading it (its replies wait), the handover carries what it
        read and what it has not sent, and every PING is answered once.
        Over the Unix socket, whose buffers do not grow as TCP's do."""
        d = self.start(config=lambda t: "[server]\nunix_socket = %s/sock\n" % t)
        c = self.connect(d, unix=True)
        n = 200000
        mark = d.log_mark()
        c.sock.settimeout(None)       # sendall's timeout would cover all 1 MB; reads select
        sender = threading.Thread(target=c.sock.sendall, args=(b"PING\n" * n,), daemon=True)
        sender.start()
        d.wait_log(r"conn \d+: going from reading to draining$", since=mark)
        m = self.handover(d)
        self.assertEqual(m.group(1), "1", m.group(0))
        size = int(d.wait_log(r"handover: 1 connections, .*snapshot of (\d+) bytes",
                              since=mark).group(1))
        self.assertGreater(size, 64 * 1024, "the replies waiting were not in the snapshot")
        want = b"PONG\n" * n
        got = bytearray()
        while len(got) < len(want):
            self.assertFalse(c.eof, "EOF after %d bytes" % len(got))
            self.assertTrue(c._fill(time.monotonic() + TIMEOUT), "stalled after %d bytes"
                            % len(got))
            got += c.buf
            c.buf = b""
        sender.join(TIMEOUT)
        self.assertEqual(bytes(got), want)
        self.assertTrue(c.silent())

    def test_a_listing_being_written_is_carried(self):
        """A LOCKS reply longer than the unread-output bound, not read: the
        handover does not wait for it; the successor goes on after the last
        name written, and the client reads every name once, then END."""
        n = 3000
        d = self.start(config=lambda t: "[server]\nunix_socket = %s/sock\n"
                       "max_locks_per_client = %d\n" % (t, n))
        holder = self.connect(d, unix=True)
        names = ["carried-%05d-%s" % (i, "n" * 100) for i in range(n)]
        for i in range(0, n, 100):
            holder.send("".join("LOCK %s 0\n" % x for x in names[i:i + 100]))
            holder.lines(100)
        reader = self.connect(d, unix=True)
        mark = d.log_mark()
        reader.send("LOCKS\nPING\n")
        d.wait_log(r"conn \d+: going from reading to waiting$", since=mark)
        self.handover(d)
        listed = []
        while True:
            line = reader.line()
            if line == "END":
                break
            listed.append(line.split()[1])
        self.assertTrue(listed == names, "%d names listed, not each once in order"
                        % len(listed))
        self.assertEqual(reader.line(), "PONG")


# ------------------------------------------------------------------ b.

class Twice(Case):
    def test_two_handovers_in_a_row(self):
        d = self.start()
        a, b, e = self.connect(d), self.connect(d), self.connect(d)
        ta = self.lock(a, "t")
        self.queue(d, b, "t")
        self.handover(d)
        self.assertEqual(a.request("UNLOCK t"), "OK t")
        tb = self.granted(b, "t")
        self.assertGreater(tb, ta)
        self.queue(d, e, "t")
        self.handover(d)
        self.assertRegex(b.request("CHECK t"), r"^OK t %d \d+$" % tb)
        self.assertEqual(b.request("UNLOCK t"), "OK t")
        te = self.granted(e, "t")
        self.assertGreater(te, tb)
        with d.client() as f:
            self.assertGreater(self.lock(f, "u"), te)
            st = read_stats(f)
        self.assertEqual(st["handovers"], "2")
        self.assertEqual(len(set(self.daemon_ids(d))), 1)


# ------------------------------------------------------------------ c.

class SuccessorFails(Case):
    """The successor is a copy of the binary that the test then replaces."""

    def start_copy(self):
        tmp = make_tmpdir()
        exe = os.path.join(tmp, "lockbrokerd")
        shutil.copy(daemon_path(), exe)
        return self.start(binary=exe), exe

    def holder_and_waiter(self, d):
        a, b = self.connect(d), self.connect(d)
        ta = self.lock(a, "r")
        self.queue(d, b, "r")
        return a, b, ta

    def test_check_fails_serving_on(self):
        for name, script, why in (
                ("exit 1", 'echo "stand-in: not today"; exit 1\n', "stand-in: not today"),
                ("other format", 'echo "lockbrokerd 9.9: snapshot format 3"; exit 0\n',
                 "snapshot format 3"),
                ("silent", "exit 0\n", "it printed nothing")):
            with self.subTest(name):
                d, exe = self.start_copy()
                a, b, ta = self.holder_and_waiter(d)
                replace_with_script(exe, script)
                mark = d.log_mark()
                d.send_signal(signal.SIGUSR2)
                m = d.wait_log(r"handover: refused: the successor does not accept the settings "
                               r"or this snapshot format: (.*); serving on, nothing lost$",
                               since=mark)
                self.assertIn(why, m.group(1))
                self.assertIsNone(d.find_log(r"handover: \d+ connections", since=mark))
                # Nothing lost: same holder and token, the waiter next.
                self.assertRegex(a.request("CHECK r"), r"^OK r %d \d+$" % ta)
                self.assertEqual(a.request("UNLOCK r"), "OK r")
                self.assertGreater(self.granted(b, "r"), ta)
                with d.client() as c:
                    st = read_stats(c)
                    self.assertEqual(st["handovers"], "0")
                    # Counted for the alert rules (contrib/prometheus).
                    self.assertEqual(st["handovers_given_up"], "1")
                self.assertTrue(d.running)

    def test_successor_that_does_not_start(self):
        d, exe = self.start_copy()
        a, b, ta = self.holder_and_waiter(d)
        # It answers the check as the daemon does, and fails to start.
        check = run_daemon(["--check-handover"] + d.argv)
        self.assertEqual(check.returncode, 0, check)
        # The format it writes, and the older one it reads (a daemon of the
        # previous format may hand over to it).
        self.assertIn("snapshot format 2\n", check.stdout)
        self.assertIn("snapshot format 1\n", check.stdout)
        replace_with_script(exe, 'if [ "$1" = --check-handover ]; then\n'
                            '    printf "%%s" "%s"; exit 0\nfi\n'
                            'echo "stand-in successor: cannot start" >&2; exit 1\n'
                            % check.stdout)
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        self.assertEqual(d.wait_exit(), 1)
        self.assertIsNotNone(d.find_log(r"handover: 2 connections, 1 holds, 1 waits; .*"
                                        r"executing %s$" % re.escape(exe), since=mark),
                             d.log_tail())
        self.assertIsNotNone(d.find_log(r"^stand-in successor: cannot start$", since=mark),
                             d.log_tail())
        self.assert_eof(a, "the holder")
        self.assert_eof(b, "the waiter")


class SnapshotRefused(Case):
    """A daemon started by the test as a successor, with a client connection
    (a socketpair's end) and a snapshot it must refuse."""

    @classmethod
    def setUpClass(cls):
        cls.real = cls.capture_snapshot()

    @classmethod
    def capture_snapshot(cls):
        """A real snapshot: a copy of the daemon is started, then replaced by
        a script that copies the snapshot and executes the daemon (the
        handover goes on through it)."""
        tmp = make_tmpdir()
        exe = os.path.join(tmp, "lockbrokerd")
        copy = os.path.join(tmp, "snapshot")
        shutil.copy(daemon_path(), exe)
        d = Daemon(binary=exe).start()
        replace_with_script(exe, 'if [ -n "$LOCKBROKERD_HANDOVER" ]; then\n'
                            '    cat "/proc/self/fd/$LOCKBROKERD_HANDOVER" > %s\n'
                            'fi\nexec %s "$@"\n' % (copy, daemon_path()))
        try:
            a, b = d.client(), d.client()
            a.send("CLIENT snap-holder\nLOCK k\n")
            a.expect("OK")
            a.expect_match(r"OK k \d+")
            b.send("LOCK k\n")
            d.wait_queued(b, "k")
            mark = d.log_mark()
            d.send_signal(signal.SIGUSR2)
            d.wait_log(TOOK_OVER_RE, since=mark)
            a.send("UNLOCK k\n")
            a.expect("OK k")
            b.expect_match(r"OK k \d+")
            a.close()
            b.close()
        finally:
            d.stop()
        with open(copy, "rb") as f:
            return f.read()

    def start_with(self, snap):
        """The daemon with LOCKBROKERD_HANDOVER naming a memfd holding snap
        (bytes, or a function of the descriptor number passed to the daemon
        that returns them), and one end of a socketpair. Returns (daemon, the
        other end)."""
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        fd = memfd_holding(snap(theirs.fileno()) if callable(snap) else snap)
        try:
            d = self.start(env={"LOCKBROKERD_HANDOVER": str(fd)},
                           pass_fds=(fd, theirs.fileno()))
        finally:
            os.close(fd)
            theirs.close()
        return d, ours

    def assert_refused(self, snap, reason):
        d, ours = self.start_with(snap)
        self.assert_sock_eof(ours, "the connection passed on")
        lines = [l for l in d.lines if "refusing the snapshot" in l]
        self.assertEqual(len(lines), 1, d.log_tail())
        m = re.search(REFUSING_RE, lines[0])
        self.assertIsNotNone(m, lines[0])
        self.assertIn(reason, m.group(1))
        self.assertIsNone(d.find_log(r"took over|does not add up"), d.log_tail())
        with d.client() as c:                        # serving afresh
            c.send("PING\n")
            c.expect("PONG")
            self.assertEqual(read_stats(c)["handovers"], "0")
        return d

    def test_the_captured_snapshot_is_one(self):
        self.assertRegex(self.real, rb"^lockbrokerd-snapshot 2 %s\ndaemon "
                         % re.escape(daemon_version().encode()))
        self.assertRegex(self.real, rb"\nconn \d+ \d+ 127\.0\.0\.1:\d+ - snap-holder ")
        self.assertRegex(self.real, rb"\nend \d+ [0-9a-f]{16}\n$")

    def test_other_format(self):
        self.assert_refused(reforge(self.real, 3),
                            "its format is 3; this lockbrokerd reads formats 1 to 2 only")

    def test_truncated(self):
        for cut in (len(self.real) - 1, len(self.real) // 2, self.real.index(b"\n") + 1, 30):
            with self.subTest(cut=cut):
                self.assert_refused(self.real[:cut], "it is truncated (no end line)")

    def test_changed_byte(self):
        i = self.real.index(b"snap-holder")
        bad = self.real[:i] + b"S" + self.real[i + 1:]
        self.assert_refused(bad, "its checksum does not match: it is corrupt")

    def test_not_a_snapshot(self):
        self.assert_refused(b"LOCK a\n", "it is not a lockbrokerd snapshot")
        self.assert_refused(b"", "it is not a lockbrokerd snapshot")

    def test_does_not_add_up(self):
        """Well-formed, but a hold names a connection that is not there (or the
        mode is another): restoring fails half way, the daemon starts afresh."""
        for name, extra, mode, why in (
                ("hold of no conn", ["lock n 0 0", "hold c99"], "embedded",
                 "a hold names owner c99, which is not there"),
                ("other mode", [], "distributed",
                 "it is of distributed mode, and this daemon runs in embedded mode")):
            with self.subTest(name):
                def snap(conn_fd, mode=mode, extra=extra):
                    return snapshot(["daemon test-id %s 0 0 0 0 -1 -1 -1 -1" % mode,
                                     "backend_embedded 5",
                                     "conn 1 %d 127.0.0.1:1 - - . ." % conn_fd] + extra)
                d, ours = self.start_with(snap)
                self.assert_sock_eof(ours, "the connection passed on")
                m = d.wait_log(NOT_ADD_UP_RE)
                self.assertIn(why, m.group(1))
                self.assertIsNone(d.find_log(r"took over|refusing the snapshot"), d.log_tail())
                self.assertEqual(len([l for l in d.lines if "does not add up" in l]), 1)
                with d.client() as c:
                    c.send("PING\n")
                    c.expect("PONG")
                    self.assertEqual(read_stats(c)["handovers"], "0")

    def test_a_handmade_snapshot_is_taken_over(self):
        """The same records, adding up: the connection is served (the
        refusals above are the snapshot's, not the way it is passed)."""
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        records = ["daemon test-id embedded 0 0 0 0 -1 -1 -1 -1", "backend_embedded 5",
                   "conn 1 %d 127.0.0.1:1 - hand . ." % theirs.fileno()]
        fd = memfd_holding(snapshot(records))
        try:
            d = self.start(env={"LOCKBROKERD_HANDOVER": str(fd)}, pass_fds=(fd, theirs.fileno()))
        finally:
            os.close(fd)
            theirs.close()
        d.wait_log(TOOK_OVER_RE)
        c = Client(ours)
        c.daemon = d
        self.assertRegex(c.request("LOCK h"), r"^OK h \d+$")
        with d.client() as o:
            self.assertRegex(o.request("STATUS h"), r"label=hand$")
            self.assertEqual(read_stats(o)["handovers"], "1")


# ------------------------------------------------------------------ d.

@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class Tls(Case):
    def start_tls(self):
        """A daemon with a TLS listener beside the plain one, and a function
        that opens a TLS client to it (closed after the test)."""
        tmp = make_tmpdir()
        pki = Pki(os.path.join(tmp, "pki"))
        cert, key = pki.issue("localhost", server=True)
        d = self.start(config="[server]\n" + tls_section(cert, key, pki.ca, "none"))
        host, port, _ = lbharness.parse_hostport(d.wait_log(TLS_LISTEN_RE).group(1))

        def tls_client():
            raw = socket.create_connection((host, port), timeout=scaled(20.0))
            s = ssl.create_default_context(cafile=pki.ca).wrap_socket(
                raw, server_hostname="127.0.0.1")
            c = TlsClient(s)
            c.daemon = d
            self.addCleanup(c.close)
            return c
        return d, tls_client

    def test_tls_connections_are_closed_plain_ones_carried(self):
        d, tls_client = self.start_tls()

        t = tls_client()
        tt = self.lock(t, "tls-held")
        p = self.connect(d)
        tp = self.lock(p, "plain-held")
        mark = d.log_mark()
        m = self.handover(d)
        self.assertEqual(m.group(1), "1", m.group(0))      # the plain one
        self.assertIsNotNone(d.find_log(r"a TLS connection cannot be handed over; closing$",
                                        since=mark), d.log_tail())
        self.assertIsNotNone(d.find_log(r"\(1 TLS or ended connections closed\)", since=mark))
        t.sock.settimeout(TIMEOUT)
        try:
            data = t.sock.recv(100)
        except socket.timeout:
            self.fail("the TLS connection is still open after %.1fs" % TIMEOUT)
        except (ssl.SSLError, ConnectionError):      # closed without close_notify
            data = b""
        self.assertEqual(data, b"", "the TLS connection was not closed")
        self.assertRegex(p.request("CHECK plain-held"), r"^OK plain-held %d \d+$" % tp)
        self.assertEqual(p.request("UNLOCK plain-held"), "OK plain-held")
        # Its lock ended with it, as in a crash; the TLS listener was carried.
        t2 = tls_client()
        self.assertGreater(self.lock(t2, "tls-held"), tt)

    def test_sessions_go_across_detached_over_tls_attached_over_plain(self):
        """A TLS connection is still closed, but one with a session (GRACE)
        has its holds detached, carried, and taken back on the successor
        (RESUME); a plain one's session stays attached to it, and one
        detached before the handover is carried detached."""
        d, tls_client = self.start_tls()

        def grace(c):
            m = re.match(r"^OK ([0-9a-f]{16}) ([0-9a-f]{32})$", c.request("GRACE 60000"))
            self.assertTrue(m)
            return m.group(1), m.group(2)

        t = tls_client()
        t_session = grace(t)
        tt = self.lock(t, "tls-held")
        p = self.connect(d)
        p_session = grace(p)
        tp = self.lock(p, "plain-held")
        gone = self.connect(d)
        gone_session = grace(gone)
        tg = self.lock(gone, "gone-held")
        mark = d.log_mark()
        gone.close()
        d.wait_log(r"session %s: conn \d+ \(.*\) ended without QUIT: 1 holds detached"
                   % gone_session[0], since=mark)
        mark = d.log_mark()
        self.handover(d)
        # The TLS connection was closed, its session detached, not ended.
        self.assertIsNotNone(d.find_log(r"a TLS connection cannot be handed over; closing$",
                                        since=mark), d.log_tail())
        self.assertIsNotNone(d.find_log(r"session %s: conn \d+ \(.*\) ended without QUIT: 1 "
                                        r"holds detached" % t_session[0], since=mark))
        self.assertIsNotNone(d.find_log(r"handover: carried 3 sessions, 2 of them detached$",
                                        since=mark), d.log_tail())
        with d.client() as o:
            # Nobody else is granted the detached names meanwhile.
            self.assertEqual(o.request("TRYLOCK tls-held"), "BUSY tls-held")
            self.assertEqual(o.request("TRYLOCK gone-held"), "BUSY gone-held")
            self.assertRegex(o.request("STATUS tls-held"),
                             r"^STATUS tls-held held .* token=%d .* detached=\d+" % tt)
        # The TLS client comes back on the successor, over TLS: same token.
        t2 = tls_client()
        self.assertEqual(t2.request("RESUME %s %s" % t_session), "OK %s 1" % t_session[0])
        self.assertRegex(t2.request("CHECK tls-held"), r"^OK tls-held %d \d+$" % tt)
        # The one detached before the handover, likewise.
        g2 = self.connect(d)
        self.assertEqual(g2.request("RESUME %s %s" % gone_session),
                         "OK %s 1" % gone_session[0])
        self.assertRegex(g2.request("CHECK gone-held"), r"^OK gone-held %d \d+$" % tg)
        # The plain connection was carried with its session attached: when it
        # drops now, its hold is detached, and taken back with its secret.
        self.assertRegex(p.request("CHECK plain-held"), r"^OK plain-held %d \d+$" % tp)
        mark = d.log_mark()
        p.close()
        d.wait_log(r"session %s: conn \d+ \(.*\) ended without QUIT: 1 holds detached"
                   % p_session[0], since=mark)
        p2 = self.connect(d)
        self.assertEqual(p2.request("RESUME %s %s" % p_session), "OK %s 1" % p_session[0])
        self.assertRegex(p2.request("CHECK plain-held"), r"^OK plain-held %d \d+$" % tp)
        st = read_stats(p2)
        self.assertEqual((st["sessions"], st["sessions_detached"], st["sessions_resumed"]),
                         ("3", "0", "3"))
        for c, name in ((t2, "tls-held"), (g2, "gone-held"), (p2, "plain-held")):
            self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)


# ------------------------------------------------------------------ e.

class NotifyStandIn:
    """A stand-in for systemd's notify socket (AF_UNIX datagrams)."""

    def __init__(self):
        self.path = os.path.join(make_tmpdir(), "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def recv(self, timeout=None):
        """(dict of the datagram's KEY=VALUE lines, [descriptors])."""
        wait_readable(self.sock.fileno(), TIMEOUT if timeout is None else timeout,
                      "the notify socket")
        msg, fds, _, _ = socket.recv_fds(self.sock, 4096, 16)
        fields = dict(line.split("=", 1) for line in msg.decode().split("\n") if "=" in line)
        return fields, fds

    def close(self):
        self.sock.close()


# Run by the successor's stand-in start: LISTEN_FDS descriptors moved to
# 3, 4, ... (the first argument lists where they are now), LISTEN_PID this
# process's (kept by exec), then the daemon executed.
RENUMBER = r"""
import fcntl, os, sys
fds = [int(x) for x in sys.argv[1].split(",")]
# First above every source and every target, so that no dup2 lands on one.
low = max(fds + [2 + len(fds)]) + 1
moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, low) for fd in fds]
for fd in fds:
    os.close(fd)
for i, fd in enumerate(moved):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], sys.argv[2:])
"""


class UnderLoad(Case):
    def test_mutual_exclusion_and_tokens_through_handovers_under_contention(self):
        """30 clients contend for three names without pause while the daemon
        is handed over twice: no two holders at once, tokens only go up,
        every grant counted (test_distributed's LockLoad checks each)."""
        import test_distributed as td
        d = self.start()
        names = ["ul-a", "ul-b", "ul-c"]
        clients, iterations = 30, 30
        load = td.LockLoad([d], seed=17)
        self.addCleanup(load.close)
        for _ in range(clients):
            load.add(self.connect(d), "lb", names, iterations)
        expected = clients * iterations
        load.run_with_handovers(d, expected, 2, scaled(60.0), took_over=TOOK_OVER_RE)
        self.assertEqual(len(load.grants), expected)
        self.assertEqual(load.holder, {})
        with d.client() as c:
            st = read_stats(c)
        self.assertEqual(st["handovers"], "2")
        self.assertEqual(int(st["grants"]), expected)      # counters carried over


@lbharness.skip_unless(built_with_libsystemd(), "systemd",
                       "lockbrokerd is built without libsystemd (no HAVE_LIBSYSTEMD in "
                       "config.h): no file descriptor store")
class FdStore(Case):
    def test_sigterm_passes_everything_to_the_store_and_the_next_start_resumes(self):
        notify = NotifyStandIn()
        self.addCleanup(notify.close)
        env = {"LOCKBROKERD_FDSTORE": "1", "NOTIFY_SOCKET": notify.path}
        # SIGINT stops as usual; SIGTERM would hand over into the store.
        d = self.start(env=env, stop_sig=signal.SIGINT)
        held = []                       # descriptors the store (the test) keeps

        def close_held():
            while held:
                os.close(held.pop())
        self.addCleanup(close_held)
        fields, fds = notify.recv()
        self.assertEqual(fields.get("READY"), "1", fields)
        self.assertEqual(fds, [])
        a, b = self.connect(d), self.connect(d)
        self.assertEqual(a.request("CLIENT store-holder"), "OK")
        ta = self.lock(a, "f")
        self.queue(d, b, "f")

        d.send_signal(signal.SIGTERM)
        got = []
        while not got or got[-1][0] != "snapshot":
            fields, fds = notify.recv()
            if "FDSTORE" not in fields:
                continue                          # STATUS, STOPPING ...
            self.assertEqual(fields["FDSTORE"], "1")
            self.assertEqual(len(fds), 1, fields)
            got.append((fields["FDNAME"], fds[0]))
            held.append(fds[0])
        self.assertEqual(d.wait_exit(), 0)
        names = [n for n, _ in got]
        # The connections travel inside one socket ("conns"): the store holds
        # a handful of descriptors however many clients there are.
        self.assertEqual(sorted(names), sorted(["tcp", "conns", "snapshot"]), names)
        self.assertEqual(names[-1], "snapshot")
        self.assertIsNotNone(d.find_log(r"passing them to systemd's file descriptor store"))
        # The clients are still connected: the store (here, the test) keeps them.
        self.assertTrue(a.silent() and b.silent())

        # The next start, with LISTEN_FDS as systemd sets it.
        fdlist = [fd for _, fd in got]
        succ = self.start(
            wrapper=[sys.executable, "-c", RENUMBER, ",".join(map(str, fdlist))],
            env=dict(env, LISTEN_FDS=str(len(got)), LISTEN_FDNAMES=":".join(names)),
            pass_fds=fdlist, stop_sig=signal.SIGINT)
        m = succ.wait_log(TOOK_OVER_RE)
        self.assertEqual(m.group(1), "2", m.group(0))
        self.assertEqual(m.group(5), "systemd's file descriptor store")
        self.assertEqual(succ.port, d.port)
        close_held()
        removed, ready = [], False
        while not ready or sorted(removed) != sorted(names):
            fields, _ = notify.recv()
            if fields.get("FDSTOREREMOVE") == "1":
                removed.append(fields["FDNAME"])
            if fields.get("READY") == "1":
                ready = True
        self.assertEqual(sorted(removed), sorted(names))

        a.daemon = b.daemon = succ
        self.assertRegex(a.request("CHECK f"), r"^OK f %d \d+$" % ta)
        self.assertEqual(a.request("UNLOCK f"), "OK f")
        self.assertGreater(self.granted(b, "f"), ta)
        with succ.client() as c:
            self.assertEqual(read_stats(c)["handovers"], "1")
        # Our copies are closed: a client's close ends its connection.
        b.mark = succ.log_mark()
        b.close()
        succ.wait_closed(b)
        with succ.client() as c:
            c.send("TRYLOCK f\n")
            self.granted(c, "f")

    def test_a_refused_snapshot_from_the_store_keeps_listening_on_its_socket(self):
        """A start that refuses what the store passed closes the connections
        but keeps the listening socket systemd passed by name: binding the
        port anew could race the store's copy, which is still open."""
        notify = NotifyStandIn()
        self.addCleanup(notify.close)
        lsock = socket.socket()
        self.addCleanup(lsock.close)
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(16)
        port = lsock.getsockname()[1]
        client, server_end = socket.socketpair()
        self.addCleanup(client.close)
        self.addCleanup(server_end.close)
        snap = os.memfd_create("corrupt-snapshot")
        self.addCleanup(os.close, snap)
        os.write(snap, b"lockbrokerd-snapshot 1 x\ndaemon garbage\nend 1 0000000000000000\n")
        # The connection comes inside a "conns" socket, as the daemon sends it.
        conns_r, conns_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(conns_r.close)
        socket.send_fds(conns_w, [struct.pack("=Q", 7)], [server_end.fileno()])
        conns_w.close()
        server_end.close()
        fdlist = [lsock.fileno(), conns_r.fileno(), snap]
        names = ["tcp", "conns", "snapshot"]
        succ = self.start(
            wrapper=[sys.executable, "-c", RENUMBER, ",".join(map(str, fdlist))],
            listen="127.0.0.1:%d" % port,
            env={"NOTIFY_SOCKET": notify.path, "LISTEN_FDS": "3",
                 "LISTEN_FDNAMES": ":".join(names)},
            pass_fds=fdlist, stop_sig=signal.SIGINT)
        succ.wait_log(r"handover: refusing the snapshot passed on: its checksum does not match")
        removed = set()
        while removed != set(names):
            fields, _ = notify.recv()
            if fields.get("FDSTOREREMOVE") == "1":
                removed.add(fields["FDNAME"])
        # The store's copies go (here: the test's), the daemon's stay.
        lsock.close()
        conns_r.close()
        self.assert_sock_eof(client, "the connection the refused snapshot carried")
        self.assertEqual(succ.port, port)
        with succ.client() as c:
            self.assertEqual(c.request("PING"), "PONG")


if __name__ == "__main__":
    unittest.main(verbosity=2)
