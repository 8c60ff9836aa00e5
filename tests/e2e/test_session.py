#!/usr/bin/env python3
"""End-to-end tests of sessions: GRACE and RESUME (PROTOCOL.md, "Sessions:
holds that outlive a connection").

A connection that said GRACE <ms> keeps its granted holds for <ms> after it
ends without QUIT, detached; RESUME <session> <secret> on a new connection
takes them back with their tokens. The cases: the requests and their
errors, the caps, a client that never comes back (freed after its grace,
not before), one that comes back too late, a wrong secret and another user,
RESUME while the old connection is still open, STATUS/LOCKS/BREAK of a
detached hold, a connection reset by a proxy, the closes that do not
detach, and one distributed-mode case (another daemon does not grant a
detached hold's name).

No test sleeps to synchronise: each waits for a reply, a daemon log line or
end of file. Orders are asserted from the daemon's log; no durations are.
"""

import os
import re
import signal
import socket
import struct
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, TIMEOUT, read_stats, scaled_ms  # noqa: E402
from test_auth import PASSWORDS, users_text, write_users  # noqa: E402
from test_distributed import DistributedBase, logged_at  # noqa: E402

ERR_GRACE = "ERR BAD_ARGS grace must be an integer from 100 to %d"
ERR_HAS_SESSION = "ERR CONFLICT this connection already has a session"
ERR_RESUME_CONFLICT = ("ERR CONFLICT this connection holds or awaits locks or has a session; "
                       "RESUME on a new connection")
ERR_NO_SESSION = ("ERR NOT_HELD no session with that id and secret on this daemon (its grace "
                  "ran out, it ended, or the secret is wrong)")
ERR_NOT_HELD = "ERR NOT_HELD this connection does not hold that lock"
ERR_BAD_SESSION = "ERR BAD_ARGS a session is 16 lower-case hex digits"
ERR_BAD_SECRET = "ERR BAD_ARGS a secret is 32 lower-case hex digits"

OK_GRACE = re.compile(r"^OK ([0-9a-f]{16}) ([0-9a-f]{32})$")
# Long enough never to run out during a test that takes it back (the default
# max_grace_ms, not stretched: valgrind runs take seconds, not a minute).
LONG_GRACE = 60000
# Short, for the cases that let it run out (the test waits for its log line).
SHORT_GRACE = scaled_ms(300)


def log_index(d, regex, since):
    """The index of the first line logged since `since` that matches, or None."""
    rx = re.compile(regex)
    for i, line in enumerate(d.lines[since:]):
        if rx.search(line):
            return since + i
    return None


