#!/usr/bin/env python3
"""End-to-end tests of `lockbroker run --session-grace` (issue 38): a lock
held through a dropped connection.

`lockbroker run` sends `GRACE <ms>` before its LOCK; when its connection
drops while the command runs, it connects again to the same address, sends
`RESUME <session> <secret>` and a CHECK, and the command runs on
(PROTOCOL.md, GRACE and RESUME; lockbroker(1), --session-grace).

Two kinds of cases:
- ScriptedSessionTests: a scripted broker (as test_cli.py's FakeBrokerTests)
  checks the exact requests and what lockbroker does with each reply: the
  GRACE, the RESUME with its secret, a refused RESUME, an older daemon, the
  end of the grace, a CHECK that gets no reply.
- DropTests: the real daemon behind a TCP proxy of the test (netcut.Net)
  whose connections are reset or whose path is black-holed; meanwhile
  another client is refused the name. DistributedDropTests: a reset in
  distributed mode. TlsDropTests: the same over TLS with a client
  certificate. TlsHandoverTests: a TLS run across SIGUSR2, in embedded and
  distributed mode.

Nothing sleeps to synchronise: the tests wait for lockbroker's stderr
lines, the daemon's replies and log lines, with timeouts that fail them.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
import netcut  # noqa: E402
import test_cli  # noqa: E402
from lbharness import Client, TIMEOUT  # noqa: E402
from lbpki import Pki, have_openssl  # noqa: E402
from test_cli import EXIT_LOST, EXIT_USAGE  # noqa: E402

SESSION = "0123456789abcdef"
SECRET = "00112233445566778899aabbccddeeff"

# The lines lockbroker writes on a drop and once it has the lock back.
DROPPED = (r"^lockbroker: connection to %(addr)s dropped \((?P<why>.*)\); the command runs "
           r"on while taking lock %(n)s back \(for up to [0-9]+ ms: --session-grace %(ms)d ms "
           r"counts from the last request answered, [0-9]+ ms ago\)$")
TAKEN_BACK = (r"^lockbroker: lock %(n)s taken back on a new connection to %(addr)s, [0-9]+ ms "
              r"after the drop \([0-9]+ tr(y|ies)\)$")


def dropped_re(addr, n, ms=10000):
    return DROPPED % {"addr": re.escape(addr), "n": re.escape(n), "ms": ms}


def taken_back_re(addr, n):
    return TAKEN_BACK % {"addr": re.escape(addr), "n": re.escape(n)}


# A command that says it runs, then ends with status 0 at the first line on its stdin.
WAIT_FOR_LINE = ["sh", "-c", "echo running; read x; echo done"]


def stopped(p):
    """Waits for lockbroker's exit before finish(), which closes the
    command's stdin and so would let a command being stopped end by
    itself (and print "done")."""
    try:
        p.proc.wait(timeout=test_cli.RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("%r did not exit" % (p.argv,))
    p.finish()


class ScriptedSessionTests(test_cli.Case):
    """A scripted broker: the test reads lockbroker's requests and writes
    the replies, a session's included."""

    def setUp(self):
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(self.srv.close)
        self.srv.settimeout(TIMEOUT)
        self.addr = "127.0.0.1:%d" % self.srv.getsockname()[1]

    def accept(self):
        sock, _ = self.srv.accept()
        c = Client(sock)
        self.addCleanup(c.close)
        return c

    def granted(self, args, n, grace="10000", session_reply="OK %s %s" % (SESSION, SECRET),
                command=WAIT_FOR_LINE):
        """Starts `lockbroker run ARGS n -- COMMAND` (stdin a pipe), answers
        CLIENT, GRACE (session_reply), LOCK and the first CHECK. Returns
        (proc, conn) once the command runs (says "running")."""
        p = self.start(["-H", self.addr, "run"] + args + [n, "--"] + command,
                       stdin=subprocess.PIPE)
        c = self.accept()
        c.expect_match(r"CLIENT \S+")
        c.send("OK\n")
        if grace is not None:
            c.expect("GRACE " + grace)
            c.send(session_reply + "\n")
        c.expect("LOCK " + n)
        c.send("OK %s 42\n" % n)
        c.expect("CHECK %s 42" % n)
        c.send("OK %s 42 600000\n" % n)
        self.assertEqual(p.read_line(), "running")
        return p, c

    def resumed(self, n, count=1):
        """Accepts the new connection, checks CLIENT, RESUME and CHECK, and
        gives the lock back. Returns the connection."""
        c = self.accept()
        c.expect_match(r"CLIENT \S+")
        c.send("OK\n")
        c.expect("RESUME %s %s" % (SESSION, SECRET))
        c.expect("CHECK %s 42" % n)
        c.send("OK %s %d\nOK %s 42 600000\n" % (SESSION, count, n))
        return c

    def test_a_dropped_connection_is_taken_back_and_the_command_runs_on(self):
        n = self.name()
        p, c = self.granted([], n)
        c.close()
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n))
        c2 = self.resumed(n)
        self.assertRegex(p.read_err_line(), taken_back_re(self.addr, n))
        p.write("go\n")
        # The release goes on the new connection, then QUIT ends the session.
        c2.expect("UNLOCK " + n)
        c2.send("OK %s\n" % n)
        c2.expect("QUIT")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")

    def test_a_check_without_reply_is_a_drop(self):
        # A half-open connection (a NAT that forgot it): no reply to a CHECK
        # within -t. The old connection is closed, the lock taken back anew.
        # (-g 100ms: the command runs on until 100 ms before the end of the
        # grace counted from the first CHECK, not 2.5 s before.)
        n = self.name()
        p, c = self.granted(["-t", "300ms", "-g", "100ms"], n)
        c.expect("CHECK %s 42" % n)          # a second later; not answered
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n))
        c.expect_eof()
        c2 = self.resumed(n)
        self.assertRegex(p.read_err_line(), taken_back_re(self.addr, n))
        p.write("go\n")
        c2.expect("UNLOCK " + n)
        c2.send("OK %s\n" % n)
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")

    def test_resume_refused_is_a_loss(self):
        n = self.name()
        p, c = self.granted(["-g", "100ms"], n)
        c.close()
        c2 = self.accept()
        c2.expect_match(r"CLIENT \S+")
        c2.expect("RESUME %s %s" % (SESSION, SECRET))
        c2.send("OK\nERR NOT_HELD no session with that id and secret on this daemon (its "
                "grace ran out, it ended, or the secret is wrong)\n")
        # (Read before finish(), which closes the command's stdin and so ends it.)
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n))
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s lost \(RESUME: ERR NOT_HELD "
                         r"no session .*\); terminating the command$" % re.escape(n))
        stopped(p)
        self.assert_exit(p, EXIT_LOST, stdout="")
        self.assertEqual(p.err, "")

    def test_check_not_held_after_resume_is_a_loss(self):
        # RESUME took the session, but the hold ended while detached (BREAK).
        n = self.name()
        p, c = self.granted(["-g", "100ms"], n)
        c.close()
        c2 = self.accept()
        c2.expect_match(r"CLIENT \S+")
        c2.expect("RESUME %s %s" % (SESSION, SECRET))
        c2.expect("CHECK %s 42" % n)
        c2.send("OK\nOK %s 0\nERR NOT_HELD this connection does not hold that lock\n"
                % SESSION)
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n))
        self.assertRegex(p.read_err_line(), taken_back_re(self.addr, n))
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s lost \(CHECK: ERR NOT_HELD "
                         r".*\); terminating the command$" % re.escape(n))
        stopped(p)
        self.assert_exit(p, EXIT_LOST, stdout="")

    def test_no_reconnection_by_the_end_of_the_grace_is_jeopardy(self):
        # The daemon keeps the lock for the grace from when it saw the
        # connection end, no sooner than it answered the first CHECK: so no
        # try goes on past that (D), and the command is stopped before it
        # (jeopardy). Every try is refused; their pauses (50 ms, doubling)
        # leave room for 6 tries at most in the 1800 ms to D.
        n = self.name()
        p, c = self.granted(["--session-grace", "2s", "-g", "100ms"], n, grace="2000")
        self.srv.close()      # nothing listens any more: every try is refused
        c.close()
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n, 2000))
        m = re.match(r"^lockbroker: lock %s in jeopardy: not taken back \(([0-9]+) tr(y|ies): "
                     r"cannot connect to %s: Connection refused\), and %s may free it in "
                     r"[0-9]+ ms; terminating the command$"
                     % (re.escape(n), re.escape(self.addr), re.escape(self.addr)),
                     p.read_err_line())
        self.assertIsNotNone(m)
        self.assertIn(int(m.group(1)), range(1, 7))
        stopped(p)
        self.assert_exit(p, test_cli.EXIT_JEOPARDY, stdout="")

    def test_with_a_session_checks_come_every_quarter_of_the_grace(self):
        # The window (600 s) alone asks for a CHECK once a second; a grace
        # of 800 ms for one every 200 ms at least, so that a drop only the
        # next CHECK finds leaves most of the grace to take the lock back.
        # The yardstick is the command's 2 s sleep: a CHECK once a second
        # makes 3 at most (the first included) before its UNLOCK.
        n = self.name()
        p, c = self.granted(["--session-grace", "800ms"], n, grace="800",
                            command=["sh", "-c", "echo running; sleep 2"])
        checks = 1
        while True:
            line = c.line()
            if line == "UNLOCK " + n:
                break
            self.assertEqual(line, "CHECK %s 42" % n)
            checks += 1
            c.send("OK %s 42 600000\n" % n)
        c.send("OK %s\n" % n)
        c.expect("QUIT")
        p.finish()
        self.assert_exit(p, 0, stdout="")
        self.assertGreaterEqual(checks, 6)

    def test_a_drop_noticed_too_late_stops_the_command_at_once(self):
        # The second CHECK gets no reply: a NAT that forgot the connection
        # may have reset the daemon's end at once, so the grace counts from
        # the first CHECK, answered; -t (2 s) is past it (900 ms) when the
        # drop is noticed. No try: the command is killed at once.
        n = self.name()
        p, c = self.granted(["--session-grace", "1s", "-t", "2s", "-g", "1s"], n, grace="1000")
        c.expect("CHECK %s 42" % n)          # 250 ms later; not answered
        self.assertRegex(p.read_err_line(), r"^lockbroker: connection to %s dropped \(no reply "
                         r"to CHECK within 2000 ms \(-t\)\), too late for the command to run "
                         r"on while taking lock %s back \(--session-grace 1000 ms counts from "
                         r"the last request answered, [0-9]+ ms ago\)$"
                         % (re.escape(self.addr), re.escape(n)))
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s in jeopardy: not taken back "
                         r"\(0 tries: no reply to CHECK .*\), and %s may free it in 0 ms; "
                         r"terminating the command$" % (re.escape(n), re.escape(self.addr)))
        stopped(p)
        self.assert_exit(p, test_cli.EXIT_JEOPARDY, stdout="")
        # No try was made: nothing waits to be accepted.
        self.srv.setblocking(False)
        self.assertRaises(BlockingIOError, self.srv.accept)

    def test_a_lock_taken_back_after_the_stop_is_released_at_once(self):
        # The try hangs (RESUME unanswered) past the time to stop the
        # command (1 s before D, -g 1s): SIGTERM, which it ignores. Then
        # RESUME succeeds: the command is stopped all the same (SIGKILL at
        # D), and the lock released when it has ended (QUIT), not kept for
        # the grace.
        n = self.name()
        p, c = self.granted(["--session-grace", "2s", "-g", "1s"], n, grace="2000",
                            command=["sh", "-c", "trap '' TERM; echo running; read x; "
                                     "echo done"])
        c.close()
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n, 2000))
        c2 = self.accept()
        c2.expect_match(r"CLIENT \S+")
        c2.expect("RESUME %s %s" % (SESSION, SECRET), "CHECK %s 42" % n)
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s in jeopardy: not taken back "
                         r"\(1 try: the broker closed the connection\), and %s may free it in "
                         r"[0-9]+ ms; terminating the command$"
                         % (re.escape(n), re.escape(self.addr)))
        c2.send("OK\nOK %s 1\nOK %s 42 600000\n" % (SESSION, n))
        self.assertRegex(p.read_err_line(), taken_back_re(self.addr, n)[:-1] +
                         r"; the command is being stopped all the same, and the lock is "
                         r"released when it has ended$")
        c2.expect("QUIT")
        stopped(p)
        self.assert_exit(p, test_cli.EXIT_JEOPARDY, stdout="")

    def test_an_older_daemon_without_grace(self):
        # ERR BAD_COMMAND to GRACE: one warning, the command runs, a drop is a loss.
        n = self.name()
        p, c = self.granted(["-g", "100ms"], n,
                            session_reply="ERR BAD_COMMAND unknown command GRACE")
        self.assertRegex(p.read_err_line(), r"^lockbroker: warning: %s does not know GRACE "
                         r"\(an older lockbrokerd\): a dropped connection loses lock %s "
                         r"\(--session-grace does nothing\)$"
                         % (re.escape(self.addr), re.escape(n)))
        c.close()
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s lost \(the broker closed the "
                         r"connection\); terminating the command$" % re.escape(n))
        stopped(p)
        self.assert_exit(p, EXIT_LOST, stdout="")

    def test_grace_refused_runs_without_a_session(self):
        n = self.name()
        p, c = self.granted(["--session-grace", "2m"], n, grace="120000",
                            session_reply="ERR BAD_ARGS grace must be an integer from 100 to "
                                          "60000")
        self.assertRegex(p.read_err_line(), r"^lockbroker: warning: %s refused GRACE 120000 "
                         r"\(ERR BAD_ARGS grace must be .*\): a dropped connection loses lock "
                         r"%s$" % (re.escape(self.addr), re.escape(n)))
        p.write("go\n")
        c.expect("UNLOCK " + n)
        c.send("OK %s\n" % n)
        c.expect_eof()        # no session: no QUIT either
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")

    def test_session_grace_0_sends_no_grace(self):
        n = self.name()
        p, c = self.granted(["--session-grace", "0"], n, grace=None)
        p.write("go\n")
        c.expect("UNLOCK " + n)
        c.send("OK %s\n" % n)
        c.expect_eof()
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")

    def test_the_command_ends_while_disconnected(self):
        # The lock is taken back first, so that the release is at once.
        n = self.name()
        p, c = self.granted([], n)
        c.close()
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n))
        p.write("go\n")
        self.assertEqual(p.read_line(), "done")
        c2 = self.resumed(n)
        c2.expect("UNLOCK " + n)
        c2.send("OK %s\n" % n)
        p.finish()
        self.assert_exit(p, 0, stdout="")
        self.assertRegex(p.err, r"^lockbroker: lock %s taken back" % re.escape(n))

    def test_bad_session_grace(self):
        for args, err in (
                (["--session-grace", "50ms", "run", "x", "--", "true"],
                 r"--session-grace: expected 0 \(off\), or a time with a unit from 100ms to "
                 r"1h \(5s, 30s, 2m\); got '50ms'"),
                (["--session-grace", "2h", "run", "x", "--", "true"], r"--session-grace: .*"),
                (["--session-grace", "1s", "lease", "x", "1m"],
                 r"lease: --session-grace is an option of run")):
            with self.subTest(args=args):
                p = self.lb(["-H", self.addr] + args)
                self.assert_exit(p, EXIT_USAGE, err + r" \(lockbroker --help for usage\)$",
                                 stdout="")


