#!/usr/bin/env python3
"""Network partitions between lockbrokerd daemons and a ZooKeeper ensemble.

Issue 27: CHECK's window in distributed mode must never reach past the time
another daemon can grant the name. Each test here starts three ZooKeeper
servers (tickTime 500 ms, syncLimit 5) behind cuttable proxies
(tests/e2e/netcut.py, through zkharness.ZkEnsemble(proxied=True)) and two
daemons D0 and D1 (session_timeout_ms 4000, tick_ms 500) whose every
ZooKeeper connection goes through proxies of their own. Client A takes `x`
through D0 and follows CHECK's window as PROTOCOL.md ("### CHECK") tells a
holder to (WindowFollower: a CHECK every quarter of the last window, stop
when the window runs out without a fresh one, on LOST, ERR NOT_HELD or the
connection's end); client B waits for `x` through D1. Then part of the
network is cut, B is granted `x`, and the test asserts the safety property:

    A's last window end <= the time B is granted `x`

(both on this process's time.monotonic(); a window ends `safe-ms` after
A *sent* its CHECK, B's grant is when its `OK` line arrived here, so both
errors go the safe way), and that B's token is greater than A's. That is
the only assertion about time: everything else waits for events (reply
lines, daemon log lines, ZooKeeper's own state through 4-letter words),
each with a bound that fails the test.

Cases (each starts its own ensemble and daemons; F, F2 are followers, L
the leader):

  a  {D0, F} cut from {L, F2, D1}, D0's session on F (the issue's case)
  b  {D0, L} cut from {F, F2, D1}, D0's session on L
  c  D0 cut from every server
  d1 only F's packets to L and F2 are dropped (a one-way server cut)
  d2 only D0's packets to F are dropped (its requests are lost)
  d3 only F's packets to D0 are dropped (D0 is heard, hears nothing)
  e  a's cut, then everything healed: D0 serves again

RunPartitionTest repeats cases a and b with the command-line client on
both sides instead of raw-protocol holders, as the issue's reproduction
did: A = `lockbroker -H D0 run x -- WRITER`, B = `lockbroker -H D1 run x
-- WRITER`, where WRITER appends its time.monotonic() (CLOCK_MONOTONIC,
one clock for every process of the machine) to a file of its own every
50 ms and ignores SIGTERM, so that only the SIGKILL lockbroker sends when
A's last CHECK window runs out stops A's. B is queued (its node in
ZooKeeper, behind A's) before the cut. The one timing assertion:

    B's first timestamp > A's last timestamp

and A's lockbroker must exit 116 (jeopardy: its windows ran out) or 120
(the lock was lost: LOST, or the connection ended), lockbroker(1).

Each test prints its measurements (relative to the cut) to stderr. Set
LB_KEEP_LOGS=1 to keep the servers' logs. Exit 77 (automake: SKIP) when
ZooKeeper or java is not installed.
"""

import atexit
import functools
import os
import re
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, scaled  # noqa: E402
import netcut  # noqa: E402
import zkharness  # noqa: E402
from zkharness import ZkEnsemble, wait_for  # noqa: E402
# the built client, how test_cli.py finds and runs it, and its exit statuses
from test_cli import EXIT_JEOPARDY, EXIT_LOST, LbProc  # noqa: E402

SESSION_MS = 4000
TICK_MS = 500
SYNC_LIMIT = 5
TOKEN = r"(\d+)"
SESSION_RE = r"zk: new session (0x[0-9a-f]+)"
ERROR_RE = r"^\S+Z error "

WORK_DIR = tempfile.mkdtemp(prefix="lbpart-")
_keep_work_dir = [zkharness.keep_logs()]


def _remove_work_dir():
    if _keep_work_dir[0]:
        sys.stderr.write("test_partition.py: kept %s\n" % WORK_DIR)
    else:
        shutil.rmtree(WORK_DIR, ignore_errors=True)


atexit.register(_remove_work_dir)


zk_available = zkharness.available


def note(text):
    """A measurement for the log (make check keeps it in the .log file)."""
    sys.stderr.write("[%s] " % text)
    sys.stderr.flush()


# ------------------------------------------------------------------ lockbroker run

# The command of `lockbroker run` in RunPartitionTest: appends its
# time.monotonic() to the file argv[1], one line per write(2) of an O_APPEND
# descriptor, every 50 ms, and ignores SIGTERM: only SIGKILL stops it.
WRITER = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    os.write(fd, b"%.6f\n" % time.monotonic())
    time.sleep(0.05)
"""


def read_stamps(path):
    """The timestamps a WRITER wrote to path ([] if none yet); a last
    line without its newline (a write read while it happens) is left out."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [float(line) for line in data.split(b"\n")[:-1]]