class TcpProxy:
    """A plain TCP proxy whose connections the test can reset (both ends
    see an RST), as a NAT or a load balancer that drops its state does."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.address = self.lsock.getsockname()
        self.pairs = []
        self.resetting = False
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.lsock.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            threads = [threading.Thread(target=self._pump, args=(a, b), daemon=True)
                       for a, b in ((down, up), (up, down))]
            with self.lock:
                self.pairs.append((down, up, threads))
            for t in threads:
                t.start()

    def _pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    if not self.resetting:
                        b.shutdown(socket.SHUT_WR)
                    return
                b.sendall(data)
        except OSError:
            return

    def reset_all(self):
        """Every connection ends with a reset, both ways. A socket a thread
        reads is not closed by close() (the read holds it), so the readers
        are stopped first: SHUT_RD ends their recv() without sending anything."""
        with self.lock:
            pairs, self.pairs = self.pairs, []
        self.resetting = True
        for down, up, threads in pairs:
            for s in (down, up):
                s.shutdown(socket.SHUT_RD)
            for t in threads:
                t.join(TIMEOUT)
            for s in (down, up):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
        self.resetting = False

    def close(self):
        self.lsock.close()
        self.reset_all()


class Base(unittest.TestCase):
    CONFIG = None

    def start(self, config=None):
        d = Daemon(config=config if config is not None else self.CONFIG,
                   name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)
        return d

    def connect(self, d, **kw):
        c = d.client(**kw)
        self.addCleanup(c.close)
        return c

    def grace(self, c, ms=LONG_GRACE):
        """GRACE on c: (session, secret)."""
        reply = c.request("GRACE %d" % ms)
        m = OK_GRACE.match(reply)
        self.assertTrue(m, reply)
        return m.group(1), m.group(2)

    def lock(self, c, name):
        reply = c.request("LOCK %s" % name)
        m = re.match(r"^OK %s (\d+)$" % re.escape(name), reply)
        self.assertTrue(m, reply)
        return int(m.group(1))

    def check_token(self, c, name):
        reply = c.request("CHECK %s" % name)
        m = re.match(r"^OK %s (\d+) (\d+)$" % re.escape(name), reply)
        self.assertTrue(m, reply)
        return int(m.group(1)), int(m.group(2))

    def status(self, d, name):
        return self.connect(d).request("STATUS %s" % name)

    def detached(self, d, mark, n=1):
        """Waits for the daemon's line saying a connection's holds were detached."""
        d.wait_log(r"session [0-9a-f]{16}: conn \d+ \(.*\) ended without QUIT: %d holds "
                   r"detached" % n, since=mark)


class Requests(Base):
    def test_grace_and_resume_requests(self):
        d = self.start()
        c = self.connect(d)
        c.send("HELP\n")
        help_lines = list(iter(c.line, "END"))
        self.assertIn("HELP GRACE <ms> - open a session: this connection's holds outlive it "
                      "by ms, for RESUME", help_lines)
        self.assertIn("HELP RESUME <session> <secret> - take a session's holds back on a new "
                      "connection", help_lines)
        c = self.connect(d)
        for bad in ("99", "60001", "0", "5s", "-1", "99999999999999999999"):
            self.assertEqual(c.request("GRACE " + bad), ERR_GRACE % 60000, bad)
        self.assertEqual(c.request("GRACE"), "ERR BAD_ARGS missing argument")
        session, secret = self.grace(c, 100)
        self.assertNotEqual(session, "0" * 16)
        self.assertEqual(c.request("GRACE 100"), ERR_HAS_SESSION)
        # RESUME's arguments, and RESUME where it cannot be.
        r = self.connect(d)
        self.assertEqual(r.request("RESUME %s %s" % (session.upper(), secret)), ERR_BAD_SESSION)
        self.assertEqual(r.request("RESUME %s %s" % (session, secret[:-1])), ERR_BAD_SECRET)
        self.assertEqual(r.request("RESUME %s" % session), "ERR BAD_ARGS missing argument")
        self.assertEqual(c.request("RESUME %s %s" % (session, secret)), ERR_RESUME_CONFLICT)
        self.lock(r, "x")
        self.assertEqual(r.request("RESUME %s %s" % (session, secret)), ERR_RESUME_CONFLICT)
        # Secrets differ per session, ids too.
        other = self.grace(self.connect(d), 100)
        self.assertNotEqual(other[0], session)
        self.assertNotEqual(other[1], secret)
        # A session that holds nothing ends with its connection.
        mark = d.log_mark()
        c.close()
        d.wait_log(r"session %s: conn \d+ \(.*\) ended holding nothing; session ended" % session,
                   since=mark)
        self.assertEqual(self.connect(d).request("RESUME %s %s" % (session, secret)),
                         ERR_NO_SESSION)

    def test_caps_and_reload(self):
        def config(tmpdir):
            return ("[server]\nmax_sessions = 2\nmax_sessions_per_user = 1\nmax_grace_ms = %d\n"
                    "unix_socket = %s\n" % (LONG_GRACE, os.path.join(tmpdir, "lb.sock")))
        d = self.start(config)
        a, b = self.connect(d), self.connect(d)
        self.grace(a)
        # Every TCP client here is the account "address 127.0.0.1".
        self.assertEqual(b.request("GRACE 100"),
                         "ERR LIMIT address 127.0.0.1 already has 1 sessions through this daemon")
        self.grace(self.connect(d, unix=True))
        self.assertEqual(self.connect(d, unix=True).request("GRACE 100"),
                         "ERR LIMIT this daemon already has 2 sessions")
        st = read_stats(b)
        self.assertEqual(st["sessions"], "2")
        self.assertEqual(st["sessions_detached"], "0")
        # QUIT ends a session: its slot is free again.
        self.assertEqual(a.request("QUIT"), "BYE")
        self.grace(b)
        # A reload lowers the bound for later GRACEs; the open session keeps its grace.
        path = d.config_path
        with open(path, "w") as f:
            f.write("[server]\nmax_sessions = 2\nmax_sessions_per_user = 1\n"
                    "max_grace_ms = 100\nunix_socket = %s\n"
                    % os.path.join(d.tmpdir, "lb.sock"))
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reloaded: .*max_grace_ms 100,", since=mark)
        self.lock(b, "kept")
        mark = d.log_mark()
        b.close()
        self.detached(d, mark)
        self.assertRegex(self.status(d, "kept"), r" detached=\d+")
        self.assertGreater(int(re.search(r" detached=(\d+)", self.status(d, "kept")).group(1)),
                           100)
        self.assertEqual(self.connect(d, unix=True).request("GRACE 101"), ERR_GRACE % 100)


class Detached(Base):
    def test_a_client_that_never_comes_back_is_freed_after_its_grace(self):
        d = self.start()
        a, b = self.connect(d), self.connect(d)
        session, secret = self.grace(a, SHORT_GRACE)
        self.assertEqual(a.request("CLIENT job-1"), "OK")
        token = self.lock(a, "x")
        b.send("LOCK x\n")
        d.wait_queued(b, "x")
        mark = d.log_mark()
        a.close()
        self.detached(d, mark)
        # Detached: held by the same holder with the same token, the grace shown.
        st = self.status(d, "x")
        self.assertRegex(st, r"^STATUS x held holder=\S+/%s token=%d .* detached=\d+ "
                             r"label=job-1$" % (re.escape(a.local), token))
        # Granted to b once the grace is over, and not before.
        m = re.match(r"^OK x (\d+)$", b.line(timeout=TIMEOUT + SHORT_GRACE / 1000))
        self.assertTrue(m)
        self.assertNotEqual(int(m.group(1)), token)
        # Both lines were logged before b's reply went out; the reader may lag.
        d.wait_log(r"lock x: granted to %s" % re.escape(b.local), since=mark)
        over = log_index(d, r"session %s: grace of %d ms over, not resumed: 1 holds of %s "
                            r"abandoned" % (session, SHORT_GRACE, re.escape(a.local)), mark)
        granted = log_index(d, r"lock x: granted to %s" % re.escape(b.local), mark)
        self.assertIsNotNone(over)
        self.assertIsNotNone(granted)
        self.assertLess(over, granted)
        self.assertNotIn(secret, "\n".join(d.lines))     # the secret is never logged
        st = read_stats(b)
        self.assertEqual(st["sessions"], "0")
        self.assertEqual(st["sessions_expired"], "1")
        self.assertEqual(st["sessions_resumed"], "0")

    def test_a_client_that_comes_back_too_late_gets_not_held(self):
        d = self.start()
        a = self.connect(d)
        session, secret = self.grace(a, SHORT_GRACE)
        self.lock(a, "x")
        mark = d.log_mark()
        a.close()
        d.wait_log(r"session %s: grace of \d+ ms over" % session, since=mark)
        other = self.connect(d)
        self.lock(other, "x")                 # meanwhile someone else's
        late = self.connect(d)
        self.assertEqual(late.request("RESUME %s %s" % (session, secret)), ERR_NO_SESSION)
        self.assertEqual(late.request("CHECK x"), ERR_NOT_HELD)

    def test_a_wrong_secret_gets_nothing_and_the_hold_stays_detached(self):
        d = self.start()
        a = self.connect(d)
        session, secret = self.grace(a)
        token = self.lock(a, "x")
        mark = d.log_mark()
        a.close()
        self.detached(d, mark)
        wrong = "%032x" % (int(secret, 16) ^ 1)
        thief = self.connect(d)
        self.assertEqual(thief.request("RESUME %s %s" % (session, wrong)), ERR_NO_SESSION)
        self.assertEqual(thief.request("RESUME %s %s" % ("%016x" % (int(session, 16) ^ 1),
                                                          secret)), ERR_NO_SESSION)
        self.assertEqual(thief.request("TRYLOCK x"), "BUSY x")
        self.assertRegex(self.status(d, "x"), r" token=%d .* detached=\d+$" % token)
        # The right one still works after those.
        back = self.connect(d)
        self.assertEqual(back.request("RESUME %s %s" % (session, secret)), "OK %s 1" % session)
        self.assertEqual(self.check_token(back, "x")[0], token)

    def test_resume_while_the_old_connection_is_open(self):
        d = self.start()
        old = self.connect(d)
        session, secret = self.grace(old)
        tx, ty = self.lock(old, "x"), self.lock(old, "y")
        self.assertEqual(old.request("LOCK y"), "OK y %d" % ty)   # re-entered
        waiter = self.connect(d)
        self.lock(waiter, "z")
        old.send("LOCK z\n")                  # a wait, cancelled by the cut
        d.wait_queued(old, "z")
        new = self.connect(d)
        self.assertEqual(new.request("RESUME %s %s" % (session, secret)), "OK %s 2" % session)
        old.expect_eof()                      # closed without a reply
        self.assertEqual(self.check_token(new, "x")[0], tx)
        self.assertEqual(self.check_token(new, "y")[0], ty)
        self.assertEqual(new.request("UNLOCK y"), "OK y")    # still held once
        self.assertEqual(self.check_token(new, "y")[0], ty)
        self.assertEqual(new.request("CHECK z"), ERR_NOT_HELD)
        self.assertEqual(waiter.request("UNLOCK z"), "OK z")
        self.assertRegex(self.status(d, "z"), r"^STATUS z free ")
        st = read_stats(new)
        self.assertEqual(st["sessions_resumed"], "1")
        self.assertEqual(st["sessions"], "1")
        self.assertEqual(st["sessions_detached"], "0")
        # The session is this connection's now: a second GRACE is refused.
        self.assertEqual(new.request("GRACE 100"), ERR_HAS_SESSION)

    def test_status_locks_and_break_of_a_detached_hold(self):
        d = self.start()
        a = self.connect(d)
        session, secret = self.grace(a)
        token = self.lock(a, "x")
        self.lock(a, "y")
        mark = d.log_mark()
        a.close()
        self.detached(d, mark, 2)
        c = self.connect(d)
        c.send("LOCKS\n")
        lines = [c.line(), c.line(), c.line()]
        self.assertEqual(lines[2], "END")
        self.assertRegex(lines[0], r"^LOCK x exclusive holder=\S+/%s label=- token=%d since=\d+ "
                                   r"holders=1 waiters=0 detached=\d+$"
                         % (re.escape(a.local), token))
        st = read_stats(c)
        self.assertEqual(st["sessions_detached"], "1")
        self.assertEqual(c.request("BREAK x"), "OK x")
        self.assertRegex(self.status(d, "x"), r"^STATUS x free ")
        back = self.connect(d)
        self.assertEqual(back.request("RESUME %s %s" % (session, secret)), "OK %s 1" % session)
        self.assertEqual(back.request("CHECK x"), ERR_NOT_HELD)
        self.check_token(back, "y")

    def test_a_reset_connection_is_resumed_with_the_same_token(self):
        d = self.start()
        proxy = TcpProxy((d.host, d.port))
        self.addCleanup(proxy.close)
        a = lbharness.Client.tcp(*proxy.address)
        self.addCleanup(a.close)
        session, secret = self.grace(a)
        token = self.lock(a, "x")
        plain = self.connect(d)
        self.lock(plain, "p")
        _, plain_window = self.check_token(plain, "p")
        _, window = self.check_token(a, "x")
        self.assertGreater(window, plain_window)     # CHECK counts the grace
        mark = d.log_mark()
        proxy.reset_all()
        self.detached(d, mark)
        self.assertEqual(self.connect(d).request("TRYLOCK x"), "BUSY x")
        back = self.connect(d)
        self.assertEqual(back.request("RESUME %s %s" % (session, secret)), "OK %s 1" % session)
        self.assertEqual(self.check_token(back, "x")[0], token)
        self.assertNotRegex(self.status(d, "x"), r"detached=")

    def test_end_of_input_detaches_after_the_answers(self):
        d = self.start()
        a = self.connect(d)
        session, secret = self.grace(a)
        mark = d.log_mark()
        # A half-close (nc -N): what came is answered, then the holds detach.
        a.send("LOCK x\nLOCK y\n")
        a.shutdown_write()
        self.assertRegex(a.line(), r"^OK x \d+$")
        self.assertRegex(a.line(), r"^OK y \d+$")
        a.expect_eof()
        self.detached(d, mark, 2)
        self.assertRegex(self.status(d, "y"), r" detached=\d+$")
        back = self.connect(d)
        self.assertEqual(back.request("RESUME %s %s" % (session, secret)), "OK %s 2" % session)

    def test_closes_that_do_not_detach(self):
        d = self.start()
        # QUIT releases at once and ends the session.
        a = self.connect(d)
        session, secret = self.grace(a)
        self.lock(a, "q")
        self.assertEqual(a.request("QUIT"), "BYE")
        self.assertRegex(self.status(d, "q"), r"^STATUS q free ")
        self.assertEqual(self.connect(d).request("RESUME %s %s" % (session, secret)),
                         ERR_NO_SESSION)
        # A line too long: the daemon closes on purpose; abandoned as before.
        b = self.connect(d)
        session, secret = self.grace(b)
        self.lock(b, "long")
        b.send("x" * 2000 + "\n")
        self.assertEqual(b.line(), "ERR LINE_TOO_LONG request lines are limited to 1024 bytes")
        b.expect_eof(allow_reset=True)
        self.assertRegex(self.status(d, "long"), r"^STATUS long free ")
        self.assertEqual(self.connect(d).request("RESUME %s %s" % (session, secret)),
                         ERR_NO_SESSION)


class OtherUser(Base):
    def test_another_user_cannot_resume(self):
        def config(tmpdir):
            path = os.path.join(tmpdir, "users")
            write_users(path, users_text({"alice": "*", "bob": "*"}))
            return "[server]\nusers_file = %s\n" % path
        d = self.start(config)

        def login(user):
            c = self.connect(d)
            self.assertEqual(c.request("AUTH %s %s" % (user, PASSWORDS[user])), "OK %s" % user)
            return c
        anon = self.connect(d)
        self.assertRegex(anon.request("GRACE 100"), r"^ERR NOAUTH ")
        a = login("alice")
        session, secret = self.grace(a)
        token = self.lock(a, "x")
        mark = d.log_mark()
        a.close()
        self.detached(d, mark)
        self.assertRegex(anon.request("RESUME %s %s" % (session, secret)), r"^ERR NOAUTH ")
        bob = login("bob")
        self.assertEqual(bob.request("RESUME %s %s" % (session, secret)), ERR_NO_SESSION)
        self.assertRegex(bob.request("STATUS x"),
                         r" token=%d .* detached=\d+$" % token)
        alice = login("alice")
        self.assertEqual(alice.request("RESUME %s %s" % (session, secret)), "OK %s 1" % session)
        self.assertEqual(self.check_token(alice, "x")[0], token)


class Distributed(DistributedBase):
    """Two daemons on one ZooKeeper server (the class's, shared as
    test_distributed.py shares its own)."""

    def test_another_daemon_does_not_grant_a_detached_hold(self):
        hosts = self.zk.connect_string
        d1 = self.start_daemon(hosts, "d1")
        d2 = self.start_daemon(hosts, "d2")
        a = self.client(d1)
        session, secret = self.grace_on(a, LONG_GRACE)
        token = int(a.request("LOCK x").split()[2])
        late = self.client(d1)
        late_session, _ = self.grace_on(late, SHORT_GRACE)
        self.assertRegex(late.request("LOCK y"), r"^OK y \d+$")
        mark = d1.log_mark()
        a.close()
        late.close()
        d1.wait_log(r"session %s: .* ended without QUIT: 1 holds detached" % session,
                    since=mark)
        # The node stays, owned by d1's ZooKeeper session: d2 does not grant x.
        self.wait_node(hosts, "x", d1)
        b = self.client(d2)
        self.assertEqual(b.request("TRYLOCK x"), "BUSY x")
        b.send("LOCK x\n")
        self.wait_node(hosts, "x", d2)        # b queued behind the detached hold
        self.assertTrue(b.silent())
        # y: granted through d2 only once its grace is over on d1.
        c = self.client(d2)
        reply = c.request("LOCK y", timeout=lbharness.TIMEOUT + SHORT_GRACE / 1000)
        self.assertRegex(reply, r"^OK y \d+$")
        over = d1.wait_log(r"session %s: grace of %d ms over" % (late_session, SHORT_GRACE),
                           since=mark)
        granted = d2.wait_log(r"lock y: granted to %s" % re.escape(c.local))
        self.assertLessEqual(logged_at(over), logged_at(granted))
        # RESUME on d1: the same token; its release lets b in.
        back = self.client(d1)
        self.assertEqual(back.request("RESUME %s %s" % (session, secret)), "OK %s 1" % session)
        self.assertRegex(back.request("CHECK x"), r"^OK x %d \d+$" % token)
        # d2 names the new connection once d1 rewrote the node's data.
        w = self.client(d2)
        w.send("WATCH x\n")
        w.expect("OK x")
        while not re.search(r" holder=%s/%s " % (re.escape(d1.daemon_id), re.escape(back.local)),
                            w.line()):
            pass
        self.assertEqual(back.request("UNLOCK x"), "OK x")
        m = re.match(r"^OK x (\d+)$", b.line())
        self.assertTrue(m)
        self.assertGreater(int(m.group(1)), token)

    def grace_on(self, c, ms):
        m = OK_GRACE.match(c.request("GRACE %d" % ms))
        self.assertTrue(m)
        return m.group(1), m.group(2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