class DropTests(test_cli.DaemonCase):
    """The real daemon; lockbroker reaches it through a proxy of the test
    (netcut: node "cli" to node "D"), whose connections the test resets or
    black-holes. Other clients talk to the daemon directly."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.net = netcut.Net(name="cli-session")
        cls.proxy = "%s:%d" % cls.net.proxy("cli", "D", lbharness.parse_hostport(
            cls.d.listen_addr)[:2])

    @classmethod
    def tearDownClass(cls):
        cls.net.close()
        super().tearDownClass()

    def setUp(self):
        self.addCleanup(self.net.heal_all)

    def running(self, args, n):
        """`lockbroker run ARGS n -- WAIT_FOR_LINE` through the proxy, once its command runs."""
        p = self.start(["-H", self.proxy, "run"] + args + [n, "--"] + WAIT_FOR_LINE,
                       stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "running")
        return p

    def wait_status(self, n, regex):
        """Polls STATUS n (the daemon's view) until it matches regex; returns the line."""
        c = self.client()
        deadline = lbharness.time.monotonic() + TIMEOUT
        while True:
            line = c.request("STATUS %s" % n)
            if re.search(regex, line):
                return line
            self.assertLess(lbharness.time.monotonic(), deadline, line)
            lbharness.time.sleep(0.01)

    def test_a_reset_connection_is_taken_back(self):
        n = self.name()
        p = self.running([], n)
        mark = self.d.log_mark()
        # The path stays cut while the test looks: the tries wait in the proxy.
        self.net.cut("cli", "D")
        self.assertEqual(self.net.reset("cli", "D"), 1)
        self.assertRegex(p.read_err_line(), dropped_re(self.proxy, n))
        self.d.wait_log(r"session [0-9a-f]{16}: conn \d+ \(.*\) ended without QUIT: 1 holds "
                        r"detached", since=mark)
        self.wait_status(n, r"^STATUS %s held .* detached=[0-9]+" % re.escape(n))
        other = self.client()
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        self.net.heal("cli", "D")
        self.assertRegex(p.read_err_line(), taken_back_re(self.proxy, n))
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        self.assertNotRegex(self.wait_status(n, r"^STATUS %s held " % re.escape(n)),
                            r" detached=")
        p.write("go\n")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")
        # Released at the end, at once.
        self.assertRegex(other.request("TRYLOCK %s" % n), r"^OK %s [0-9]+$" % re.escape(n))

    def test_a_black_hole_is_ridden_out(self):
        # Nothing is reset: the path drops everything for a second or so.
        # The CHECK that gets no reply within -t is the drop; the daemon
        # still has the old connection, which RESUME closes.
        # (-g 100ms: the command runs on until 100 ms before the end of the
        # grace counted from the last CHECK answered, not 2.5 s before.)
        n = self.name()
        p = self.running(["-t", "300ms", "-g", "100ms"], n)
        mark = self.d.log_mark()
        self.net.cut("cli", "D")
        self.assertRegex(p.read_err_line(), dropped_re(self.proxy, n))
        other = self.client()
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        self.net.heal("cli", "D")
        self.assertRegex(p.read_err_line(), taken_back_re(self.proxy, n))
        self.d.wait_log(r"session [0-9a-f]{16}: (RESUME by conn \d+ \(.*\) while conn|"
                        r"conn \d+ \(.*\) ended without QUIT)", since=mark)
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        p.write("go\n")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")

    def test_session_grace_0_loses_the_lock_on_a_drop(self):
        n = self.name()
        p = self.running(["--session-grace", "0", "-g", "100ms"], n)
        self.assertEqual(self.net.reset("cli", "D"), 1)
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s lost \(the broker closed "
                         r"the connection\); terminating the command$" % re.escape(n))
        stopped(p)
        self.assert_exit(p, test_cli.EXIT_LOST, stdout="")
        self.assertEqual(p.err, "")
        self.assertRegex(self.client().request("LOCK %s %d" % (n, TIMEOUT * 1000)),
                         r"^OK %s [0-9]+$" % re.escape(n))

    def test_a_drop_longer_than_the_grace_is_jeopardy(self):
        # The try waits in the cut proxy; the command is stopped before the
        # end of the grace counted from the last CHECK answered.
        n = self.name()
        p = self.running(["--session-grace", "1s", "-g", "100ms"], n)
        mark = self.d.log_mark()
        self.net.cut("cli", "D")
        self.net.reset("cli", "D")
        self.assertRegex(p.read_err_line(), dropped_re(self.proxy, n, 1000))
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s in jeopardy: not taken back "
                         r"\([0-9]+ tr(y|ies): .*\), and %s may free it in [0-9]+ ms; "
                         r"terminating the command$" % (re.escape(n), re.escape(self.proxy)))
        stopped(p)
        self.assert_exit(p, test_cli.EXIT_JEOPARDY, stdout="")
        # The daemon frees it once its grace is over.
        self.d.wait_log(r"session [0-9a-f]{16}: grace of 1000 ms over, not resumed: 1 holds of "
                        r"\S+ abandoned", since=mark)
        self.d.wait_log(r"lock %s: hold ended: end=abandoned " % re.escape(n), since=mark)
        self.assertRegex(self.client().request("TRYLOCK %s" % n),
                         r"^OK %s [0-9]+$" % re.escape(n))