# ------------------------------------------------------------------ the holder

class WindowFollower(threading.Thread):
    """A holder of `name` on client `c` that uses the resource only while
    CHECK says it is safe, as PROTOCOL.md ("### CHECK") tells it to.

    It sends `CHECK <name>` at once, then every quarter of the last window
    (`safe-ms` of the last answer), and records each answer's window end,
    send time + safe-ms, on time.monotonic(). It stops when its windows run
    out without a fresh one (no answer by then, or only zero windows), on a
    `LOST <name> ...` line, an `ERR NOT_HELD`, or the connection's end.
    The connection is left open: closing it would release the hold.

    After join(): windows = [(send, safe_ms, end)], last_end = the latest
    window end (None: never had one), stopped = when it stopped, why = the
    reason, lines = every line it read."""

    def __init__(self, client, name):
        super().__init__(name="holder-" + name, daemon=True)
        self.c = client
        self.name_ = name
        self.windows = []
        self.last_end = None
        self.stopped = None
        self.why = None
        self.lines = []
        self.error = None
        self._cond = threading.Condition()
        self._quit = threading.Event()

    # -- reading without failing the test from this thread

    def _line(self, deadline):
        """The next line (str), None at the deadline, "" at end of file."""
        c = self.c
        while True:
            i = c.buf.find(b"\n")
            if i >= 0:
                line, c.buf = c.buf[:i], c.buf[i + 1:]
                text = line.decode("latin-1")
                self.lines.append(text)
                return text
            if c.eof:
                return ""
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([c.sock], [], [], min(left, 0.2))
            if self._quit.is_set():
                return None
            if not r:
                continue
            try:
                data = c.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                c.eof = True
            c.buf += data

    def _halt(self, why, at=None):
        with self._cond:
            self.why = why
            self.stopped = time.monotonic() if at is None else at
            self._cond.notify_all()

    def run(self):
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
            self._halt("error: %r" % (e,))

    def _run(self):
        name = self.name_
        lost = re.compile(r"LOST %s \d+ \S+$" % re.escape(name))
        ok = re.compile(r"OK %s \d+ (\d+)$" % re.escape(name))
        next_send = time.monotonic()
        while not self._quit.is_set():
            # Until the next CHECK is due, read what the daemon pushes (LOST).
            now = time.monotonic()
            if self.last_end is not None and next_send >= self.last_end:
                next_send = self.last_end      # the window runs out first
            while now < next_send:
                line = self._line(next_send)
                if line is None:
                    break
                if line == "":
                    return self._halt("connection closed")
                if lost.match(line):
                    return self._halt("LOST: " + line)
                return self._halt("unexpected line %r" % line)
            if self._quit.is_set():
                return self._halt("told to stop")
            if self.last_end is not None and time.monotonic() >= self.last_end:
                return self._halt("window ran out", self.last_end)
            sent = time.monotonic()
            try:
                self.c.send("CHECK %s\n" % name)
            except OSError:
                return self._halt("connection closed")
            deadline = self.last_end if self.last_end is not None else sent + 10.0
            while True:
                line = self._line(deadline)
                if line is None:
                    if self._quit.is_set():
                        return self._halt("told to stop")
                    return self._halt("window ran out without an answer", deadline)
                if line == "":
                    return self._halt("connection closed")
                if lost.match(line):
                    return self._halt("LOST: " + line)
                if line.startswith("ERR NOT_HELD"):
                    return self._halt(line)
                m = ok.match(line)
                if not m:
                    return self._halt("unexpected line %r" % line)
                break
            safe_ms = int(m.group(1))
            end = sent + safe_ms / 1000.0
            with self._cond:
                self.windows.append((sent, safe_ms, end))
                if self.last_end is None or end > self.last_end:
                    self.last_end = end
                self._cond.notify_all()
            next_send = sent + max(safe_ms / 4000.0, 0.05)
        self._halt("told to stop")

    def wait_windows(self, n, timeout):
        """Waits until n windows were given (fails if it stopped first)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.windows) < n:
                if self.stopped is not None:
                    raise AssertionError("the holder stopped (%s) after %d window(s)"
                                         % (self.why, len(self.windows)))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the holder had %d window(s) after %.1fs"
                                         % (len(self.windows), timeout))
                self._cond.wait(left)

    def finish(self, timeout):
        """Waits for the holder to stop by itself (at most timeout s, then
        tells it to); returns True if it stopped by itself."""
        self.join(timeout)
        if self.is_alive():
            self._quit.set()
            self.join(5.0)
            return False
        return True


# ------------------------------------------------------------------ tests

def dump_on_failure(cls):
    """Class decorator: a failing test prints the daemons' and servers' log
    tails and keeps the servers' directories."""
    for attr in list(vars(cls)):
        fn = getattr(cls, attr)
        if not attr.startswith("test") or not callable(fn):
            continue

        def wrap(fn):
            @functools.wraps(fn)
            def wrapper(self):
                try:
                    return fn(self)
                except unittest.SkipTest:
                    raise
                except BaseException:
                    self._failed = True
                    self.dump_diagnostics()
                    raise
            return wrapper
        setattr(cls, attr, wrap(fn))
    return cls


