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
  another client is refused the name. TlsHandoverTests: a TLS run across
  SIGUSR2, skipped until the daemon carries detached holds over a handover.

Nothing sleeps to synchronise: the tests wait for lockbroker's stderr
lines, the daemon's replies and log lines, with timeouts that fail them.
"""

import os
import re
import socket
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
import netcut  # noqa: E402
import test_cli  # noqa: E402
from lbharness import Client, TIMEOUT  # noqa: E402
from test_cli import EXIT_LOST, EXIT_USAGE  # noqa: E402

SESSION = "0123456789abcdef"
SECRET = "00112233445566778899aabbccddeeff"

# The lines lockbroker writes on a drop and once it has the lock back.
DROPPED = (r"^lockbroker: connection to %(addr)s dropped \((?P<why>.*)\); the command runs "
           r"on while taking lock %(n)s back \(for up to %(ms)d ms, --session-grace\)$")
TAKEN_BACK = (r"^lockbroker: lock %(n)s taken back on a new connection to %(addr)s, [0-9]+ ms "
              r"after the drop \([0-9]+ tr(y|ies)\)$")


def dropped_re(addr, n, ms=5000):
    return DROPPED % {"addr": re.escape(addr), "n": re.escape(n), "ms": ms}


def taken_back_re(addr, n):
    return TAKEN_BACK % {"addr": re.escape(addr), "n": re.escape(n)}


# A command that says it runs, then ends with status 0 at the first line on its stdin.
WAIT_FOR_LINE = ["sh", "-c", "echo running; read x; echo done"]


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

    def granted(self, args, n, grace="5000", session_reply="OK %s %s" % (SESSION, SECRET)):
        """Starts `lockbroker run ARGS n -- WAIT_FOR_LINE` (stdin a pipe),
        answers CLIENT, GRACE (session_reply), LOCK and the first CHECK.
        Returns (proc, conn) once the command runs."""
        p = self.start(["-H", self.addr, "run"] + args + [n, "--"] + WAIT_FOR_LINE,
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
        n = self.name()
        p, c = self.granted(["-t", "300ms"], n)
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
        p.finish()
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
        p.finish()
        self.assert_exit(p, EXIT_LOST, stdout="")

    def test_no_reconnection_within_the_grace_is_a_loss(self):
        n = self.name()
        p, c = self.granted(["--session-grace", "300ms", "-g", "100ms"], n, grace="300")
        self.srv.close()      # nothing listens any more: every try is refused
        c.close()
        self.assertRegex(p.read_err_line(), dropped_re(self.addr, n, 300))
        self.assertRegex(p.read_err_line(), r"^lockbroker: lock %s lost \(not taken back within "
                         r"300 ms of the drop \(--session-grace\), [0-9]+ tr(y|ies): cannot "
                         r"connect to %s: Connection refused\); terminating the command$"
                         % (re.escape(n), re.escape(self.addr)))
        p.finish()
        self.assert_exit(p, EXIT_LOST, stdout="")

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
        p.finish()
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


if __name__ == "__main__":
    unittest.main()