class DistributedDropTests(test_cli.ZkCase):
    """Distributed mode: the hold's ZooKeeper node stays while it is
    detached, and lockbroker takes it back through the same daemon, well
    within the short window of a 4 s ZooKeeper session."""

    def test_a_reset_connection_is_taken_back(self):
        zk, d = self.distributed()
        net = netcut.Net(name="cli-session-zk")
        self.addCleanup(net.close)
        proxy = "%s:%d" % net.proxy("cli", "D", lbharness.parse_hostport(d.listen_addr)[:2])
        n = self.name()
        p = self.start(["-H", proxy, "run", n, "--"] + WAIT_FOR_LINE, stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(timeout=lbharness.scaled(30)), "running")
        self.assertEqual(net.reset("cli", "D"), 1)
        self.assertRegex(p.read_err_line(), dropped_re(proxy, n))
        self.assertRegex(p.read_err_line(), taken_back_re(proxy, n))
        other = d.client()
        self.addCleanup(other.close)
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        p.write("go\n")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")
        self.assertRegex(other.request("TRYLOCK %s" % n), r"^OK %s [0-9]+$" % re.escape(n))


@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class TlsDropTests(test_cli.Case):
    """A TLS run whose connection a proxy resets: the new connection makes
    the handshake again, with the client certificate the daemon requires
    (TLS 1.3: its verdict comes after the handshake, lb_dial_step's PING)."""

    def test_a_reset_tls_connection_is_taken_back(self):
        tmp = lbharness.make_tmpdir()
        pki = Pki(os.path.join(tmp, "pki"))
        cert, key = pki.issue("alice")
        d = test_cli.start_tls_daemon(test_cli.tls_conf(pki.issue("localhost", server=True),
                                                        pki.ca, "required"),
                                      "lockbrokerd-cli-session-tls-drop")
        self.addCleanup(lambda: d.returncode is None and d.stop())
        net = netcut.Net(name="cli-session-tls")
        self.addCleanup(net.close)
        proxy = "%s:%d" % net.proxy("cli", "D", lbharness.parse_hostport(d.tls_addr)[:2])
        n = self.name()
        p = self.start(["-H", proxy, "--tls", "--cacert", pki.ca, "--cert", cert, "--key", key,
                        "run", n, "--"] + WAIT_FOR_LINE, stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "running")
        self.assertEqual(net.reset("cli", "D"), 1)
        self.assertRegex(p.read_err_line(), dropped_re(proxy, n))
        self.assertRegex(p.read_err_line(), taken_back_re(proxy, n))
        p.write("go\n")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")