class PartitionBase(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not zk_available():
            lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")

    def setUp(self):
        self._failed = False
        self._daemons = []
        self._runs = []
        self.ens = None
        self.net = None
        self.root = "/lbpart-" + self._testMethodName
        self._t0 = time.monotonic()

    def tearDown(self):
        note("%s: %.1f s" % (self._testMethodName, time.monotonic() - self._t0))

    def dump_diagnostics(self):
        _keep_work_dir[0] = True
        out = sys.stderr
        out.write("\n===== %s failed =====\n" % self._testMethodName)
        if self.net is not None:
            out.write("%r\n" % self.net)
            for c in self.net.connections():
                out.write("  %s\n" % (c,))
        for d in self._daemons:
            out.write(d.log_tail(60) + "\n")
        for p in self._runs:
            if p.rc is None:
                if p.proc.poll() is None:
                    p.proc.kill()   # its guardian kills the command's group
                try:
                    p.finish(5.0)
                except AssertionError as e:
                    out.write("%s\n" % e)
            out.write("--- lockbroker %s: exit %r, argv %r ---\n%s---\n"
                      % (p.label, p.proc.returncode, p.argv[:6], p.err))
        if self.ens is not None:
            self.ens.mark_failed(out, lines=40)
        out.flush()

    # -- the ensemble and the daemons

    def start_ensemble(self):
        """Three proxied servers; returns (leader, [followers])."""
        ens = ZkEnsemble(n=3, tick_ms=TICK_MS, sync_limit=SYNC_LIMIT, proxied=True,
                         name="ens", base_dir=tempfile.mkdtemp(prefix="ens-", dir=WORK_DIR))
        self.ens, self.net = ens, ens.net

        def cleanup():
            ens.stop(grace=5.0)
            ens.cleanup()
        self.addCleanup(cleanup)
        leader = ens.start()
        followers = [s for s in ens.servers if s is not leader]
        return leader, followers

    def start_daemon(self, name, cut_from=(), extra=""):
        """A daemon whose ZooKeeper connections go through proxies of its
        own, with its paths to the servers in cut_from cut (both ways)
        before it starts, so that its session is on one of the others.
        Waits for its session; d.backend is the server it is on."""
        for s in cut_from:
            self.net.cut(name, s)
        hosts = self.ens.hosts_for(name)
        config = ("[zookeeper]\nhosts = %s\nroot = %s\nsession_timeout_ms = %d\n"
                  "tick_ms = %d\n%s" % (hosts, self.root, SESSION_MS, TICK_MS, extra))
        d = Daemon(config=config, name=name)
        d.start()
        self._daemons.append(d)
        self.addCleanup(self._stop_daemon, d)
        # runs before the stop: a daemon cut off may take long to exit
        self.addCleanup(self.net.heal_all)
        d.daemon_id = d.wait_log(r"zk: daemon id (\S+), connecting").group(1)
        # Each try of a server behind a cut costs the daemon 1 s (its
        # handshake limit), and the C client picks servers at random.
        d.session = int(d.wait_log(SESSION_RE, scaled(40.0)).group(1), 16)
        d.wait_log(r"zk: every daemon of root \S+ has \[zookeeper\] nonfair", scaled(15.0))
        d.backend = self.ens.server(self.net.backend(name, kind="client"))
        # ZooKeeper agrees: the session is that server's client
        self.wait_zk(lambda: d.session in zkharness.sessions(d.backend.port),
                     "session 0x%x of %s on %s" % (d.session, name, d.backend.node))
        if cut_from:
            self.assertNotIn(d.backend, list(cut_from))
        return d

    def _stop_daemon(self, d):
        if d.proc is None:
            return
        if self._failed:
            d.kill()
            return
        m = d.find_log(ERROR_RE)
        if m:
            d.kill()
            raise AssertionError("%s logged an error: %r\n%s" % (d.name, m.string, d.log_tail()))
        d.stop()

    def client(self, d, timeout=None):
        c = d.client(timeout=timeout)
        self.addCleanup(c.close)
        return c

    def wait_zk(self, pred, what, timeout=None):
        try:
            return wait_for(pred, scaled(15.0) if timeout is None else timeout,
                            interval=0.05, what=what)
        except zkharness.ZkTimeout as e:
            raise AssertionError(str(e))

    # -- the scenario

    def hold_and_wait(self, d0, d1):
        """A takes x through d0 and follows its windows; B waits for x
        through d1, its node in ZooKeeper behind A's. Returns (a, token of
        A, holder, b)."""
        a = self.client(d0)
        a.send("LOCK x\n")
        t_a = int(a.expect_match(r"OK x %s" % TOKEN).group(1))
        holder = WindowFollower(a, "x")
        holder.start()
        self.addCleanup(holder.finish, 0)
        b = self.client(d1, timeout=scaled(60.0))
        b.send("LOCK x 45000\n")
        d1.wait_queued(b, "x")
        # B's node exists and watches A's: the grant can only come from
        # ZooKeeper telling d1 that A's node went.
        d1.wait_log(r"zk: \S+/x/%s-\S+ waits for \S+/x/%s-" % (
            re.escape(d1.daemon_id), re.escape(d0.daemon_id)), since=b.mark)
        holder.wait_windows(2, scaled(15.0))
        return a, t_a, holder, b

    def cut_and_grant(self, cut, holder, b, t_a, label):
        """Runs cut() (which makes the cut), waits for B's grant, lets the
        holder stop, prints the numbers and asserts the safety property.
        Returns (t_cut, t_grant, B's token)."""
        cut()
        t_cut = time.monotonic()
        m = b.expect_match(r"(OK|TIMEOUT) x(?: %s)?" % TOKEN, timeout=scaled(50.0))
        t_grant = time.monotonic()
        by_itself = holder.finish(scaled(30.0))
        self.assertIsNone(holder.error)
        last = holder.last_end
        windows = " ".join("%+.2f:%d" % (s - t_cut, ms) for s, ms, _ in holder.windows[-6:])
        note("%s: B granted %+.2f s after the cut; A's last window end %+.2f s "
             "(margin %+.2f s), A stopped %+.2f s (%s); A's last CHECKs (sent:safe-ms) %s"
             % (label, t_grant - t_cut, last - t_cut, t_grant - last,
                holder.stopped - t_cut, holder.why, windows))
        self.assertEqual(m.group(1), "OK", "B was not granted x")
        t_b = int(m.group(2))
        self.assertTrue(by_itself, "A was still given windows %.1f s after B's grant"
                        % (time.monotonic() - t_grant))
        self.assertLessEqual(
            last, t_grant,
            "%s: A's last window ends %.3f s after the cut, after B's grant at %.3f s "
            "(by %.3f s): two holders at once" % (label, last - t_cut, t_grant - t_cut,
                                                  last - t_grant))
        self.assertGreater(t_b, t_a)
        return t_cut, t_grant, t_b

    # -- lockbroker run on both sides

    def lockbroker(self, label, args):
        """Starts the built cli/lockbroker (env LOCKBROKER) with args; it
        and its command's process group are killed at cleanup."""
        p = LbProc(args)
        p.label = label
        self.addCleanup(p.kill)
        self._runs.append(p)
        return p

    def wait_writes(self, path, p, what, timeout):
        """Waits until the file at path has a first complete line (the
        command of lockbroker p wrote); fails if p ends first. Returns
        the timestamps written so far."""
        deadline = time.monotonic() + timeout
        while True:
            ts = read_stamps(path)
            if ts:
                return ts
            if p.proc.poll() is not None:
                p.finish(5.0)
                raise AssertionError("%s: lockbroker exited %d before its command wrote; "
                                     "stderr %r" % (what, p.rc, p.err))
            if time.monotonic() >= deadline:
                raise AssertionError("%s: no line in %s within %.1f s" % (what, path, timeout))
            time.sleep(0.01)

    def queued_in_zookeeper(self, server, d):
        """The lock nodes of x in ZooKeeper (read through server's real
        port, after a sync) when one of them is d's, else None."""
        paths = zkharness.ls_recursive(server.connect_string, self.root)
        nodes = [q for q in paths if re.search(r"/x/[^/]+$", q)]
        mine = [q for q in nodes if q.rsplit("/", 1)[1].startswith(d.daemon_id + "-")]
        return nodes if mine and len(nodes) >= 2 else None

    def run_both_and_cut(self, d0, d1, zk_server, cut, label):
        """A = lockbroker run x through d0, writing to a file; B = the same
        through d1, queued behind A (its node in ZooKeeper, read through
        zk_server, and watching A's); then cut(), B's first write, A's
        end. Asserts B's first timestamp > A's last one, A's exit status
        (116 or 120) and its stderr. Returns the numbers it printed."""
        files = tempfile.mkdtemp(prefix="run-", dir=WORK_DIR)
        fa, fb = os.path.join(files, "A"), os.path.join(files, "B")
        pa = self.lockbroker("A", ["-H", d0.listen_addr, "run", "-w", "10s", "x", "--",
                                   sys.executable, "-c", WRITER, fa])
        self.wait_writes(fa, pa, "A", scaled(15.0))
        mark = d1.log_mark()
        pb = self.lockbroker("B", ["-H", d1.listen_addr, "run", "-w", "50s", "x", "--",
                                   sys.executable, "-c", WRITER, fb])
        # B's node exists and watches A's: the grant can only come from
        # ZooKeeper telling d1 that A's node went.
        d1.wait_log(r"zk: \S+/x/%s-\S+ waits for \S+/x/%s-" % (
            re.escape(d1.daemon_id), re.escape(d0.daemon_id)), scaled(15.0), since=mark)
        nodes = self.wait_zk(lambda: self.queued_in_zookeeper(zk_server, d1),
                             "B's node under x in ZooKeeper")
        self.assertIsNone(pb.proc.poll(), "B's lockbroker ended: %r" % (pb.proc.poll(),))
        self.assertEqual(read_stamps(fb), [], "B's command ran while A held x")
        self.assertIsNone(pa.proc.poll(), "A's lockbroker ended before the cut")

        cut()
        t_cut = time.monotonic()
        b_first = self.wait_writes(fb, pb, "B", scaled(50.0))[0]
        t_b_seen = time.monotonic()
        rc = pa.finish(scaled(30.0))
        a = read_stamps(fa)
        a_last = a[-1]
        a_after = [t for t in a if t >= b_first]
        numbers = {"b_first": b_first - t_cut, "a_last": a_last - t_cut,
                   "margin": b_first - a_last, "a_rc": rc,
                   "a_after_cut": sum(1 for t in a if t > t_cut)}
        why = pa.err.splitlines()[0] if pa.err else ""
        note("%s: B's first write %+.3f s after the cut, A's last write %+.3f s "
             "(margin %+.3f s), A's writes after the cut %d, A's lockbroker exit %d "
             "(%s); B's first write seen here %+.3f s; ZooKeeper nodes of x %s"
             % (label, numbers["b_first"], numbers["a_last"], numbers["margin"],
                numbers["a_after_cut"], rc, why, t_b_seen - t_cut,
                [q.rsplit("/", 1)[1] for q in nodes]))
        self.assertGreater(
            b_first, a_last,
            "%s: A wrote until %.3f s after the cut, B from %.3f s: both wrote for %.3f s"
            % (label, a_last - t_cut, b_first - t_cut, a_last - b_first))
        self.assertEqual(a_after, [], "A wrote at or after B's first write")
        self.assertIn(rc, (EXIT_LOST, EXIT_JEOPARDY), "A's lockbroker: %r" % pa.err)
        lines = pa.err.splitlines()
        self.assertRegex(lines[0], r"^lockbroker: lock x (lost \(.*\)|in jeopardy: .*); "
                         r"terminating the command$", pa.err)
        self.assertEqual(rc == EXIT_JEOPARDY, "in jeopardy" in lines[0], pa.err)
        for line in lines[1:]:
            self.assertRegex(line, r"^lockbroker: grace period cut to [0-9]+ ms", pa.err)
        # SIGKILL ended A's command (it ignores SIGTERM), and its whole group
        # before lockbroker exited: nothing more is written.
        self.assertEqual(read_stamps(fa), a)

        # B's command ends on SIGINT (forwarded to its group); lockbroker
        # then releases x.
        self.assertIsNone(pb.proc.poll(), "B's lockbroker ended: %r" % (pb.proc.poll(),))
        pb.signal(signal.SIGINT)
        pb.finish(scaled(20.0))
        return numbers


@dump_on_failure
class NetcutTest(unittest.TestCase):
    """netcut.py alone, against a local echo server: what a cut does."""

    def setUp(self):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.addCleanup(self.srv.close)
        self.peers = []
        self.net = netcut.Net(name="unit")
        self.addCleanup(self.net.close)
        self.addr = self.net.proxy("c", "e", self.srv.getsockname())
        self._failed = False

    def dump_diagnostics(self):
        sys.stderr.write("%r\n%r\n" % (self.net, self.net.connections()))

    def pair(self):
        """(client socket through the proxy, server side socket)."""
        c = socket.create_connection(self.addr, timeout=5)
        self.addCleanup(c.close)
        self.srv.settimeout(5)
        s, _ = self.srv.accept()
        self.addCleanup(s.close)
        s.settimeout(5)
        return c, s

    @staticmethod
    def quiet(sock, t=0.3):
        """True if nothing arrives on sock within t seconds (only used to
        show that a cut holds; never to order events)."""
        r, _, _ = select.select([sock], [], [], t)
        return not r

    def test_one_way_cut_holds_bytes_and_eof(self):
        c, s = self.pair()
        c.sendall(b"a")
        self.assertEqual(s.recv(10), b"a")
        self.net.cut("c", "e", "a->b")
        c.sendall(b"held")
        s.sendall(b"flows")
        self.assertEqual(c.recv(10), b"flows")      # e -> c is not cut
        self.assertTrue(self.quiet(s))
        c.shutdown(socket.SHUT_WR)                  # the FIN is held too
        self.assertTrue(self.quiet(s))
        self.assertEqual(self.net.connections()[0].state, "open")
        self.net.heal("c", "e")
        self.assertEqual(s.recv(10), b"held")
        self.assertEqual(s.recv(10), b"")
        self.assertEqual(self.net.backend("c"), "e")

    def test_new_connection_across_a_cut_is_held(self):
        self.net.cut("e", "c", "a->b")              # one direction is enough
        c = socket.create_connection(self.addr, timeout=5)
        self.addCleanup(c.close)
        c.sendall(b"hello")
        self.srv.settimeout(0.3)
        self.assertRaises(socket.timeout, self.srv.accept)
        self.assertEqual([i.state for i in self.net.connections()], ["held"])
        self.net.heal_all()
        self.srv.settimeout(5)
        s, _ = self.srv.accept()
        self.addCleanup(s.close)
        s.settimeout(5)
        self.assertEqual(s.recv(10), b"hello")

    def test_partition_and_close(self):
        made = self.net.partition({"c", "x"}, {"e"})
        self.assertEqual(set(made), {("c", "e"), ("e", "c"), ("x", "e"), ("e", "x")})
        self.assertTrue(self.net.is_cut("e", "c"))
        self.net.heal_all()
        self.assertEqual(self.net.cuts(), set())
        c, s = self.pair()
        s.close()                                   # a close goes through
        self.assertEqual(c.recv(10), b"")
        self.net.close()
        self.assertFalse(self.net.running)
        self.assertEqual(self.net.connections(), [])
        self.assertEqual(self.net.errors, [])


@dump_on_failure
class EnsembleProxyTest(PartitionBase):
    """The proxies really stand between ZooKeeper servers and between a
    daemon and its server, and a cut really isolates."""

    def test_00_quorum_paths_go_through_proxies_and_cuts_isolate(self):
        leader, (f1, f2) = self.start_ensemble()
        ens, net = self.ens, self.net

        def check_views():
            # Each member's view: its own real address, proxies for the
            # others (reconfigEnabled=false: the leader's config, sent with
            # NEWLEADER, does not replace it).
            for s in ens.servers:
                conf = zkharness.fourlw(s.port, "conf")
                for m in ens.servers:
                    want = ((m.quorum_port, m.election_port) if m is s else
                            (net.address(s.node, m.node, "quorum")[1],
                             net.address(s.node, m.node, "election")[1]))
                    self.assertRegex(conf, r"(?m)^server\.%d=127\.0\.0\.1:%d:%d" % (
                        m.myid, want[0], want[1]))
        check_views()
        # Every established connection to a quorum or election port comes
        # from the proxies (an election connection accepted from a lower
        # sid is called back at the address in its first message, which
        # the proxy rewrites).
        real = {s.quorum_port for s in ens.servers} | {s.election_port for s in ens.servers}

        def around():
            ups = net.upstream_ports()
            return [(l, r) for l, r in netcut.tcp_connections()
                    if r[1] in real and l[1] not in ups]
        self.assertEqual(around(), [])
        kinds = {(c.src, c.dst, c.kind) for c in net.connections() if c.state == "open"}
        for f in (f1, f2):
            self.assertIn((f.node, leader.node, "quorum"), kinds)
        pairs = {frozenset(k[:2]) for k in kinds if k[2] == "election"}
        self.assertEqual(len(pairs), 3, kinds)      # one per pair of servers

        # A follower cut from the others leaves the quorum (after syncLimit
        # ticks); the other two go on.
        t = time.monotonic()
        net.partition({f1}, {leader, f2})
        self.wait_zk(lambda: f1.serving_mode() is None, "%s to stop serving" % f1.node)
        note("cut follower stops serving after %.2f s" % (time.monotonic() - t))
        self.assertEqual(leader.serving_mode(), "leader")
        self.assertEqual(f2.serving_mode(), "follower")
        net.heal_all()
        self.wait_zk(lambda: f1.serving_mode() == "follower", "%s to follow again" % f1.node)
        self.assertIs(ens.wait_quorum(), leader)

        # A leader cut from the others stops leading; they elect one of
        # themselves.
        t = time.monotonic()
        net.isolate(leader)
        self.wait_zk(lambda: leader.serving_mode() is None, "the old leader to stop")
        new = self.wait_zk(lambda: [s for s in (f1, f2) if s.serving_mode() == "leader"],
                           "a new leader")[0]
        note("cut leader: a new leader after %.2f s" % (time.monotonic() - t))
        other = f2 if new is f1 else f1
        self.wait_zk(lambda: other.serving_mode() == "follower", "the other to follow")
        self.assertIsNone(leader.serving_mode())
        net.heal_all()
        self.wait_zk(lambda: leader.serving_mode() == "follower", "the old leader to follow")
        self.assertIs(ens.wait_quorum(), new)
        self.assertEqual(around(), [])
        check_views()

        # A daemon's session is on the server its proxies say.
        d0 = self.start_daemon("D0", cut_from=[new, other])
        self.assertIs(d0.backend, leader)
        self.assertEqual(net.backends("D0", kind="client"), [leader.node])
        self.assertEqual(net.errors, [])


@dump_on_failure
class PartitionTest(PartitionBase):

    def test_a_holder_and_its_follower_cut_off(self):
        """{D0, F} | {L, F2, D1}, D0's session on the follower F: F answers
        D0 for syncLimit ticks while the leader expires D0's session a
        session timeout after it last heard of it."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        self.assertIs(d0.backend, f)
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        self.cut_and_grant(lambda: self.net.partition({d0, f}, {leader, f2, d1}),
                           holder, b, t_a, "a: {D0,F}|{L,F2,D1}")

    def test_b_holder_and_the_leader_cut_off(self):
        """{D0, L} | {F, F2, D1}, D0's session on the leader L: L answers D0
        until it sees it has no quorum; F and F2 elect a new leader, which
        gives D0's session a full timeout from then."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[f, f2])
        d1 = self.start_daemon("D1", cut_from=[leader])
        self.assertIs(d0.backend, leader)
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        self.cut_and_grant(lambda: self.net.partition({d0, leader}, {f, f2, d1}),
                           holder, b, t_a, "b: {D0,L}|{F,F2,D1}")
        # the majority side elected a leader of its own
        self.assertIn("leader", (f.serving_mode(), f2.serving_mode()))

    def test_c_holder_daemon_cut_from_every_server(self):
        """D0 alone, cut from the three servers (its session on whichever
        server it chose): nothing answers D0 from the cut on."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0")
        d1 = self.start_daemon("D1")
        note("c: D0 on %s (%s)" % (d0.backend.node, d0.backend.serving_mode()))
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        self.cut_and_grant(lambda: self.net.partition({d0}, self.ens.servers),
                           holder, b, t_a, "c: {D0}|{L,F,F2}")

    def test_f_short_cut_healed_after_lost(self):
        """D0 cut from every server until it tells A `LOST` (2/3 of the
        session timeout after confirmed_at), then healed at once, while the
        session still lives: D0 gets it back, and A's node must stay until
        the last window A may have been given ends (confirmed_at + T), not go
        at the reconnection (the soak's zk-quorum-freeze found that)."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0")
        d1 = self.start_daemon("D1")
        a, t_a, holder, b = self.hold_and_wait(d0, d1)

        def heal_once_lost():
            holder.join(scaled(30.0))          # it stops on the LOST line
            self.net.heal_all()

        def cut():
            self.net.partition({d0}, self.ens.servers)
            threading.Thread(target=heal_once_lost, daemon=True).start()
        self.cut_and_grant(cut, holder, b, t_a, "f: {D0}|{L,F,F2} until LOST")
        self.assertTrue(holder.why.startswith("LOST"), holder.why)

    def test_d1_follower_outgoing_packets_dropped(self):
        """Only what F sends to L and F2 is dropped, D0's session on F: the
        leader hears nothing from F (no acks, no session touches) and drops
        it after syncLimit ticks, closing its connection, which F still
        receives. Like case a, with half the cut."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        a, t_a, holder, b = self.hold_and_wait(d0, d1)

        def cut():
            self.net.cut(f, leader, "a->b")
            self.net.cut(f, f2, "a->b")
        self.cut_and_grant(cut, holder, b, t_a, "d1: F->{L,F2} dropped")

    def test_d2_holder_daemon_requests_dropped(self):
        """Only what D0 sends to F (its server) is dropped: F hears nothing
        more of the session (the leader expires it a timeout after), D0 no
        answer to anything sent after the cut."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        self.cut_and_grant(lambda: self.net.cut(d0, f, "a->b"), holder, b, t_a,
                           "d2: D0->F dropped")

    def test_d3_holder_daemon_answers_dropped(self):
        """Only what F sends to D0 is dropped: what D0 sends still reaches
        F and touches the session, but D0 hears nothing (no answer, so no
        fresh window); A's windows must run out before the session ends, a
        timeout after the last of D0's packets reached F (D0's client sends
        no ping while a request is unanswered, and closes the connection
        after 2/3 of the timeout, which F sees)."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        self.cut_and_grant(lambda: self.net.cut(f, d0, "a->b"), holder, b, t_a,
                           "d3: F->D0 dropped")

    def test_e_heal_after_holder_and_follower_cut_off(self):
        """Case a's cut, B granted, then everything healed: F rejoins the
        quorum, D0 gets a new session (its old one expired), A learns it
        lost x, and D0 grants x again after B, with a greater token."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        a, t_a, holder, b = self.hold_and_wait(d0, d1)
        mark = d0.log_mark()
        self.net.partition({d0, f}, {leader, f2, d1})
        t_cut = time.monotonic()
        t_b = int(b.expect_match(r"OK x %s" % TOKEN, timeout=scaled(50.0)).group(1))
        note("e: B granted %+.2f s after the cut" % (time.monotonic() - t_cut))
        self.assertGreater(t_b, t_a)
        holder.finish(scaled(30.0))
        self.assertIsNone(holder.error)

        self.net.heal_all()
        t_heal = time.monotonic()
        self.assertIs(self.ens.wait_quorum(scaled(30.0)), leader)
        new = int(d0.wait_log(SESSION_RE, scaled(30.0), since=mark).group(1), 16)
        self.assertNotEqual(new, d0.session)
        note("e: D0's new session %.2f s after the heal" % (time.monotonic() - t_heal))
        # A's hold is gone: a LOST line (unless the holder read it), then
        # CHECK says so.
        a.send("CHECK x\n")
        line = a.line()
        if line.startswith("LOST"):
            self.assertRegex(line, r"^LOST x %d \S+$" % t_a)
            line = a.line()
        else:
            self.assertTrue(any(re.match(r"LOST x %d \S+$" % t_a, l) for l in holder.lines),
                            "A was never told LOST: %r" % holder.lines)
        self.assertEqual(line, "ERR NOT_HELD this connection does not hold that lock")
        # D0 serves again: x after B, through D0, with a greater token.
        c = self.client(d0, timeout=scaled(30.0))
        c.send("LOCK x 20000\n")
        d0.wait_queued(c, "x")
        self.assertEqual(b.request("UNLOCK x"), "OK x")
        t_c = int(c.expect_match(r"OK x %s" % TOKEN).group(1))
        self.assertGreater(t_c, t_b)
        self.assertEqual(c.request("UNLOCK x"), "OK x")


@dump_on_failure
class RunPartitionTest(PartitionBase):
    """Cases a and b with `lockbroker run` on both sides (the issue's
    reproduction): A's command must be killed before B's starts."""

    def test_run_a_holder_and_its_follower_cut_off(self):
        """{D0, F} | {L, F2, D1}, D0's session on the follower F."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[leader, f2])
        d1 = self.start_daemon("D1", cut_from=[f])
        self.assertIs(d0.backend, f)
        self.run_both_and_cut(d0, d1, leader,
                              lambda: self.net.partition({d0, f}, {leader, f2, d1}),
                              "run-a: {D0,F}|{L,F2,D1}")

    def test_run_b_holder_and_the_leader_cut_off(self):
        """{D0, L} | {F, F2, D1}, D0's session on the leader L."""
        leader, (f, f2) = self.start_ensemble()
        d0 = self.start_daemon("D0", cut_from=[f, f2])
        d1 = self.start_daemon("D1", cut_from=[leader])
        self.assertIs(d0.backend, leader)
        self.run_both_and_cut(d0, d1, f,
                              lambda: self.net.partition({d0, leader}, {f, f2, d1}),
                              "run-b: {D0,L}|{F,F2,D1}")
        self.assertIn("leader", (f.serving_mode(), f2.serving_mode()))


if __name__ == "__main__":
    if not zk_available():
        lbharness.skip_file("test_partition.py", "zk", "ZooKeeper not installed")
    # Two processes at once: the cases wait on ZooKeeper's timeouts far
    # more than they compute (tests/README.md, "Time").
    lbharness.main_in_parallel([["PartitionTest"],
                                ["NetcutTest", "EnsembleProxyTest", "RunPartitionTest"]])