@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class TlsHandoverTests(test_cli.Case):
    """A TLS `lockbroker run` across SIGUSR2, in both modes: the handover
    closes its connection (OpenSSL cannot pass a TLS session on), the lock
    stays detached in the snapshot, and lockbroker takes it back from the
    successor; nobody else is granted it meanwhile."""

    def rides_out_a_handover(self, extra="", name="lockbrokerd-cli-session-tls", zk=False):
        tmp = lbharness.make_tmpdir()
        pki = Pki(os.path.join(tmp, "pki"))
        d = test_cli.start_tls_daemon(test_cli.tls_conf(pki.issue("localhost", server=True),
                                                        pki.ca, "none", extra=extra), name)
        self.addCleanup(lambda: d.returncode is None and d.stop())
        if zk:
            d.wait_log(r"zk: new session 0x[0-9a-f]+", timeout=lbharness.scaled(30))
        n = self.name()
        p = self.start(["-H", d.tls_addr, "--tls", "--cacert", pki.ca, "run", n, "--"] +
                       WAIT_FOR_LINE, stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(timeout=lbharness.scaled(30)), "running")
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        d.wait_log(r"handover: took over ", since=mark, timeout=lbharness.scaled(30))
        self.assertIsNotNone(d.find_log(r"session [0-9a-f]{16}: conn \d+ \(.*\) ended without "
                                        r"QUIT: 1 holds detached", since=mark), d.log_tail())
        self.assertRegex(p.read_err_line(), dropped_re(d.tls_addr, n))
        self.assertRegex(p.read_err_line(), taken_back_re(d.tls_addr, n))
        other = d.client()
        self.addCleanup(other.close)
        self.assertEqual(other.request("TRYLOCK %s" % n), "BUSY %s" % n)
        p.write("go\n")
        p.finish()
        self.assert_exit(p, 0, stdout="done\n")
        self.assertEqual(p.err, "")
        self.assertRegex(other.request("TRYLOCK %s" % n), r"^OK %s [0-9]+$" % re.escape(n))

    def test_a_tls_run_rides_out_a_handover(self):
        self.rides_out_a_handover()

    @lbharness.skip_unless(test_cli.zookeeper_available(), "zk",
                           "needs java and Debian's zookeeper package")
    def test_a_tls_run_rides_out_a_handover_in_distributed_mode(self):
        import zkharness
        zk = zkharness.ZkServer(tick_ms=500, name="zk-cli-session-tls")
        self.addCleanup(zk.cleanup)
        zk.start()
        self.rides_out_a_handover(
            extra="[zookeeper]\nhosts = %s\nsession_timeout_ms = 4000\ntick_ms = 500\n"
            % zk.connect_string, name="lockbrokerd-cli-session-tls-zk", zk=True)


if __name__ == "__main__":
    unittest.main()
