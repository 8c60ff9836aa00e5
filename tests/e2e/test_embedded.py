#!/usr/bin/env python3
"""End-to-end tests of lockbrokerd in embedded mode.

Starts the built daemon (env LOCKBROKERD) on free ports and compares exact
replies. Run directly (python3 tests/e2e/test_embedded.py) or through
`make check`; under valgrind with tests/e2e/valgrind_embedded.sh.

No test sleeps to synchronise: each waits for a reply, for a daemon log line
(the -v "queued" and "closed" lines) or for end of file.
"""

import concurrent.futures
import os
import random
import re
import resource
import select
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, TIMEOUT, START_TIMEOUT, STOP_TIMEOUT, check_failure_exit, \
    contend_sets, run_daemon, scaled, stats  # noqa: E402

# The daemon's exact error lines (from proto/proto.c, daemon/conn.c, daemon/server.c).
ERR_BAD_COMMAND = "ERR BAD_COMMAND unknown command (HELP lists them)"
ERR_MISSING = "ERR BAD_ARGS missing argument"
ERR_TOO_MANY = "ERR BAD_ARGS too many arguments"
ERR_BAD_WAIT = "ERR BAD_ARGS wait-ms must be an integer from 0 to 2147483647"
ERR_BAD_NAME = "ERR BAD_NAME names are 1-200 bytes of A-Z a-z 0-9 . _ : @ -, not . or .."
ERR_NOT_HELD = "ERR NOT_HELD this connection does not hold that lock"
ERR_LINE_TOO_LONG = "ERR LINE_TOO_LONG request lines are limited to %d bytes"
ERR_LIMIT_LOCKS = "ERR LIMIT this connection already holds or awaits %d locks"
ERR_LIMIT_CLIENTS = "ERR LIMIT too many clients; try again later"
ERR_LIMIT_INPUT = "ERR LIMIT requests sent behind a waiting one are limited to %d bytes"
ERR_OPT_UNKNOWN = "ERR BAD_ARGS unknown option"
ERR_OPT_TWICE = "ERR BAD_ARGS option given twice"
ERR_OPT_BOTH = "ERR BAD_ARGS shared and limit= cannot be combined"
ERR_OPT_LIMIT = "ERR BAD_ARGS limit must be an integer from 1 to 65535"
ERR_CONFLICT_LIMIT = ("ERR CONFLICT the lock is in use with limit=%d; every holder and waiter "
                      "must ask for the same limit")
ERR_CONFLICT_LOCK = ("ERR CONFLICT the lock is in use without limit=; a semaphore needs a name "
                     "that is not in use as a lock")
ERR_MODE_HELD = ("ERR CONFLICT this connection holds that lock in another mode; UNLOCK it first "
                 "(no upgrade or downgrade)")

ERR_LEASE_NOT_HELD = ("ERR NOT_HELD no lease of that name with that token: the token is wrong, "
                      "or the lease ended")
ERR_LIMIT_LEASES = "ERR LIMIT %d leases are held or awaited through this daemon"
ERR_BAD_TTL = "ERR BAD_ARGS ttl must be an integer from 100 to 86400000"
ERR_BAD_TTL_MS = "ERR BAD_ARGS ttl-ms must be an integer from 100 to 86400000"
ERR_BAD_TOKEN = "ERR BAD_ARGS token must be an unsigned 64-bit integer"

MAX_LINE = 1024
U64_MAX = 2 ** 64 - 1


def raise_nofile(want):
    """Raises this process's open-file limit (daemons inherit it). Returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# 1000 client sockets here, and the daemon's default max_clients (4096) plus reserve.
NOFILE = raise_nofile(8192)


def run_parallel(fn, jobs, workers=4):
    """fn(job) for every job, a few at a time (daemon runs are slow under
    valgrind); returns the results in order, an exception standing for its result."""
    def call(job):
        try:
            return fn(job)
        except Exception as e:
            return e
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(call, jobs))


def pings(nbytes):
    """Exactly nbytes of requests: PINGs, then blank lines (no reply).
    Returns (bytes, number of PINGs)."""
    return b"PING\n" * (nbytes // 5) + b"\n" * (nbytes % 5), nbytes // 5


def tcp_queues(c):
    """(bytes c has not yet handed over, bytes the daemon has not yet read) on
    c's TCP connection over IPv4, from /proc/net/tcp. Fails the test when
    either end is not there: a connection the daemon reset looks like that,
    and the tests that ask keep theirs open."""
    try:
        cport, dport = c.sock.getsockname()[1], c.sock.getpeername()[1]
    except OSError as e:
        raise AssertionError("connection %s is not connected any more (reset?): %s\n%s"
                             % (c.local, e, c.daemon.log_tail() if c.daemon else ""))
    sent = unread = None
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local = int(fields[1].split(":")[1], 16)
            remote = int(fields[2].split(":")[1], 16)
            tx, rx = (int(x, 16) for x in fields[4].split(":"))
            if (local, remote) == (cport, dport):
                sent = tx
            elif (local, remote) == (dport, cport):
                unread = rx
    if sent is None or unread is None:
        raise AssertionError("/proc/net/tcp has no %s end of connection %s: not an "
                             "IPv4 connection, or it is gone (reset?)\n%s"
                             % ("client's" if sent is None else "daemon's", c.local,
                                c.daemon.log_tail() if c.daemon else ""))
    return sent, unread


def srcdir():
    return os.environ.get("LB_SRCDIR") or os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class Case(unittest.TestCase):
    """Helpers shared by every test class. `self.d` is the daemon under test."""

    d = None

    def connect(self, daemon=None, **kw):
        c = (daemon or self.d).client(**kw)
        self.addCleanup(c.close)
        return c

    def name(self, suffix=""):
        """A lock name unique to this test (tests share a daemon)."""
        base = self._testMethodName.replace("test_", "", 1)
        return "%s%s" % (base, "-" + suffix if suffix else "")

    def check_token(self, text):
        """A token is an unsigned 64-bit decimal integer, written canonically."""
        self.assertRegex(text, r"^[0-9]+$")
        value = int(text)
        self.assertEqual(str(value), text, "token has leading zeros")
        self.assertLessEqual(value, U64_MAX)
        return value

    def granted(self, c, name, timeout=None):
        """Reads "OK <name> <token>" and returns the token."""
        m = c.expect_match(r"OK %s ([^ ]+)" % re.escape(name), timeout=timeout)
        return self.check_token(m.group(1))

    def lock(self, c, name, wait=None):
        """LOCK that must be granted at once; returns the token."""
        c.send("LOCK %s%s\n" % (name, "" if wait is None else " %d" % wait))
        return self.granted(c, name)

    def unlock(self, c, name):
        c.send("UNLOCK %s\n" % name)
        c.expect("OK %s" % name)

    def ping(self, c):
        c.send("PING\n")
        c.expect("PONG")

    def barrier(self, daemon=None):
        """A PING round trip on a fresh connection: the daemon has at least
        processed what arrived before it (used before best-effort silence checks)."""
        with (daemon or self.d).client() as c:
            self.ping(c)

    def assert_free(self, name, daemon=None):
        """Another connection can take and release the lock at once."""
        with (daemon or self.d).client() as c:
            c.send("TRYLOCK %s\n" % name)
            tok = self.granted(c, name)
            self.unlock(c, name)
        return tok

    def assert_busy(self, name, daemon=None):
        with (daemon or self.d).client() as c:
            c.send("TRYLOCK %s\n" % name)
            c.expect("BUSY %s" % name)

    def queue(self, c, name, req=None):
        """Sends a LOCK that must wait, and waits until the daemon says it is queued."""
        c.send((req or "LOCK %s" % name) + "\n")
        (c.daemon or self.d).wait_queued(c, name)

    def wait_read_by_daemon(self, c):
        """Waits until the daemon has read everything c sent. The kernel has
        no event for that: this polls c's send queue and the daemon's receive
        queue until both are empty."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            q = tcp_queues(c)
            if q == (0, 0):
                return
            self.assertLess(time.monotonic(), deadline, "the daemon left %r unread" % (q,))
            time.sleep(0.005)

    def expect_bytes(self, c, want, timeout=None):
        """Reads exactly len(want) bytes and compares (without splitting lines,
        which is slow for megabytes)."""
        got = bytearray()
        deadline = time.monotonic() + (timeout or TIMEOUT)
        while len(got) < len(want):
            if c.buf:
                take = c.buf[:len(want) - len(got)]
                got += take
                c.buf = c.buf[len(take):]
                continue
            self.assertFalse(c.eof, "EOF after %d bytes: %r" % (len(got), bytes(got[-200:])))
            self.assertTrue(c._fill(deadline), "stalled after %d bytes" % len(got))
        if bytes(got) != want:
            i = next(i for i in range(len(want)) if got[i] != want[i])
            self.fail("replies differ at byte %d: %r" % (i, bytes(got[i:i + 200])))


class SharedDaemonCase(Case):
    """One daemon (default settings, -v) for the whole class."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(name="lockbrokerd-" + cls.__name__).start()

    @classmethod
    def tearDownClass(cls):
        # SIGTERM must give exit code 0 (under valgrind: no leaks, no errors).
        cls.d.stop()


# ====================================================================== basics

class BasicTests(SharedDaemonCase):

    def test_ready_line(self):
        self.assertEqual(self.d.mode, "embedded")
        self.assertEqual(self.d.host, "127.0.0.1")
        self.assertNotEqual(self.d.port, 0)

    def test_ping_pong(self):
        c = self.connect()
        c.send("PING\n")
        self.assertEqual(c.line_bytes(), b"PONG")   # "\n" only, no "\r"
        self.ping(c)

    def test_quit_bye_then_eof(self):
        c = self.connect()
        c.send("QUIT\n")
        c.expect("BYE")
        c.expect_eof()

    def test_quit_ignores_later_pipelined_requests(self):
        c = self.connect()
        c.send("QUIT\nPING\nLOCK %s\n" % self.name())
        c.expect("BYE")
        c.expect_eof()
        self.assert_free(self.name())

    def test_lock_grant_format(self):
        c = self.connect()
        n = self.name()
        c.send("LOCK %s\n" % n)
        raw = c.line_bytes()
        m = re.fullmatch(rb"OK ([^ ]+) ([0-9]+)", raw)
        self.assertIsNotNone(m, raw)
        self.assertEqual(m.group(1).decode(), n)
        self.check_token(m.group(2).decode())
        self.assert_busy(n)
        self.unlock(c, n)
        self.assert_free(n)

    def test_token_not_behind_wall_clock(self):
        # PROTOCOL.md: embedded tokens never fall behind the wall clock in ns,
        # which is what keeps them increasing across restarts.
        c = self.connect()
        before = time.time_ns()
        tok = self.lock(c, self.name())
        self.assertGreaterEqual(tok, before)

    def test_lock_with_wait_on_free_lock(self):
        c = self.connect()
        a, b, z = self.name("a"), self.name("b"), self.name("zero")
        self.lock(c, a, wait=100)
        self.lock(c, b, wait=2147483647)
        self.lock(c, z, wait=0)
        for n in (a, b, z):
            self.unlock(c, n)

    def test_trylock_busy_then_free(self):
        a, b = self.connect(), self.connect()
        n = self.name()
        t1 = self.lock(a, n)
        b.send("TRYLOCK %s\n" % n)
        b.expect("BUSY %s" % n)
        self.unlock(a, n)
        b.send("TRYLOCK %s\n" % n)
        t2 = self.granted(b, n)
        self.assertGreater(t2, t1)
        a.send("TRYLOCK %s\n" % n)
        a.expect("BUSY %s" % n)

    def test_unlock_ok_and_not_held(self):
        a, b = self.connect(), self.connect()
        n = self.name()
        a.send("UNLOCK %s\n" % n)               # never locked
        a.expect(ERR_NOT_HELD)
        self.lock(a, n)
        b.send("UNLOCK %s\n" % n)               # held by someone else
        b.expect(ERR_NOT_HELD)
        self.assert_busy(n)                     # ... and still held
        a.send("UNLOCK %s\n" % n)
        a.expect("OK %s" % n)
        a.send("UNLOCK %s\n" % n)               # no longer held
        a.expect(ERR_NOT_HELD)
        self.ping(a)
        self.assert_free(n)

    def test_reentrant_same_token_counted(self):
        a = self.connect()
        n = self.name()
        tok = self.lock(a, n)
        a.send("LOCK %s\nTRYLOCK %s\nLOCK %s 0\nLOCK %s 100\n" % (n, n, n, n))
        for _ in range(4):
            self.assertEqual(self.granted(a, n), tok)
        for _ in range(4):                      # five holds: four UNLOCKs keep it
            self.unlock(a, n)
            self.assert_busy(n)
        self.unlock(a, n)
        later = self.assert_free(n)
        self.assertGreater(later, tok)
        a.send("UNLOCK %s\n" % n)
        a.expect(ERR_NOT_HELD)

    def test_reentrant_while_others_wait(self):
        a, w = self.connect(), self.connect()
        n = self.name()
        tok = self.lock(a, n)
        self.queue(w, n)
        a.send("LOCK %s\n" % n)                 # not queued behind w
        self.assertEqual(self.granted(a, n), tok)
        self.unlock(a, n)
        self.assertTrue(w.silent(), "granted while the holder still had one hold")
        self.unlock(a, n)
        self.assertGreater(self.granted(w, n), tok)

    def test_several_connections(self):
        cs = [self.connect() for _ in range(10)]
        names = [self.name(str(i)) for i in range(10)]
        for c, n in zip(cs, names):
            self.lock(c, n)
        for i, c in enumerate(cs):
            other = names[(i + 1) % len(names)]
            c.send("TRYLOCK %s\nUNLOCK %s\n" % (other, other))
            c.expect("BUSY %s" % other, ERR_NOT_HELD)
        for c, n in zip(cs, names):
            self.unlock(c, n)
        for n in names:
            self.assert_free(n)

    def test_names_are_case_sensitive_and_echoed(self):
        a, b = self.connect(), self.connect()
        upper, lower = "Case-" + self.name(), "case-" + self.name()
        self.lock(a, upper)                     # the reply echoes "Case-..."
        b.send("TRYLOCK %s\nTRYLOCK %s\n" % (upper, lower))
        b.expect("BUSY %s" % upper)
        self.granted(b, lower)

    def test_name_boundaries_and_charset(self):
        c = self.connect()
        for n in ("x" * 200, "...", ".a", "a.", "-", "@", ":", "_",
                  "AZaz09._:@-" + self.name()):
            self.lock(c, n)
            self.unlock(c, n)


# ================================================================= waiting

class EndOfInputTests(SharedDaemonCase):
    """A client that half-closes (nc -N) gets an answer to everything it sent."""

    def test_everything_sent_is_answered_then_closed(self):
        n = self.name()
        holder, c = self.connect(), self.connect()
        self.lock(holder, n)
        c.send("STATUS %s-free\nLOCK %s-mine\nLOCK %s 60000\nTRYLOCK %s\nUNLOCK %s-mine\n"
               "PING\nPIN" % (n, n, n, n, n))
        c.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(c.line(), "STATUS %s-free free holder=- token=- since=- waiters=0 "
                         "queue=0" % n)
        self.assertRegex(c.line(), r"^OK %s-mine \d+$" % n)
        # A LOCK bound to the connection cannot be of use after its close:
        # its wait ends at once (PROTOCOL.md, Transport).
        self.assertEqual(c.line(), "TIMEOUT %s" % n)
        self.assertEqual(c.line(), "BUSY %s" % n)
        self.assertEqual(c.line(), "OK %s-mine" % n)
        self.assertEqual(c.line(), "PONG")
        c.expect_eof()                            # the unterminated "PIN" is ignored
        self.assert_free(n + "-mine")

    def test_a_waiting_lease_request_ends_too(self):
        n = self.name()
        holder, c = self.connect(), self.connect()
        self.lock(holder, n)
        c.send("LOCK %s 60000 ttl=60000\n" % n)
        self.d.wait_log(r"lock %s: lease:%s queued$" % (re.escape(n), re.escape(c.local)),
                        since=c.mark)
        c.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(c.line(), "TIMEOUT %s" % n)
        c.expect_eof()
        holder.send("UNLOCK %s\n" % n)
        holder.expect("OK %s" % n)
        self.assert_free(n)                     # nothing was left queued


class SetTests(SharedDaemonCase):
    """LOCK, TRYLOCK and UNLOCK of a set of names (PROTOCOL.md, "Sets of locks")."""

    def names(self, *suffixes):
        return [self.name(s) for s in suffixes]

    def token_of(self, name):
        with self.d.client() as c:
            c.send("STATUS %s\n" % name)
            m = c.expect_match(r"STATUS %s held .* token=(\d+) .*" % re.escape(name))
            return int(m.group(1))

    def test_granted_with_tokens_in_the_order_given(self):
        c = self.connect()
        n = self.names("c", "a", "b")
        c.send("LOCK %s\n" % ",".join(n))
        m = c.expect_match(r"OK %s (\d+),(\d+),(\d+)" % re.escape(",".join(n)))
        toks = [self.check_token(t) for t in m.groups()]
        self.assertEqual(toks, [self.token_of(x) for x in n])
        # Each is an ordinary hold: one name can be checked and released alone.
        c.send("CHECK %s\n" % n[1])
        c.expect_match(r"OK %s %d \d+" % (n[1], toks[1]))
        self.unlock(c, n[1])
        self.assert_free(n[1])
        c.send("UNLOCK %s,%s\n" % (n[2], n[0]))
        c.expect("OK %s,%s" % (n[2], n[0]))
        for x in n:
            self.assert_free(x)

    def test_taken_in_name_order_and_granted_when_all_are_held(self):
        holder, c = self.connect(), self.connect()
        a, b, z = self.names("a", "b", "z")
        self.lock(holder, b)
        c.send("LOCK %s,%s,%s\n" % (z, b, a))
        self.d.wait_queued(c, b)
        # a (before b in order) is held meanwhile; z (after) not yet asked for.
        self.assert_busy(a)
        self.assert_free(z)
        self.assertTrue(c.silent(), "answered before every name was held")
        self.unlock(holder, b)
        c.expect_match(r"OK %s,%s,%s \d+,\d+,\d+" % (z, b, a))
        self.assert_busy(z)

    def test_timeout_releases_what_was_taken(self):
        holder, c = self.connect(), self.connect()
        a, b, z = self.names("a", "b", "z")
        self.lock(holder, b)
        c.send("LOCK %s,%s,%s 200\n" % (a, b, z))
        c.expect("TIMEOUT %s,%s,%s" % (a, b, z))
        self.assert_free(a)
        self.assert_free(z)
        self.ping(c)
        self.unlock(holder, b)
        self.assert_free(b)

    def test_one_deadline_for_the_whole_set(self):
        # The wait-ms of 0 covers every name: none may be waited for.
        holder, c = self.connect(), self.connect()
        a, b = self.names("a", "b")
        self.lock(holder, b)
        c.send("LOCK %s,%s 0\n" % (a, b))
        c.expect("TIMEOUT %s,%s" % (a, b))
        self.assert_free(a)

    def test_trylock_busy_releases_what_was_taken(self):
        holder, c = self.connect(), self.connect()
        a, b, z = self.names("a", "b", "z")
        self.lock(holder, z)
        c.send("TRYLOCK %s,%s,%s\n" % (b, z, a))
        c.expect("BUSY %s,%s,%s" % (b, z, a))
        self.assert_free(a)
        self.assert_free(b)
        self.unlock(holder, z)
        c.send("TRYLOCK %s,%s,%s\n" % (b, z, a))
        c.expect_match(r"OK %s,%s,%s \d+,\d+,\d+" % (b, z, a))

    def test_unlock_all_or_nothing(self):
        c = self.connect()
        a, b, z = self.names("a", "b", "z")
        c.send("LOCK %s,%s\n" % (a, b))
        c.expect_match(r"OK %s,%s \d+,\d+" % (a, b))
        c.send("UNLOCK %s,%s,%s\n" % (a, z, b))
        c.expect("ERR NOT_HELD this connection does not hold %s; nothing was released" % z)
        self.assert_busy(a)
        self.assert_busy(b)
        c.send("UNLOCK %s,%s\n" % (b, a))
        c.expect("OK %s,%s" % (b, a))
        self.assert_free(a)
        self.assert_free(b)

    def test_options_apply_to_every_name(self):
        x, y = self.connect(), self.connect()
        a, b = self.names("a", "b")
        for c in (x, y):
            c.send("LOCK %s,%s shared\n" % (a, b))
            c.expect_match(r"OK %s,%s \d+,\d+" % (a, b))
        self.assert_busy(a)
        with self.d.client() as c:
            c.send("STATUS %s\n" % b)
            c.expect_match(r"STATUS %s held .* mode=shared holders=2" % b)
        # A set asking with limit= meets CONFLICT at its first name.
        z = self.connect()
        z.send("LOCK %s,%s 100 limit=2\n" % (a, b))
        z.expect(ERR_CONFLICT_LOCK)

    def test_bad_sets(self):
        c = self.connect()
        a, b = self.names("a", "b")
        for line, reply in (
                ("LOCK %s,%s,%s" % (a, b, a), "ERR BAD_ARGS a name is given twice in the set"),
                ("LOCK %s,,%s" % (a, b), "ERR BAD_ARGS a set of names has no empty element"),
                ("TRYLOCK %s," % a, "ERR BAD_ARGS a set of names has no empty element"),
                ("LOCK %s,%s ttl=1000" % (a, b),
                 "ERR BAD_ARGS a set of locks cannot be a lease (ttl=)"),
                ("UNLOCK %s,%s 1" % (a, b), "ERR BAD_ARGS UNLOCK of a set takes no token"),
                ("LOCK " + ",".join("n%d" % i for i in range(17)),
                 "ERR BAD_ARGS a set has at most 16 names"),
                ("LOCK %s,a/b" % a, ERR_BAD_NAME),
                ("STATUS %s,%s" % (a, b), ERR_BAD_NAME),
                ("CHECK %s,%s" % (a, b), ERR_BAD_NAME)):
            with self.subTest(line=line):
                c.send(line + "\n")
                c.expect(reply)
        self.assert_free(a)
        self.ping(c)

    def test_sixteen_names(self):
        c = self.connect()
        n = ["%s-%d" % (self.name(), i) for i in range(16)]
        c.send("TRYLOCK %s\n" % ",".join(n))
        m = c.expect_match(r"OK %s ((?:\d+,){15}\d+)" % re.escape(",".join(n)))
        self.assertEqual(len(set(m.group(1).split(","))), 16)
        c.send("UNLOCK %s\n" % ",".join(reversed(n)))
        c.expect("OK %s" % ",".join(reversed(n)))

    def test_end_of_input_ends_the_wait_and_releases(self):
        holder, c = self.connect(), self.connect()
        a, b = self.names("a", "b")
        self.lock(holder, b)
        c.send("LOCK %s,%s 60000\n" % (b, a))
        self.d.wait_queued(c, b)
        c.shutdown_write()
        c.expect("TIMEOUT %s,%s" % (b, a))
        c.expect_eof()
        self.assert_free(a)
        self.unlock(holder, b)
        self.assert_free(b)

    def test_close_while_waiting_releases(self):
        holder, c = self.connect(), self.connect()
        a, b = self.names("a", "b")
        self.lock(holder, b)
        c.send("LOCK %s,%s\n" % (a, b))
        self.d.wait_queued(c, b)
        self.assert_busy(a)
        c.close()
        self.d.wait_closed(c)
        self.assert_free(a)
        self.unlock(holder, b)
        self.assert_free(b)

    def test_requests_behind_a_set_wait_their_turn(self):
        holder, c = self.connect(), self.connect()
        a, b = self.names("a", "b")
        self.lock(holder, b)
        c.send("LOCK %s,%s\nPING\n" % (a, b))
        self.d.wait_queued(c, b)
        self.assertTrue(c.silent())
        self.unlock(holder, b)
        c.expect_match(r"OK %s,%s \d+,\d+" % (a, b))
        c.expect("PONG")

    def test_overlapping_sets_in_opposite_orders_never_deadlock(self):
        a, b, z = self.names("a", "b", "z")
        tokens = contend_sets([self.connect() for _ in range(3)],
                              [[a, b], [b, a], [z, b, a]], 200)
        self.assertEqual([len(t) for t in tokens], [200, 200, 200])
        for x in (a, b, z):
            self.assert_free(x)


class WaitTests(SharedDaemonCase):

    def test_fifo_five_waiters(self):
        n = self.name()
        holder = self.connect()
        last = self.lock(holder, n)
        waiters = [self.connect() for _ in range(5)]
        for w in waiters:                       # each queued before the next asks
            self.queue(w, n)
        current = holder
        for i, w in enumerate(waiters):
            self.unlock(current, n)
            tok = self.granted(w, n)
            self.assertGreater(tok, last)
            last = tok
            for later in waiters[i + 1:]:
                self.assertTrue(later.silent(), "%r answered out of turn" % later)
            current = w
        self.unlock(current, n)
        self.assert_free(n)

    def test_lock_wait_ms_times_out_and_connection_stays_usable(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        self.lock(a, n)
        b.send("LOCK %s 50\n" % n)
        b.expect("TIMEOUT %s" % n)
        self.ping(b)
        self.unlock(a, n)
        # b is not queued any more: a third connection gets the lock, and b
        # never hears of it.
        c = self.connect()
        c.send("TRYLOCK %s\n" % n)
        self.granted(c, n)
        self.ping(b)
        # b can still take other locks and wait again.
        self.lock(b, self.name("other"))
        b.send("LOCK %s 20\n" % n)
        b.expect("TIMEOUT %s" % n)

    def test_timeout_releases_held_back_requests(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        self.lock(a, n)
        b.send("LOCK %s 50\nPING\nTRYLOCK %s\n" % (n, n))
        b.expect("TIMEOUT %s" % n, "PONG", "BUSY %s" % n)

    def test_lock_zero_on_held_lock_is_timeout(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        self.lock(a, n)
        b.send("LOCK %s 0\n" % n)
        b.expect("TIMEOUT %s" % n)
        self.ping(b)
        self.unlock(a, n)
        self.lock(b, n, wait=0)

    def test_timed_out_waiter_leaves_the_middle_of_the_queue(self):
        n = self.name()
        h, w1, w2, w3 = (self.connect() for _ in range(4))
        self.lock(h, n)
        self.queue(w1, n)
        self.queue(w2, n, "LOCK %s 50" % n)
        w2.expect("TIMEOUT %s" % n)
        self.queue(w3, n)
        self.unlock(h, n)
        self.granted(w1, n)
        self.unlock(w1, n)
        self.granted(w3, n)
        self.ping(w2)

    def test_waiter_with_deadline_granted_in_time(self):
        n = self.name()
        h, w = self.connect(), self.connect()
        t1 = self.lock(h, n)
        self.queue(w, n, "LOCK %s 600000" % n)
        self.unlock(h, n)
        self.assertGreater(self.granted(w, n), t1)
        self.ping(w)
        self.assert_busy(n)

    def test_waiting_lock_holds_back_later_replies(self):
        n, other = self.name(), self.name("other")
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        w.send("LOCK %s\nPING\nTRYLOCK %s\nUNLOCK %s\n" % (n, other, n))
        self.d.wait_queued(w, n)
        self.barrier()
        self.assertTrue(w.silent(), "a reply overtook the waiting LOCK")
        self.unlock(h, n)
        self.granted(w, n)
        w.expect("PONG")
        self.granted(w, other)
        w.expect("OK %s" % n)
        self.assert_free(n)

    def test_holder_disconnect_releases(self):
        n = self.name()
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        self.lock(h, n)                         # twice: closing drops every hold
        self.queue(w, n)
        h.close()
        self.granted(w, n)

    def test_waiter_disconnect_cancels(self):
        n = self.name()
        h, w1, w2 = self.connect(), self.connect(), self.connect()
        self.lock(h, n)
        self.queue(w1, n)
        self.queue(w2, n)
        w1.close()
        self.d.wait_closed(w1)
        self.unlock(h, n)
        # Had the lock gone to the dead waiter, w2 would never get it.
        self.granted(w2, n)

    def test_waiter_hanging_up_behind_unread_input_is_dropped(self):
        # Behind a waiting LOCK the daemon reads on (up to its bound, see
        # InputBoundTests), so it notices the hang-up behind 60 KB of later
        # requests and drops the wait at once, not when the lock is released.
        n = self.name()
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        self.queue(w, n)
        w.send(b"PING\n" * 12000)
        w.close()
        self.d.wait_closed(w)                    # while h still holds the lock
        with self.d.client() as c:
            c.send("STATS\n")
            waiters = [l for l in iter(c.line, "END") if l.startswith("STAT waiters ")]
        self.assertEqual(waiters, ["STAT waiters 0"])
        self.unlock(h, n)
        self.assert_free(n)

    def test_only_waiter_disconnect_leaves_lock_free(self):
        n = self.name()
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        self.queue(w, n, "LOCK %s 600000" % n)
        w.close()
        self.d.wait_closed(w)
        self.unlock(h, n)
        self.assert_free(n)

    def test_disconnect_releases_held_and_cancels_waiting_together(self):
        x, y = self.name("x"), self.name("y")
        a, b = self.connect(), self.connect()
        self.lock(a, x)
        self.lock(b, y)
        self.queue(b, x)
        b.close()
        self.d.wait_closed(b)
        self.assert_free(y)
        self.unlock(a, x)
        self.assert_free(x)

    def test_quit_releases_and_wakes_waiter(self):
        x, y = self.name("x"), self.name("y")
        h, w = self.connect(), self.connect()
        self.lock(h, x)
        self.lock(h, y)
        self.queue(w, x)
        h.send("QUIT\n")
        h.expect("BYE")
        self.granted(w, x)
        h.expect_eof()
        self.assert_free(y)

    def test_tokens_strictly_increase_across_holders(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        tokens = [self.lock(a, n)]
        self.unlock(a, n)
        tokens.append(self.lock(b, n))
        self.queue(a, n)                        # hand-over through the queue
        self.unlock(b, n)
        tokens.append(self.granted(a, n))
        self.unlock(a, n)
        tokens.append(self.assert_free(n))
        self.assertEqual(tokens, sorted(set(tokens)), tokens)


# =============================================================== pipelining

class PipelineTests(SharedDaemonCase):

    def test_pipelined_requests_in_one_send(self):
        a, b = self.name("a"), self.name("b")
        c = self.connect()
        c.send("PING\nLOCK {a}\nTRYLOCK {a}\nLOCK {b} 0\nUNLOCK {a}\nUNLOCK {a}\n"
               "UNLOCK {a}\nFROB\nUNLOCK {b}\nLOCK\nPING\n".format(a=a, b=b))
        c.expect("PONG")
        ta = self.granted(c, a)
        self.assertEqual(self.granted(c, a), ta)
        tb = self.granted(c, b)
        self.assertGreater(tb, ta)
        c.expect("OK %s" % a, "OK %s" % a, ERR_NOT_HELD, ERR_BAD_COMMAND, "OK %s" % b,
                 ERR_MISSING, "PONG")
        self.assertTrue(c.silent())

    def test_requests_split_across_sends(self):
        c = self.connect()
        n = self.name()
        for part in ("PI", "NG\nLO", "CK ", n, "\n", "UNLOCK %s" % n, "\r", "\n"):
            c.send(part)
            self.barrier()
        c.expect("PONG")
        self.granted(c, n)
        c.expect("OK %s" % n)

    def test_many_pipelined_requests_with_back_pressure(self):
        # 50000 PINGs: more than the 64 KB of replies the daemon buffers, so it
        # must stop parsing, drain, and resume without losing or reordering.
        count = 50000
        n = self.name()
        c = self.connect()
        payload = b"PING\n" * count + ("LOCK %s\nUNLOCK %s\n" % (n, n)).encode()
        errors = []

        def sender():
            try:
                c.sock.sendall(payload)
            except OSError as e:
                errors.append(e)

        t = threading.Thread(target=sender)
        t.start()
        try:
            want = b"PONG\n" * count
            got = bytearray()
            deadline = time.monotonic() + scaled(30)
            while len(got) < len(want):
                if c.buf:
                    take = c.buf[:len(want) - len(got)]
                    got += take
                    c.buf = c.buf[len(take):]
                    continue
                self.assertFalse(c.eof, "EOF after %d bytes" % len(got))
                self.assertTrue(c._fill(deadline), "stalled after %d bytes" % len(got))
            self.assertEqual(bytes(got), want)
            self.granted(c, n)
            c.expect("OK %s" % n)
        finally:
            t.join(scaled(30))
        self.assertEqual(errors, [])


# ======================================================= input behind a wait

class InputBoundTests(SharedDaemonCase):
    """PROTOCOL.md, Transport: behind a request that waits, a client may send
    max_line + 1 + 65536 bytes; one byte more and it gets ERR LIMIT and is
    closed, its locks released. Without a waiting request, sending a lot is
    only ever met by back-pressure."""

    BOUND = MAX_LINE + 1 + 65536

    def holder_waiting(self, a, b):
        """x holds a and waits for b, which y holds. Returns (x, y)."""
        x, y = self.connect(), self.connect()
        self.lock(x, a)
        self.lock(y, b)
        self.queue(x, b)
        return x, y

    def assert_released(self, a, b, y):
        """Another client's LOCK a <10 s> is granted and a is then free; b is
        still y's, with nobody waiting."""
        wait = int(scaled(10000))
        with self.d.client() as z:
            z.send("LOCK %s %d\n" % (a, wait))
            self.granted(z, a, timeout=wait / 1000 + TIMEOUT)
            self.unlock(z, a)
            z.send("STATUS %s\nSTATUS %s\n" % (a, b))
            z.expect("STATUS %s free holder=- token=- since=- waiters=0 queue=0" % a)
            z.expect_match(r"STATUS %s held holder=\S+/%s token=\d+ since=\d+ waiters=0 queue=1"
                           % (re.escape(b), re.escape(y.local)))

    def test_holder_closing_after_200kb_behind_a_wait_releases(self):
        # 200 KB behind the waiting LOCK, then close. Had the daemon stopped
        # reading x, the FIN would stay queued behind unread bytes (x's kernel
        # in FIN-WAIT-1) and x would keep a until b came its way.
        a, b = self.name("a"), self.name("b")
        x, y = self.holder_waiting(a, b)
        x.send(b"PING\n" * 40000)
        x.close()
        self.assert_released(a, b, y)
        self.d.wait_closed(x)

    def test_waiter_sending_past_the_bound_gets_err_then_eof(self):
        a, b = self.name("a"), self.name("b")
        x, y = self.holder_waiting(a, b)
        x.send(b"PING\n" * 40000)
        x.expect(ERR_LIMIT_INPUT % self.BOUND)
        x.expect_eof()
        self.assert_released(a, b, y)
        self.unlock(y, b)
        self.assert_free(b)

    def test_exactly_the_bound_behind_a_wait_is_answered(self):
        a, b = self.name("a"), self.name("b")
        x, y = self.holder_waiting(a, b)
        payload, count = pings(self.BOUND)
        x.send(payload)
        self.wait_read_by_daemon(x)
        self.unlock(y, b)
        self.granted(x, b)
        self.expect_bytes(x, b"PONG\n" * count)
        self.ping(x)
        self.assert_busy(a)

    def test_one_byte_past_the_bound_behind_a_wait(self):
        a, b = self.name("a"), self.name("b")
        x, y = self.holder_waiting(a, b)
        x.send(pings(self.BOUND)[0])
        self.wait_read_by_daemon(x)
        self.assertTrue(x.silent(), "answered before the bound was passed")
        x.send(b"\n")
        x.expect(ERR_LIMIT_INPUT % self.BOUND)
        x.expect_eof()
        self.assert_released(a, b, y)

    def test_bound_counts_from_the_waiting_request(self):
        # Requests before the waiting LOCK, in the same send, do not count.
        a, b = self.name("a"), self.name("b")
        x, y = self.connect(), self.connect()
        self.lock(x, a)
        self.lock(y, b)
        before, n1 = pings(20000)
        after, n2 = pings(self.BOUND)
        x.send(before + ("LOCK %s\n" % b).encode() + after)
        self.d.wait_queued(x, b)
        self.wait_read_by_daemon(x)
        self.unlock(y, b)
        self.expect_bytes(x, b"PONG\n" * n1)
        self.granted(x, b)
        self.expect_bytes(x, b"PONG\n" * n2)
        self.ping(x)

    def test_10000_pipelined_pings_without_a_wait(self):
        c = self.connect()
        c.send(b"PING\n" * 10000)
        self.expect_bytes(c, b"PONG\n" * 10000)
        self.ping(c)

    def test_unread_replies_are_back_pressure_not_an_error(self):
        # 40000 HELPs (200 KB) unread: more replies (about 25 MB) than the
        # kernel buffers, so the daemon stops parsing (draining) and then
        # reading; far more than the bound is left unparsed, with no request
        # waiting: no error, everything is answered once the client reads.
        with self.d.client() as h:
            h.send("HELP\n")
            help_reply = ("\n".join(read_block(h) + ["END"]) + "\n").encode()
        c = self.connect()
        m = self.d.wait_log(r"conn (\d+) \(%s\): open" % re.escape(c.local), since=c.mark)
        count = 40000
        errors = []

        def sender():
            try:
                c.sock.sendall(b"HELP\n" * count)
            except OSError as e:
                errors.append(e)

        t = threading.Thread(target=sender)
        t.start()
        try:
            self.d.wait_log(r"conn %s: going from reading to draining$" % m.group(1),
                            timeout=scaled(30), since=c.mark)
            # The daemon then reads up to its bound and stops: bytes wait in
            # its socket's receive queue.
            deadline = time.monotonic() + scaled(30)
            while True:
                q = tcp_queues(c)
                if q[1] > 0:
                    break
                self.assertLess(time.monotonic(), deadline, "the daemon read everything")
                time.sleep(0.005)
            self.expect_bytes(c, help_reply * count, timeout=scaled(60))
        finally:
            t.join(scaled(60))
        self.assertEqual(errors, [])
        self.ping(c)


# =================================================================== errors

class ErrorTests(SharedDaemonCase):

    def expect_error(self, c, request, error):
        """request (str or bytes, no LF) gets exactly `error`; then the
        connection still works."""
        if isinstance(request, str):
            request = request.encode("latin-1")
        c.send(request + b"\n")
        got = c.line()
        self.assertEqual(got, error, "request %r" % request)
        self.ping(c)

    def test_bad_command(self):
        c = self.connect()
        for req in ("FROB", "LOCKX a", "PINGPONG", "UNLOCKED a", "TRY LOCK a", "OK",
                    "BYE", "-", "P I N G", "LOCK_ a", "PING:", "PI\rNG"):
            self.expect_error(c, req, ERR_BAD_COMMAND)

    def test_bad_args_missing(self):
        c = self.connect()
        for req in ("LOCK", "TRYLOCK", "UNLOCK", "LOCK   ", "LOCK\t \t", "unlock"):
            self.expect_error(c, req, ERR_MISSING)

    def test_bad_args_too_many(self):
        c = self.connect()
        n = self.name()
        for req in ("PING x", "QUIT now", "TRYLOCK %s 10" % n, "UNLOCK %s %s %s" % (n, n, n),
                    "LOCK %s 1 2" % n, "LOCK %s 1 2 3 4 5 6" % n, "PING a b c d e"):
            self.expect_error(c, req, ERR_TOO_MANY)
        # "QUIT now" did not close, and nothing was locked.
        self.assert_free(n)

    def test_bad_args_wait_ms(self):
        c = self.connect()
        n = self.name()
        for wait in ("-1", "abc", "1.5", "2147483648", "99999999999", "+5", "1e3", "0x10",
                     "10ms", "１"):
            self.expect_error(c, ("LOCK %s %s" % (n, wait)).encode("utf-8"), ERR_BAD_WAIT)
        self.assert_free(n)
        self.lock(c, n, wait=2147483647)        # the largest value is fine

    def test_bad_name(self):
        c = self.connect()
        bad = [b"x" * 201, b".", b"..", b"/", b"a/b", b"../etc", b"caf\xc3\xa9", b"\xff",
               b"a\x00b", b"\x00", b"a*b", b"a#b", b"a+b", b"a=b", b"a,b/c", b"a\\b",
               b"a\x7fb", b"a\x01b", b"a~b", b"a!b", b"a$b", b'"a"', b"a%b", b"[a]"]
        for name in bad:
            for cmd in (b"LOCK ", b"TRYLOCK ", b"UNLOCK "):
                self.expect_error(c, cmd + name, ERR_BAD_NAME)
            self.expect_error(c, b"LOCK " + name + b" 10", ERR_BAD_NAME)

    def test_nul_and_non_ascii_bytes(self):
        c = self.connect()
        for req in (b"\x00", b"PING\x00", b"\x00PING", b"PI\x00NG", b"PI\xffNG",
                    b"\xc3\xa9", b"P\xc3\xadNG", b"\x80" * 1000):
            self.expect_error(c, req, ERR_BAD_COMMAND)
        self.expect_error(c, b"LOCK a\x00", ERR_BAD_NAME)
        self.expect_error(c, b"LOCK \x00a", ERR_BAD_NAME)
        self.expect_error(c, b"LOCK a 1\x00", ERR_BAD_WAIT)
        self.expect_error(c, b"UNLOCK \xe2\x82\xac", ERR_BAD_NAME)

    def test_blank_lines_and_crlf(self):
        c = self.connect()
        n = self.name()
        c.send("\n\r\n \n\t\t\n \t \r\n")
        c.send("PING\r\nLOCK %s\r\nUNLOCK %s\r\n\r\nPING\n" % (n, n))
        self.assertEqual(c.line_bytes(), b"PONG")
        self.granted(c, n)                      # the CR is not part of the name
        c.expect("OK %s" % n, "PONG")
        self.assertTrue(c.silent())

    def test_case_insensitive_commands(self):
        c = self.connect()
        n = self.name()
        for ping in ("ping", "Ping", "pInG"):
            c.send(ping + "\n")
            c.expect("PONG")
        c.send("lock %s\n" % n)
        tok = self.granted(c, n)
        c.send("Trylock %s\n" % n)
        self.assertEqual(self.granted(c, n), tok)
        c.send("uNlOcK %s\nunlock %s\n" % (n, n))
        c.expect("OK %s" % n, "OK %s" % n)
        q = self.connect()
        q.send("quit\n")
        q.expect("BYE")
        q.expect_eof()

    def test_tabs_and_spaces(self):
        c = self.connect()
        n = self.name()
        c.send("\tPING\t\n")
        c.expect("PONG")
        c.send("LOCK\t%s\t\t100\n" % n)
        tok = self.granted(c, n)
        c.send("  TRYLOCK \t %s  \n" % n)
        self.assertEqual(self.granted(c, n), tok)
        c.send("LOCK %s\t5\t\n" % n)
        self.assertEqual(self.granted(c, n), tok)
        c.send("UNLOCK\t\t%s\n \tUNLOCK %s \nUNLOCK\t%s\t\n" % (n, n, n))
        c.expect("OK %s" % n, "OK %s" % n, "OK %s" % n)
        self.assert_free(n)


# ============================================================ line lengths

class LineLengthTests(SharedDaemonCase):

    def expect_too_long(self, c, limit=MAX_LINE):
        c.expect(ERR_LINE_TOO_LONG % limit)
        c.expect_eof()

    def test_exactly_max_line_is_accepted(self):
        c = self.connect()
        c.send("PING" + " " * (MAX_LINE - 4) + "\n")
        c.expect("PONG")
        c.send("PING" + " " * (MAX_LINE - 5) + "\r\n")   # the CR counts
        c.expect("PONG")
        n = "n" * 200
        c.send("LOCK " + n + " " * (MAX_LINE - 5 - 200 - 2) + "10\n")
        self.granted(c, n)

    def test_max_line_bytes_then_newline_later(self):
        c = self.connect()
        c.send("PING" + " " * (MAX_LINE - 4))
        self.barrier()
        self.assertTrue(c.silent(), "a full-length line was refused before its LF")
        c.send("\n")
        c.expect("PONG")

    def test_one_byte_too_long_with_newline(self):
        c = self.connect()
        c.send("PING" + " " * (MAX_LINE - 3) + "\n")
        self.expect_too_long(c)

    def test_one_byte_too_long_with_crlf(self):
        c = self.connect()
        c.send("PING" + " " * (MAX_LINE - 4) + "\r\n")
        self.expect_too_long(c)

    def test_one_byte_too_long_without_newline(self):
        # Enforced before the LF arrives: the daemon must not wait for it.
        c = self.connect()
        c.send("x" * (MAX_LINE + 1))
        self.expect_too_long(c)

    def test_too_long_across_several_sends(self):
        c = self.connect()
        c.send("x" * 1000)
        self.barrier()
        self.assertTrue(c.silent())
        c.send("x" * (MAX_LINE - 1000))
        self.barrier()
        self.assertTrue(c.silent())
        c.send("x")
        self.expect_too_long(c)

    def test_100kb_line_with_newline(self):
        c = self.connect()
        c.send(b"L" * 102400 + b"\n")
        self.expect_too_long(c)

    def test_100kb_line_without_newline(self):
        c = self.connect()
        c.send(b"\x00\xff" * 51200)
        self.expect_too_long(c)

    def test_pipelined_requests_before_long_line_are_answered(self):
        n = self.name()
        c = self.connect()
        c.send("PING\nLOCK %s\n%s\nPING\n" % (n, "y" * 5000))
        c.expect("PONG")
        self.granted(c, n)
        self.expect_too_long(c)
        self.assert_free(n)                     # closing released it

    def test_long_line_behind_waiting_lock(self):
        n = self.name()
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        w.send("LOCK %s\n%s" % (n, "z" * 3000))
        self.d.wait_queued(w, n)
        self.unlock(h, n)
        self.granted(w, n)
        self.expect_too_long(w)
        self.assert_free(n)


# ================================================================= limits

class JournalTests(Case):
    """Under systemd, stderr is the journal's stream: JOURNAL_STREAM names its
    device:inode, and lines carry "<N>" priorities instead of a timestamp."""

    def test_priority_prefixes_when_stderr_is_the_journal(self):
        ours, theirs = socket.socketpair()
        self.addCleanup(ours.close)
        st = os.fstat(theirs.fileno())
        env = dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev, st.st_ino))
        p = subprocess.Popen(lbharness.daemon_wrapper() + [lbharness.daemon_path(), "-l",
                                                            "127.0.0.1:0"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=theirs.fileno(), env=env)
        theirs.close()
        self.addCleanup(lambda: p.poll() is not None or p.kill())
        f = ours.makefile("r")
        ours.settimeout(START_TIMEOUT)
        lines = []
        while not lines or " ready: " not in lines[-1]:
            line = f.readline()
            self.assertTrue(line, "the daemon ended: %r" % lines)
            lines.append(line.rstrip("\n"))
        p.send_signal(signal.SIGTERM)
        lines += [line.rstrip("\n") for line in f]
        self.assertEqual(p.wait(STOP_TIMEOUT), 0)
        for line in lines:
            self.assertRegex(line, r"^(<3>error|<4>warn|<6>info|<7>debug) \S")
        self.assertRegex(lines[-1], r"^<6>info ")


class LimitTests(Case):
    """max_locks_per_client = 3 and max_line = 300, set in the config file."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(config="[server]\nmax_locks_per_client = 3\nmax_line = 300\n",
                       name="lockbrokerd-limits").start()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_locks_per_client(self):
        a, b = self.connect(), self.connect()
        names = [self.name(str(i)) for i in range(5)]
        toks = [self.lock(a, n) for n in names[:3]]
        limit = ERR_LIMIT_LOCKS % 3
        a.send("LOCK {0}\nTRYLOCK {0}\nLOCK {0} 0\nLOCK {0} 100\n".format(names[3]))
        a.expect(limit, limit, limit, limit)
        self.ping(a)
        # Nothing changed: the name is free, and re-entrant holds still work.
        self.assert_free(names[3])
        a.send("LOCK %s\n" % names[0])
        self.assertEqual(self.granted(a, names[0]), toks[0])
        self.unlock(a, names[0])
        # A busy name is refused too, not queued.
        self.lock(b, names[4])
        a.send("LOCK %s\n" % names[4])
        a.expect(limit)
        self.unlock(b, names[4])
        self.assert_free(names[4])
        # Releasing one makes room for one.
        self.unlock(a, names[0])
        self.lock(a, names[3])
        a.send("LOCK %s\n" % names[4])
        a.expect(limit)

    def test_limit_is_per_connection(self):
        a, b = self.connect(), self.connect()
        for i in range(3):
            self.lock(a, self.name("a%d" % i))
            self.lock(b, self.name("b%d" % i))

    def test_input_bound_follows_max_line(self):
        # Behind a waiting request: max_line + 1 + 65536 bytes, here 65837.
        n = self.name()
        h, w = self.connect(), self.connect()
        self.lock(h, n)
        self.queue(w, n)
        w.send(pings(65837)[0])
        self.wait_read_by_daemon(w)
        self.assertTrue(w.silent(), "answered before the bound was passed")
        w.send(b"\n")
        w.expect(ERR_LIMIT_INPUT % 65837)
        w.expect_eof()
        self.unlock(h, n)
        self.assert_free(n)

    def test_configured_max_line(self):
        c = self.connect()
        c.send("PING" + " " * 296 + "\n")
        c.expect("PONG")
        c.send("PING" + " " * 297 + "\n")
        c.expect(ERR_LINE_TOO_LONG % 300)
        c.expect_eof()


    def test_set_counts_every_name(self):
        a = self.connect()
        n = [self.name(str(i)) for i in range(4)]
        limit = ERR_LIMIT_LOCKS % 3
        a.send("LOCK %s\n" % ",".join(n))      # 4 > 3: refused before anything is taken
        a.expect(limit)
        for name in n:
            self.assert_free(name)
        self.lock(a, n[0])
        a.send("LOCK %s,%s,%s\n" % (n[1], n[2], n[3]))  # 1 + 3 > 3
        a.expect(limit)
        for name in n[1:]:
            self.assert_free(name)
        # A name held already is taken again re-entrantly: not one more.
        a.send("LOCK %s,%s,%s\n" % (n[2], n[0], n[1]))
        a.expect_match(r"OK %s,%s,%s \d+,\d+,\d+" % (n[2], n[0], n[1]))

    def test_set_must_fit_the_line(self):
        c = self.connect()
        names = ",".join("%s-%03d" % ("x" * 60, i) for i in range(5))   # 5 x 64 bytes
        c.send("LOCK %s\n" % names)
        c.expect(ERR_LINE_TOO_LONG % 300)
        c.expect_eof()


class MaxClientsTests(Case):

    def test_max_clients(self):
        with Daemon(config="[server]\nmax_clients = 3\n", name="lockbrokerd-maxclients") as d:
            cs = [self.connect(d) for _ in range(3)]
            for c in cs:
                self.ping(c)                    # each one is being served
            extra = self.connect(d)
            extra.expect(ERR_LIMIT_CLIENTS)
            extra.expect_eof()
            for c in cs:                        # the others are unaffected
                self.ping(c)
            cs[0].close()
            d.wait_closed(cs[0])
            again = self.connect(d)
            self.ping(again)
            more = self.connect(d)
            more.expect(ERR_LIMIT_CLIENTS)
            more.expect_eof()


# ============================================================ concurrency

class ConcurrencyTests(SharedDaemonCase):

    N = 1000
    SHARED = 20

    def read_lines(self, socks, count, want_eof=False, timeout=None):
        """Reads `count` lines from every socket (and then EOF if want_eof),
        concurrently. Returns {sock: [lines]}."""
        sel = selectors.DefaultSelector()
        bufs = {s: b"" for s in socks}
        lines = {s: [] for s in socks}
        pending = set(socks)
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        deadline = time.monotonic() + (timeout or scaled(60))
        try:
            while pending:
                left = deadline - time.monotonic()
                self.assertGreater(left, 0, "%d connections still waiting for replies; "
                                   "e.g. got %r" % (len(pending), lines[next(iter(pending))]))
                for key, _ in sel.select(left):
                    s = key.fileobj
                    data = s.recv(65536)
                    bufs[s] += data
                    while b"\n" in bufs[s]:
                        line, bufs[s] = bufs[s].split(b"\n", 1)
                        lines[s].append(line.decode("latin-1"))
                    self.assertLessEqual(len(lines[s]), count, lines[s])
                    done = len(lines[s]) == count and (not want_eof or not data)
                    if not data:
                        self.assertTrue(want_eof and len(lines[s]) == count,
                                        "early EOF after %r" % lines[s])
                        self.assertEqual(bufs[s], b"")
                    if done:
                        sel.unregister(s)
                        pending.discard(s)
        finally:
            sel.close()
        return lines

    def test_1000_concurrent_connections(self):
        if NOFILE < self.N + 100:
            lbharness.skip("nofile", "open file limit %d is too low" % NOFILE)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        own = ["%s-own-%d" % (self.name(), i) for i in range(self.N)]
        shared = ["%s-shared-%d" % (self.name(), k) for k in range(self.SHARED)]
        # Connect in batches, each answered, so the accept queue stays short;
        # every connection stays open, so the daemon serves all 1000 at once.
        for start in range(0, self.N, 200):
            batch = []
            for i in range(start, min(start + 200, self.N)):
                s = socket.create_connection((self.d.host, self.d.port), timeout=TIMEOUT)
                socks.append(s)
                batch.append(s)
                s.sendall(b"PING\n")
            for s, ls in self.read_lines(batch, 1).items():
                self.assertEqual(ls, ["PONG"])
        # Every connection takes its own lock: 1000 locks held at once.
        for s, n in zip(socks, own):
            s.sendall(("LOCK %s\n" % n).encode())
        got = self.read_lines(socks, 1)
        own_tok = {}
        for s, n in zip(socks, own):
            m = re.fullmatch(r"OK %s ([0-9]+)" % re.escape(n), got[s][0])
            self.assertIsNotNone(m, got[s])
            own_tok[s] = int(m.group(1))
        # Then 50 connections contend for each shared lock, pipelined.
        for i, s in enumerate(socks):
            sh, n = shared[i % self.SHARED], own[i]
            s.sendall(("LOCK {sh}\nUNLOCK {sh}\nTRYLOCK {n}\nUNLOCK {n}\nUNLOCK {n}\nQUIT\n"
                       .format(sh=sh, n=n)).encode())
        got = self.read_lines(socks, 6, want_eof=True)
        tokens = {sh: [] for sh in shared}
        for i, s in enumerate(socks):
            sh, n = shared[i % self.SHARED], own[i]
            ls = got[s]
            m = re.fullmatch(r"OK %s ([0-9]+)" % re.escape(sh), ls[0])
            self.assertIsNotNone(m, ls)
            tokens[sh].append(int(m.group(1)))
            self.assertEqual(ls[1:], ["OK %s" % sh, "OK %s %d" % (n, own_tok[s]), "OK %s" % n,
                                      "OK %s" % n, "BYE"])
        for sh, toks in tokens.items():
            self.assertEqual(len(set(toks)), self.N // self.SHARED, "duplicate tokens for " + sh)
        # Everything was released.
        c = self.connect()
        c.send("".join("TRYLOCK %s\nUNLOCK %s\n" % (n, n) for n in shared + own))
        for n in shared + own:
            self.granted(c, n)
            c.expect("OK %s" % n)


# ============================================ STATUS, STATS, HELP, reload

def read_block(c):
    """Lines up to END (not included)."""
    lines = []
    while True:
        line = c.line()
        if line == "END":
            return lines
        lines.append(line)


def stat_map(c):
    c.send("STATS\n")
    out = {}
    for line in read_block(c):
        m = re.match(r"STAT (\S+) (\S+)$", line)
        assert m, "not a STAT line: %r" % line
        out[m.group(1)] = m.group(2)
    return out


class AdminTests(Case):
    """Commands for operators, on a daemon of the test's own (exact counters)."""

    def setUp(self):
        self.d = Daemon(name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(self.d.stop)
        self.daemon_id = self.d.wait_log(r"info daemon id (\S+)$").group(1)

    def test_help_lists_every_command_from_the_table(self):
        c = self.connect()
        c.send("help\n")
        lines = read_block(c)
        words = [re.match(r"HELP (\S+)", l).group(1) for l in lines]
        self.assertEqual(words, ["LOCK", "TRYLOCK", "UNLOCK", "RENEW", "CHECK", "PING", "QUIT",
                                 "STATUS", "LOCKS", "HOLDERS", "BREAK", "WATCH", "UNWATCH",
                                 "CLIENT", "STATS", "HELP", "AUTH", "GRACE", "RESUME"])
        self.assertIn("HELP LOCK <name>[,<name>...] [<wait-ms>] [shared|limit=<n>] [ttl=<ms>] "
                      "[delay=<ms>] - ", lines[0])
        self.ping(c)                                  # still usable, in order

    def test_stats_counts_what_happened(self):
        c, w = self.connect(), self.connect()
        before = stat_map(c)
        self.assertEqual(before["mode"], "embedded")
        self.assertRegex(before["version"], r"^\d+\.\d+\.\d+$")
        self.assertEqual(before["curr_connections"], "2")
        n = self.name()
        self.lock(c, n)
        c.send("LOCK %s\n" % n)                       # re-entrant: not a grant
        self.granted(c, n)
        w.send("LOCK %s 1\n" % n)
        w.expect("TIMEOUT %s" % n)
        w.send("BOGUS\n")
        w.expect_match(r"ERR BAD_COMMAND .*")
        after = stat_map(c)
        self.assertEqual(int(after["grants"]) - int(before["grants"]), 1)
        self.assertEqual(int(after["timeouts"]) - int(before["timeouts"]), 1)
        self.assertEqual(int(after["errors"]) - int(before["errors"]), 1)
        self.assertEqual(int(after["cmd_lock"]) - int(before["cmd_lock"]), 3)
        self.assertEqual(int(after["cmd_stats"]) - int(before["cmd_stats"]), 1)
        self.assertEqual((after["locks_held"], after["waiters"]), ("1", "0"))
        self.assertEqual(after["total_connections"], "2")
        self.assertNotIn("zk_state", after)

    def test_status_free_held_and_waiters(self):
        n = self.name()
        a, b, q = self.connect(), self.connect(), self.connect()
        q.send("STATUS %s\n" % n)
        q.expect("STATUS %s free holder=- token=- since=- waiters=0 queue=0" % n)
        before_ms = int(time.time() * 1000)
        tok = self.lock(a, n)
        after_ms = int(time.time() * 1000)
        q.send("STATUS %s\n" % n)
        m = q.expect_match(r"STATUS %s held holder=(\S+) token=(\d+) since=(\d+) "
                           r"waiters=0 queue=1$" % n)
        self.assertEqual(m.group(1), "%s/%s" % (self.daemon_id, a.local))
        self.assertEqual(int(m.group(2)), tok)
        self.assertTrue(before_ms - 1000 <= int(m.group(3)) <= after_ms + 1000)
        self.queue(b, n)
        q.send("status %s\n" % n)
        q.expect_match(r"STATUS %s held holder=\S+ token=%d since=\d+ waiters=1 queue=2$"
                       % (n, tok))
        a.close()
        self.granted(b, n)
        q.send("STATUS %s\n" % n)
        q.expect_match(r"STATUS %s held holder=%s/%s token=\d+ since=\d+ waiters=0 queue=1$"
                       % (n, re.escape(self.daemon_id), re.escape(b.local)))

    def test_client_label_in_status_and_locks(self):
        n = self.name()
        a, b, q = self.connect(), self.connect(), self.connect()
        a.send("CLIENT ops@db1:4242:pg_dump\n")
        a.expect("OK")
        tok = self.lock(a, n)
        self.queue(b, n)
        q.send("STATUS %s\n" % n)
        m = q.expect_match(r"STATUS %s held holder=%s/%s token=%d since=(\d+) waiters=1 "
                           r"queue=2 label=ops@db1:4242:pg_dump$"
                           % (n, re.escape(self.daemon_id), re.escape(a.local), tok))
        # LOCKS: one line per lock held or awaited here, by name, then END.
        q.send("LOCKS %s*\n" % n)
        self.assertRegex(q.line(), r"^LOCK %s exclusive holder=%s/%s label=ops@db1:4242:pg_dump "
                         r"token=%d since=%s holders=1 waiters=1 waited=\d+$"
                         % (n, re.escape(self.daemon_id), re.escape(a.local), tok, m.group(1)))
        self.assertEqual(q.line(), "END")
        q.send("LOCKS %s-nothing-*\n" % n)
        self.assertEqual(q.line(), "END")
        # A label is 1-100 printable bytes without spaces.
        for bad in ("CLIENT", "CLIENT a b", "CLIENT " + "x" * 101):
            q.send(bad + "\n")
            self.assertRegex(q.line(), r"^ERR BAD_ARGS ", bad)
        q.send("CLIENT " + "x" * 100 + "\n")
        q.expect("OK")
        q.send("LOCKS a/b\n")
        self.assertRegex(q.line(), r"^ERR BAD_ARGS a pattern is ")
        # A set left open (or closed without being opened) would match
        # nothing, silently: it is refused with the reason.
        q.send("LOCKS %s[\n" % n)
        self.assertEqual(q.line(), "ERR BAD_ARGS a '[' in the pattern has no ']' after it "
                         "(a set is [...] or [!...])")
        q.send("LOCKS %s]\n" % n)
        self.assertEqual(q.line(), "ERR BAD_ARGS a ']' in the pattern has no '[' before it "
                         "(a set is [...] or [!...])")
        q.send("LOCKS %s[0-9]*\n" % n)
        self.assertEqual(q.line(), "END")

    def test_holders_lists_every_holder_and_waiter(self):
        n = self.name()
        r1, r2, w, q = self.connect(), self.connect(), self.connect(), self.connect()
        r1.send("CLIENT reader-1\n")
        r1.expect("OK")
        def take(c, name, opts):
            c.send("LOCK %s %s\n" % (name, opts))
            return self.granted(c, name)
        t1 = take(r1, n, "shared")
        t2 = take(r2, n, "shared")
        self.queue(w, n)
        # HOLDERS: every hold of a shared lock, then its queue, by name, then END.
        q.send("HOLDERS %s*\n" % n)
        rows = read_block(q)
        holder = r"HOLDER %s %%s holder=%s/%%s label=%%s token=%%s since=\d+$" % (
            n, re.escape(self.daemon_id))
        self.assertEqual(len(rows), 3, rows)
        self.assertRegex(rows[0], holder % ("shared held", re.escape(r1.local), "reader-1", t1))
        self.assertRegex(rows[1], holder % ("shared held", re.escape(r2.local), "-", t2))
        self.assertRegex(rows[2], holder % ("exclusive queued", re.escape(w.local), "-", "-"))
        # A semaphore's holders, and a lease's time left.
        s = n + "-s"
        ts = [take(self.connect(), s, "limit=2") for _ in range(2)]
        q.send("LOCK %s 1000 limit=2 ttl=60000\n" % (n + "-l"))
        tl = int(q.expect_match(r"OK %s-l (\d+)" % n).group(1))
        q.send("HOLDERS %s-?\n" % n)
        rows = read_block(q)
        self.assertEqual(len(rows), 3, rows)
        self.assertRegex(rows[0], r"^HOLDER %s-l limit=2 held holder=%s/lease:\S+ label=- "
                         r"token=%d since=\d+ lease=\d+$" % (n, re.escape(self.daemon_id), tl))
        for row, t in zip(rows[1:], ts):
            self.assertRegex(row, r"^HOLDER %s limit=2 held .* token=%d since=\d+$" % (s, t))
        q.send("HOLDERS %s-nothing-*\n" % n)
        self.assertEqual(q.line(), "END")
        q.send("HOLDERS a/b\n")
        self.assertRegex(q.line(), r"^ERR BAD_ARGS a pattern is ")
        q.send("HOLDERS %s[!\n" % n)
        self.assertRegex(q.line(), r"^ERR BAD_ARGS a '\[' in the pattern has no '\]' after it")
        self.ping(q)

    def test_watch_pushes_each_change(self):
        n = self.name()
        w, a, b = self.connect(), self.connect(), self.connect()
        w.send("WATCH %s\n" % n)
        w.expect("OK %s" % n)
        w.expect("EVENT %s free" % n)               # the state at once
        a.send("CLIENT job-a\n")
        a.expect("OK")
        ta = self.lock(a, n)
        holder = "holder=%s/%%s mode=%%s" % re.escape(self.daemon_id)
        w.expect_match(r"EVENT %s held %d holders=1 label=job-a %s$"
                       % (n, ta, holder % (re.escape(a.local), "exclusive")))
        self.queue(b, n)
        self.unlock(a, n)                             # handed on: one event, not free first
        tb = self.granted(b, n)
        w.expect_match(r"EVENT %s held %d holders=1 label=- %s$"
                       % (n, tb, holder % (re.escape(b.local), "exclusive")))
        b.close()                                     # the holder goes
        w.expect("EVENT %s free" % n)
        # A lease's end is a change too.
        a.send("LOCK %s 1000 ttl=200\n" % n)
        tl = self.granted(a, n)
        w.expect_match(r"EVENT %s held %d holders=1 label=job-a holder=\S+/lease:\S+ "
                       r"mode=exclusive$" % (n, tl))
        w.expect("EVENT %s free" % n)
        # UNWATCH: no more events; watching twice is watching once.
        w.send("WATCH %s\nUNWATCH %s\n" % (n, n))
        w.expect("OK %s" % n)
        w.expect("OK %s" % n)
        self.lock(a, n)
        self.ping(w)                                  # nothing came before PONG
        self.assertTrue(w.silent())

    def test_break_ends_others_holds(self):
        n = self.name()
        h, w, op = self.connect(), self.connect(), self.connect()
        th = self.lock(h, n)
        self.queue(w, n)
        op.send("BREAK %s\n" % n)
        op.expect("OK %s" % n)
        h.expect("LOST %s %d broken" % (n, th))        # the holder is told
        tw = self.granted(w, n)                         # the next one goes on
        self.assertGreater(tw, th)
        h.send("UNLOCK %s\n" % n)
        h.expect_match(r"ERR NOT_HELD .*")
        # With a token: only that hold; a wrong token breaks nothing.
        op.send("BREAK %s %d\n" % (n, th))
        op.expect_match(r"ERR NOT_HELD no hold of %s with that token through this daemon .*"
                        % re.escape(n))
        op.send("BREAK %s %d\n" % (n, tw))
        op.expect("OK %s" % n)
        w.expect("LOST %s %d broken" % (n, tw))
        # A lease, and a hold kept for its lock-delay, can be broken too.
        h.send("LOCK %s-l ttl=60000\n" % n)
        tl = self.granted(h, n + "-l")
        op.send("BREAK %s-l %d\n" % (n, tl))
        op.expect("OK %s-l" % n)
        self.assert_free(n + "-l")
        g = self.connect()
        g.send("LOCK %s-d delay=60000\n" % n)
        self.granted(g, n + "-d")
        g.close()
        self.d.wait_log(r"lock %s-d: \S+ ended without a release" % re.escape(n))
        self.assert_busy(n + "-d")
        op.send("BREAK %s-d\n" % n)
        op.expect("OK %s-d" % n)
        self.assert_free(n + "-d")
        op.send("BREAK %s-none\n" % n)
        op.expect_match(r"ERR NOT_HELD no hold of %s-none through this daemon .*"
                        % re.escape(n))
        st = stat_map(op)
        self.assertEqual((st["locks_broken"], st["cmd_break"]), ("4", "6"))

    def test_watch_limits_and_errors(self):
        n = self.name()
        w = self.connect()
        w.send("".join("WATCH %s-%d\n" % (n, i) for i in range(100)))
        lines = [w.line() for _ in range(200)]       # replies in order, events among them
        self.assertEqual([l for l in lines if l.startswith("OK ")],
                         ["OK %s-%d" % (n, i) for i in range(100)])
        self.assertEqual(sorted(l for l in lines if l.startswith("EVENT ")),
                         sorted("EVENT %s-%d free" % (n, i) for i in range(100)))
        w.send("WATCH %s-x\n" % n)
        w.expect("ERR LIMIT a connection watches at most 100 locks")
        for bad, err in (("WATCH", "BAD_ARGS"), ("WATCH a*", "BAD_NAME"),
                         ("UNWATCH a b", "BAD_ARGS")):
            w.send(bad + "\n")
            self.assertRegex(w.line(), r"^ERR %s " % err, bad)
        w.send("UNWATCH %s-0\nWATCH %s-x\n" % (n, n))
        w.expect("OK %s-0" % n)
        w.expect("OK %s-x" % n)
        w.expect("EVENT %s-x free" % n)

    def test_status_errors(self):
        c = self.connect()
        c.send("STATUS\nSTATUS a b\nSTATUS bad/name\n")
        c.expect_match(r"ERR BAD_ARGS .*")
        c.expect_match(r"ERR BAD_ARGS .*")
        c.expect_match(r"ERR BAD_NAME .*")
        self.ping(c)


class HoldLogTests(Case):
    """One info line per ended hold (daemon/locks.c, hold_log_end; README.md,
    "Running the daemon"), and [log] holds = no. Each line is waited for
    (wait_log); its absence is checked up to a later line of the same log."""

    # "lock <name>: hold ended: end=... held=<s>[ after=... kept=<s>]"
    LINE = (r"info lock %s: hold ended: end=%s holder=%s user=- label=%s token=%d "
            r"mode=exclusive waited=(\d+\.\d{3})s held=(\d+\.\d{3})s%s$")

    def start(self, text=None):
        d = Daemon(config=text, name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)
        self.d = d
        return d

    def line_re(self, name, end, holder, token, label="-", tail=""):
        return self.LINE % (re.escape(name), end, re.escape(holder), re.escape(label), token,
                            tail)

    def test_a_line_per_ended_hold(self):
        d = self.start()
        n = self.name()
        a, b = self.connect(), self.connect()
        a.send("CLIENT job-a\n")
        a.expect("OK")
        # Released, after a waiter queued behind it: bounds measured here
        # enclose what the daemon measured (its clock starts after our send
        # and stops before our reply), at its millisecond resolution.
        t_lock = time.monotonic()
        ta = self.lock(a, n)
        t_granted = time.monotonic()
        b.send("LOCK %s\n" % n)
        t_asked = time.monotonic()
        d.wait_queued(b, n)
        t_queued = time.monotonic()
        mark = d.log_mark()
        a.send("UNLOCK %s\n" % n)
        t_unlock = time.monotonic()
        a.expect("OK %s" % n)
        t_released = time.monotonic()
        tb = self.granted(b, n)
        t_b_granted = time.monotonic()
        m = d.wait_log(self.line_re(n, "released", a.local, ta, "job-a"), since=mark)
        held = float(m.group(2))
        self.assertGreaterEqual(held, t_unlock - t_granted - 0.001)
        self.assertLessEqual(held, t_released - t_lock + 0.001)
        # The waiter: asked before we saw it queued, granted after our UNLOCK.
        mark = d.log_mark()
        self.unlock(b, n)
        m = d.wait_log(self.line_re(n, "released", b.local, tb), since=mark)
        waited = float(m.group(1))
        self.assertGreaterEqual(waited, t_unlock - t_queued - 0.001)
        self.assertLessEqual(waited, t_b_granted - t_asked + 0.001)

        # Abandoned: the connection went without UNLOCK.
        c = self.connect()
        tc = self.lock(c, n + "-a")
        mark = d.log_mark()
        c.close()
        d.wait_log(self.line_re(n + "-a", "abandoned", c.local, tc), since=mark)

        # Broken: BREAK from another connection.
        h, op = self.connect(), self.connect()
        th = self.lock(h, n + "-b")
        mark = d.log_mark()
        op.send("BREAK %s-b\n" % n)
        op.expect("OK %s-b" % n)
        h.expect("LOST %s-b %d broken" % (n, th))
        d.wait_log(self.line_re(n + "-b", "broken", h.local, th), since=mark)

        # Kept: UNLOCK keep= keeps it, and the line comes at the keep's end,
        # after the daemon's own "is over" line.
        k = self.connect()
        k.send("CLIENT job-k\n")
        k.expect("OK")
        tk = self.lock(k, n + "-k")
        k.send("UNLOCK %s-k keep=200\n" % n)
        t_keep = time.monotonic()
        k.expect("OK %s-k" % n)
        d.wait_log(r"info lock %s-k: keep= of 200 ms after \S+ released \(token %d\) is over"
                   % (re.escape(n), tk))
        m = d.wait_log(self.line_re(n + "-k", "kept", k.local, tk, "job-k",
                                    r" after=released kept=(\d+\.\d{3})s"))
        t_over = time.monotonic()
        self.assertGreater(float(m.group(3)), 0)
        self.assertLessEqual(float(m.group(3)), t_over - t_keep + 0.001)
        # A lock-delay after an abandonment: kept too, after=abandoned.
        g = self.connect()
        g.send("LOCK %s-d delay=100\n" % n)
        tg = self.granted(g, n + "-d")
        g.close()
        d.wait_log(self.line_re(n + "-d", "kept", g.local, tg, "-",
                                r" after=abandoned kept=\d+\.\d{3}s"))
        # A lease: released with its token, or expired.
        le = self.connect()
        le.send("LOCK %s-l ttl=600000\n" % n)
        tl = self.granted(le, n + "-l")
        mark = d.log_mark()
        le.send("UNLOCK %s-l %d\n" % (n, tl))
        le.expect("OK %s-l" % n)
        d.wait_log(self.line_re(n + "-l", "released", "lease:" + le.local, tl), since=mark)
        le.send("LOCK %s-e ttl=100\n" % n)
        te = self.granted(le, n + "-e")
        d.wait_log(self.line_re(n + "-e", "expired", "lease:" + le.local, te))
        # One line per hold: a re-entrant grant is not a hold of its own.
        r = self.connect()
        tr = self.lock(r, n + "-r")
        self.lock(r, n + "-r")
        mark = d.log_mark()
        self.unlock(r, n + "-r")
        self.unlock(r, n + "-r")
        self.barrier()
        r.close()
        d.wait_closed(r)
        self.assertEqual(len([ln for ln in d.lines[mark:]
                              if re.search(self.line_re(n + "-r", r"\w+", r.local, tr), ln)]), 1)

    def test_off_and_on_by_sighup(self):
        d = self.start("[log]\nholds = no\n")
        n = self.name()
        a, op = self.connect(), self.connect()
        self.lock(a, n)
        self.unlock(a, n)
        self.lock(a, n + "-b")
        op.send("BREAK %s-b\n" % n)
        op.expect("OK %s-b" % n)
        a.expect_match(r"LOST %s-b \d+ broken" % re.escape(n))
        a.send("LOCK %s-k\n" % n)
        tk = self.granted(a, n + "-k")
        a.send("UNLOCK %s-k keep=100\n" % n)
        a.expect("OK %s-k" % n)
        d.wait_log(r"lock %s-k: keep= of 100 ms after \S+ released \(token %d\) is over"
                   % (re.escape(n), tk))
        self.lock(a, n + "-a")
        a.close()
        d.wait_closed(a)              # every line of the holds above came before it
        self.assertEqual([ln for ln in d.lines if "hold ended" in ln], [])
        # SIGHUP turns it on, for holds that end from then on.
        with open(d.config_path, "w") as f:
            f.write("[log]\nholds = yes\n")
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reloaded: .*, log holds yes(,|$)", since=mark)
        c = self.connect()
        tc = self.lock(c, n)
        self.unlock(c, n)
        d.wait_log(self.line_re(n, "released", c.local, tc), since=mark)


class ReloadTests(Case):
    """SIGHUP re-reads the file: log level and limits now, the rest on restart."""

    def start(self, text):
        d = Daemon(config=text, verbose=False, name="lockbrokerd-" + self._testMethodName)
        d.start()
        self.addCleanup(d.stop)
        return d

    def rewrite(self, d, text):
        with open(d.config_path, "w") as f:
            f.write(text)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        return mark

    def test_sighup_applies_log_level_and_limits(self):
        d = self.start("[server]\nmax_locks_per_client = 1\n[log]\nlevel = info\n")
        c = self.connect(d)
        self.lock(c, "r1")
        c.send("LOCK r2\n")
        c.expect_match(r"ERR LIMIT .*")
        mark = self.rewrite(d, "[server]\nmax_locks_per_client = 2\n[log]\nlevel = debug\n")
        d.wait_log(r"reloaded: log level debug, max_clients \d+, max_line 1024, "
                   r"max_locks_per_client 2", since=mark)
        st = stats(d)
        self.assertEqual((st["reloads"], st["last_reload_ok"]), ("1", "1"))
        self.lock(c, "r2")                            # the held lock was kept
        c.send("LOCK r3\n")
        c.expect_match(r"ERR LIMIT .*")
        probe = self.connect(d)                       # debug lines now appear
        self.ping(probe)
        d.wait_log(r"debug conn \d+ \(%s\): open" % re.escape(probe.local), since=mark)

    def test_sighup_lowering_max_line_closes_a_waiter_past_the_new_bound(self):
        # 66000 bytes behind a waiting LOCK: within the bound for max_line
        # 1024 (66561), past it for max_line 256 (65793).
        d = Daemon(config="[server]\nmax_line = 1024\n",
                   name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)
        h, w = self.connect(d), self.connect(d)
        self.lock(h, "m")
        self.queue(w, "m")
        w.send(pings(66000)[0])
        self.wait_read_by_daemon(w)
        self.assertTrue(w.silent(), "answered before the bound was passed")
        self.rewrite(d, "[server]\nmax_line = 256\n")
        w.expect(ERR_LIMIT_INPUT % 65793)
        w.expect_eof()
        self.unlock(h, "m")
        self.assert_free("m", d)

    def test_sighup_with_a_bad_file_keeps_the_running_settings(self):
        d = self.start("[server]\nmax_locks_per_client = 1\n")
        c = self.connect(d)
        self.lock(c, "k1")
        self.assertEqual(stats(d)["last_reload_ok"], "1")     # none failed yet
        mark = self.rewrite(d, "[server]\nmax_locks_per_client = lots\n")
        # One line says it failed and what is served; none claims "reloaded".
        d.wait_log(r"error reload failed: .*lockbrokerd.conf:2: max_locks_per_client: 'lots' "
                   r".*; serving on with the settings before$", since=mark)
        c.send("LOCK k2\n")
        c.expect_match(r"ERR LIMIT .*")                 # still 1
        self.ping(c)
        self.assertIsNone(d.find_log(r"reloaded: ", since=mark))
        # STATS tells the outcome without reading the log; a good reload mends it.
        st = stats(d)
        self.assertEqual((st["reloads"], st["last_reload_ok"]), ("1", "0"))
        mark = self.rewrite(d, "[server]\nmax_locks_per_client = 2\n")
        d.wait_log(r"info reloaded: ", since=mark)
        st = stats(d)
        self.assertEqual((st["reloads"], st["last_reload_ok"]), ("2", "1"))

    def test_sighup_when_the_file_became_a_directory(self):
        d = self.start("[server]\nmax_locks_per_client = 1\n")
        os.remove(d.config_path)
        os.mkdir(d.config_path)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"error reload failed: %s: is a directory; serving on with the settings "
                   r"before$" % re.escape(d.config_path), since=mark)
        c = self.connect(d)
        self.lock(c, "k1")
        c.send("LOCK k2\n")
        c.expect_match(r"ERR LIMIT .*")                 # still 1

    def test_sighup_reports_settings_that_need_a_restart(self):
        d = self.start("[server]\nmax_line = 300\n")
        mark = self.rewrite(d, "[server]\nmax_line = 300\nunix_socket = /tmp/lb-reload.sock\n"
                               "[zookeeper]\nsession_timeout_ms = 5000\n")
        d.wait_log(r"warn reload: unix_socket or its mode changed; restart", since=mark)
        d.wait_log(r"warn reload: \[zookeeper\] settings changed; restart", since=mark)
        d.wait_log(r"reloaded: ", since=mark)
        self.assertFalse(os.path.exists("/tmp/lb-reload.sock"))
        self.ping(self.connect(d))


# ================================================================== modes

class ModeTests(SharedDaemonCase):
    """LOCK/TRYLOCK with shared or limit=<n> (daemon/locks.c decides, daemon/conn.c answers)."""

    def take(self, c, name, opt, wait=None):
        """LOCK name [wait] opt that must be granted at once; returns the token."""
        c.send("LOCK %s%s %s\n" % (name, "" if wait is None else " %d" % wait, opt))
        return self.granted(c, name)

    def queue_as(self, c, name, opt=""):
        """Sends LOCK name opt ("", "shared", "limit=<n>") that must wait, and
        waits for the daemon's "queued" line, which ends in " (shared)" or
        " (limit)" for those modes."""
        d = c.daemon or self.d
        suffix = "" if not opt else " (shared)" if opt.lower() == "shared" else " (limit)"
        mark = d.log_mark()
        c.send(("LOCK %s %s" % (name, opt)).rstrip() + "\n")
        d.wait_log(r"lock %s: %s queued%s$" % (re.escape(name), re.escape(c.local),
                                               re.escape(suffix)), since=mark)

    def assert_silent(self, *clients):
        self.barrier()
        for c in clients:
            self.assertTrue(c.silent(), "%r answered out of turn" % c)

    def test_readers_share(self):
        n = self.name()
        r1, r2, r3, o = (self.connect() for _ in range(4))
        t1 = self.take(r1, n, "shared")
        t2 = self.take(r2, n, "SHARED", wait=0)
        r3.send("TRYLOCK %s Shared\n" % n)
        t3 = self.granted(r3, n)
        self.assertLess(t1, t2)
        self.assertLess(t2, t3)
        o.send("TRYLOCK %s\nLOCK %s 0\n" % (n, n))
        o.expect("BUSY %s" % n, "TIMEOUT %s" % n)
        for c in (r1, r2):
            self.unlock(c, n)
        self.assert_busy(n)                     # r3 still reads
        self.unlock(r3, n)
        self.assert_free(n)

    def test_writer_waits_for_readers_and_readers_behind_it_wait(self):
        n = self.name()
        r1, r2, w, r3, o = (self.connect() for _ in range(5))
        self.take(r1, n, "shared")
        self.take(r2, n, "shared")
        self.queue_as(w, n)
        # r3 would fit beside r1 and r2, but the writer asked first.
        self.queue_as(r3, n, "shared")
        o.send("TRYLOCK %s shared\nLOCK %s 0 shared\n" % (n, n))
        o.expect("BUSY %s" % n, "TIMEOUT %s" % n)
        self.unlock(r1, n)
        self.assert_silent(w, r3)
        self.unlock(r2, n)
        tw = self.granted(w, n)
        self.assert_silent(r3)
        self.unlock(w, n)
        self.assertGreater(self.granted(r3, n), tw)

    def test_readers_behind_writer_granted_together(self):
        n = self.name()
        h, r1, r2, r3, w, r4 = (self.connect() for _ in range(6))
        th = self.lock(h, n)
        for r in (r1, r2, r3):
            self.queue_as(r, n, "shared")
        self.queue_as(w, n)
        self.queue_as(r4, n, "shared")
        self.unlock(h, n)                       # one UNLOCK lets all three in
        toks = [self.granted(r, n) for r in (r1, r2, r3)]
        self.assertEqual(toks, sorted(set(toks)))
        self.assertGreater(toks[0], th)
        self.assert_silent(w, r4)
        self.unlock(r1, n)
        self.unlock(r2, n)
        self.assert_silent(w, r4)
        self.unlock(r3, n)
        tw = self.granted(w, n)
        self.assert_silent(r4)
        self.unlock(w, n)
        self.assertGreater(self.granted(r4, n), tw)

    def test_semaphore_bound_never_exceeded_under_churn(self):
        # 8 connections cycle LOCK limit=3 / UNLOCK (some pipelined, some
        # LOCK ... 0, some closing instead of UNLOCK). Holders are counted from
        # the replies: a grant is counted when read, a release when sent, so
        # the count is never above the daemon's and must never pass 3.
        n = self.name()
        limit, grants_wanted = 3, 1000
        rng = random.Random(1)
        conns = [self.connect() for _ in range(8)]
        state = {c: "idle" for c in conns}
        holding = peak = grants = 0
        tokens = set()
        deadline = time.monotonic() + scaled(60)
        while grants < grants_wanted:
            for c in conns:
                if state[c] == "idle":
                    c.send("LOCK %s%s limit=%d\n" % (n, " 0" if rng.random() < 0.2 else "", limit))
                    state[c] = "waiting"
            holders = [c for c in conns if state[c] == "holding"]
            waiting = any(s == "waiting" for s in state.values())
            # Release when full or nobody waits (so that replies keep coming);
            # at random too, once the bound was reached.
            if holders and (holding == limit or not waiting or
                            (peak == limit and rng.random() < 0.3)):
                c = rng.choice(holders)
                holding -= 1
                roll = rng.random()
                if roll < 0.15:
                    c.close()
                    del state[c]
                    conns.remove(c)
                    new = self.connect()
                    conns.append(new)
                    state[new] = "idle"
                elif roll < 0.45:
                    c.send("UNLOCK %s\nLOCK %s limit=%d\n" % (n, n, limit))
                    state[c] = "relocking"
                else:
                    c.send("UNLOCK %s\n" % n)
                    state[c] = "unlocking"
                continue
            left = deadline - time.monotonic()
            self.assertGreater(left, 0, "stalled after %d grants: %r" % (grants, state))
            readable, _, _ = select.select([c.sock for c in conns], [], [], left)
            self.assertTrue(readable, "no reply within the deadline; %d grants, %r"
                            % (grants, state))
            for c in [c for c in conns if c.sock in readable]:
                self.assertTrue(c._fill(time.monotonic() + TIMEOUT))
                self.assertFalse(c.eof, "%r closed" % c)
                while b"\n" in c.buf:
                    raw, c.buf = c.buf.split(b"\n", 1)
                    line = raw.decode("latin-1")
                    m = re.fullmatch(r"OK %s ([0-9]+)" % re.escape(n), line)
                    if m:
                        self.assertEqual(state[c], "waiting", line)
                        state[c] = "holding"
                        holding += 1
                        grants += 1
                        peak = max(peak, holding)
                        self.assertLessEqual(holding, limit, "more holders than limit=3")
                        tok = int(m.group(1))
                        self.assertNotIn(tok, tokens)
                        tokens.add(tok)
                    elif line == "OK %s" % n:
                        self.assertIn(state[c], ("unlocking", "relocking"), line)
                        state[c] = "idle" if state[c] == "unlocking" else "waiting"
                    elif line == "TIMEOUT %s" % n:
                        self.assertEqual(state[c], "waiting", line)
                        state[c] = "idle"
                    else:
                        self.fail("%r: unexpected reply %r" % (c, line))
        self.assertEqual(peak, limit)
        # Closing every connection releases every hold and cancels every wait:
        # the name is free, and may be used with another limit.
        for c in conns:
            c.close()
            self.d.wait_closed(c)
        q = self.connect()
        q.send("STATUS %s\nTRYLOCK %s limit=5\n" % (n, n))
        q.expect("STATUS %s free holder=- token=- since=- waiters=0 queue=0" % n)
        self.assertGreater(self.granted(q, n), max(tokens))

    def test_conflict_replies(self):
        s, x, r = self.name("s"), self.name("x"), self.name("r")
        a, b = self.connect(), self.connect()
        ts = self.take(a, s, "limit=3")
        self.lock(a, x)
        self.take(a, r, "shared")
        on_semaphore = ERR_CONFLICT_LIMIT % 3
        cases = [
            ("LOCK %s limit=2" % s, on_semaphore),          # another limit
            ("TRYLOCK %s limit=4" % s, on_semaphore),
            ("LOCK %s 0 limit=65535" % s, on_semaphore),
            ("LOCK %s" % s, on_semaphore),                  # a lock's mode on a semaphore
            ("LOCK %s shared" % s, on_semaphore),
            ("TRYLOCK %s" % s, on_semaphore),
            ("LOCK %s limit=3" % x, ERR_CONFLICT_LOCK),      # a semaphore on a lock
            ("TRYLOCK %s limit=1" % x, ERR_CONFLICT_LOCK),
            ("LOCK %s limit=2" % r, ERR_CONFLICT_LOCK),
            ("LOCK %s 0 limit=2" % r, ERR_CONFLICT_LOCK),
        ]
        b.send("".join(req + "\n" for req, _ in cases))
        for req, err in cases:
            got = b.line()
            self.assertEqual(got, err, "request %r" % req)
        # Nothing changed: b holds nothing, a's holds are as they were.
        b.send("UNLOCK %s\nUNLOCK %s\nUNLOCK %s\nSTATUS %s\n" % (s, x, r, s))
        b.expect(ERR_NOT_HELD, ERR_NOT_HELD, ERR_NOT_HELD)
        b.expect_match(r"STATUS %s held holder=\S+ token=%d since=\d+ waiters=0 queue=1 "
                       r"mode=limit limit=3 holders=1" % (re.escape(s), ts))
        self.take(b, s, "limit=3")
        b.send("TRYLOCK %s shared\nTRYLOCK %s\n" % (r, x))
        self.granted(b, r)
        b.expect("BUSY %s" % x)
        a.close()
        self.d.wait_closed(a)
        self.unlock(b, s)
        self.unlock(b, r)
        # Free names take any mode again.
        b.send("LOCK %s shared\nLOCK %s limit=2\nLOCK %s\n" % (s, x, r))
        for n in (s, x, r):
            self.granted(b, n)

    def test_reentrant_per_mode(self):
        r, s, x = self.name("r"), self.name("s"), self.name("x")
        a, w, v = self.connect(), self.connect(), self.connect()
        tr = self.take(a, r, "shared")
        self.queue_as(w, r)                     # a writer waits ...
        a.send("LOCK %s shared\nTRYLOCK %s SHARED\nLOCK %s 0 shared\n" % (r, r, r))
        for _ in range(3):                      # ... and a's re-entry does not queue behind it
            self.assertEqual(self.granted(a, r), tr)
        ts = self.take(a, s, "limit=1")
        self.queue_as(v, s, "limit=1")
        a.send("LOCK %s limit=1\nTRYLOCK %s limit=1\n" % (s, s))
        for _ in range(2):
            self.assertEqual(self.granted(a, s), ts)
        tx = self.lock(a, x)
        a.send("LOCK %s\n" % x)
        self.assertEqual(self.granted(a, x), tx)
        # Another mode of its own hold, or another limit: no upgrade, no downgrade.
        held_elsewise = ["LOCK %s" % r, "TRYLOCK %s limit=2" % r, "LOCK %s shared" % x,
                         "LOCK %s 0 limit=1" % x, "LOCK %s" % s, "TRYLOCK %s shared" % s,
                         "LOCK %s limit=2" % s]
        a.send("".join(req + "\n" for req in held_elsewise))
        for req in held_elsewise:
            self.assertEqual(a.line(), ERR_MODE_HELD, "request %r" % req)
        # Counted: four holds of r, three of s, two of x.
        for _ in range(3):
            self.unlock(a, r)
        for _ in range(2):
            self.unlock(a, s)
        self.unlock(a, x)
        self.assert_silent(w, v)
        self.assert_busy(x)
        self.unlock(a, r)
        self.assertGreater(self.granted(w, r), tr)
        self.unlock(a, s)
        self.assertGreater(self.granted(v, s), ts)
        self.unlock(a, x)
        self.assert_free(x)
        a.send("UNLOCK %s\n" % r)
        a.expect(ERR_NOT_HELD)

    def test_tokens_increase_across_modes_in_grant_order(self):
        n = self.name()
        a, b, c, d = (self.connect() for _ in range(4))
        toks = [self.lock(a, n)]
        self.queue_as(b, n, "shared")
        self.queue_as(c, n, "shared")
        self.queue_as(d, n)
        self.unlock(a, n)
        toks += [self.granted(b, n), self.granted(c, n)]   # together, in queue order
        self.queue_as(a, n, "shared")
        self.unlock(b, n)
        self.unlock(c, n)
        toks.append(self.granted(d, n))
        self.unlock(d, n)
        toks.append(self.granted(a, n))
        b.send("TRYLOCK %s shared\n" % n)
        toks.append(self.granted(b, n))
        self.unlock(a, n)
        self.unlock(b, n)
        # The same name as a semaphore, once free.
        toks.append(self.take(c, n, "limit=2"))
        toks.append(self.take(d, n, "limit=2"))
        self.queue_as(a, n, "limit=2")
        self.unlock(c, n)
        toks.append(self.granted(a, n))
        self.unlock(d, n)
        self.unlock(a, n)
        toks.append(self.assert_free(n))
        self.assertEqual(len(toks), 10)
        self.assertEqual(toks, sorted(set(toks)), toks)

    def test_status_lines(self):
        did = self.d.wait_log(r"info daemon id (\S+)$").group(1)
        n, s, x = self.name("n"), self.name("s"), self.name("x")
        r1, r2, w, q = (self.connect() for _ in range(4))

        def status(name, regex):
            q.send("STATUS %s\n" % name)
            return q.expect_match(regex)

        def holder(c):
            return re.escape("%s/%s" % (did, c.local))

        status(n, r"STATUS %s free holder=- token=- since=- waiters=0 queue=0" % n)
        t1 = self.take(r1, n, "shared")
        t2 = self.take(r2, n, "shared")
        status(n, r"STATUS %s held holder=%s token=%d since=\d+ waiters=0 queue=2 "
                  r"mode=shared holders=2" % (n, holder(r1), t1))
        self.queue_as(w, n)
        status(n, r"STATUS %s held holder=%s token=%d since=\d+ waiters=1 queue=3 "
                  r"mode=shared holders=2" % (n, holder(r1), t1))
        self.unlock(r1, n)
        status(n, r"STATUS %s held holder=%s token=%d since=\d+ waiters=1 queue=2 "
                  r"mode=shared holders=1" % (n, holder(r2), t2))
        self.unlock(r2, n)
        tw = self.granted(w, n)
        # An exclusive holder: the line keeps its v1 form.
        status(n, r"STATUS %s held holder=%s token=%d since=\d+ waiters=0 queue=1"
                  % (n, holder(w), tw))
        self.queue_as(r1, n, "shared")
        status(n, r"STATUS %s held holder=%s token=%d since=\d+ waiters=1 queue=2"
                  % (n, holder(w), tw))
        self.unlock(w, n)
        self.granted(r1, n)
        self.unlock(r1, n)
        status(n, r"STATUS %s free holder=- token=- since=- waiters=0 queue=0" % n)

        sems = [self.connect() for _ in range(4)]
        ts = self.take(sems[0], s, "limit=3")
        status(s, r"STATUS %s held holder=%s token=%d since=\d+ waiters=0 queue=1 "
                  r"mode=limit limit=3 holders=1" % (s, holder(sems[0]), ts))
        self.take(sems[1], s, "limit=3")
        self.take(sems[2], s, "limit=3")
        self.queue_as(sems[3], s, "limit=3")
        status(s, r"STATUS %s held holder=%s token=%d since=\d+ waiters=1 queue=4 "
                  r"mode=limit limit=3 holders=3" % (s, holder(sems[0]), ts))
        for c in sems[:3]:
            c.close()
        self.granted(sems[3], s)
        for c in sems[:3]:
            self.d.wait_closed(c)
        status(s, r"STATUS %s held holder=%s token=\d+ since=\d+ waiters=0 queue=1 "
                  r"mode=limit limit=3 holders=1" % (s, holder(sems[3])))
        sems[3].close()
        self.d.wait_closed(sems[3])
        status(s, r"STATUS %s free holder=- token=- since=- waiters=0 queue=0" % s)
        status(x, r"STATUS %s free holder=- token=- since=- waiters=0 queue=0" % x)

    def test_stats_grants_by_mode(self):
        with Daemon(name="lockbrokerd-" + self._testMethodName) as d:
            x, r, s = self.name("x"), self.name("r"), self.name("s")
            a, b, c, e = (self.connect(d) for _ in range(4))
            before = stat_map(e)
            self.assertEqual([before["grants" + m] for m in ("", "_exclusive", "_shared",
                                                             "_limit")], ["0"] * 4)
            self.lock(a, x)
            a.send("LOCK %s\n" % x)                   # re-entrant: not a grant
            self.granted(a, x)
            self.take(a, r, "shared")
            self.take(b, r, "shared")
            b.send("TRYLOCK %s shared\n" % r)         # re-entrant
            self.granted(b, r)
            self.take(a, s, "limit=2")
            self.take(b, s, "limit=2")
            self.queue_as(c, s, "limit=2")
            e.send("LOCK %s limit=3\nTRYLOCK %s\n" % (s, x))
            e.expect(ERR_CONFLICT_LIMIT % 2, "BUSY %s" % x)
            e.send("STATS\n")
            lines = read_block(e)
            i = lines.index("STAT grants 5")
            self.assertEqual(lines[i:i + 4], ["STAT grants 5", "STAT grants_exclusive 1",
                                              "STAT grants_shared 2", "STAT grants_limit 2"])
            self.assertIn("STAT locks_held 5", lines)
            self.assertIn("STAT waiters 1", lines)
            self.assertIn("STAT errors 1", lines)
            self.unlock(a, s)
            self.granted(c, s)
            after = stat_map(e)
            self.assertEqual([after["grants" + m] for m in ("", "_exclusive", "_shared",
                                                            "_limit")], ["6", "1", "2", "3"])
            self.assertEqual((after["locks_held"], after["waiters"]), ("5", "0"))

    def test_disconnect_of_shared_holder_lets_writer_in(self):
        n = self.name()
        r1, r2, w = self.connect(), self.connect(), self.connect()
        self.take(r1, n, "shared")
        self.take(r2, n, "shared")
        self.queue_as(w, n)
        r1.close()
        self.d.wait_closed(r1)
        self.assert_silent(w)                   # r2 still reads
        r2.close()
        self.granted(w, n)

    def test_disconnect_of_semaphore_holder_lets_waiter_in(self):
        n = self.name()
        a, b, c, e = (self.connect() for _ in range(4))
        self.take(a, n, "limit=2")
        self.take(b, n, "limit=2")
        self.queue_as(c, n, "limit=2")
        self.queue_as(e, n, "limit=2")
        a.send("QUIT\n")
        a.expect("BYE")
        self.granted(c, n)
        self.assert_silent(e)
        b.close()
        self.granted(e, n)

    def test_disconnect_of_waiting_writer_lets_readers_behind_it_in(self):
        n = self.name()
        r1, w, r2, r3 = (self.connect() for _ in range(4))
        t1 = self.take(r1, n, "shared")
        self.queue_as(w, n)
        self.queue_as(r2, n, "shared")
        self.queue_as(r3, n, "shared")
        w.close()
        self.assertGreater(self.granted(r2, n), t1)
        self.granted(r3, n)
        self.unlock(r1, n)

    def test_bad_options(self):
        c = self.connect()
        n = self.name()
        cases = [
            ("LOCK %s shared limit=2", ERR_OPT_BOTH),
            ("LOCK %s limit=2 shared", ERR_OPT_BOTH),
            ("TRYLOCK %s shared limit=2", ERR_OPT_BOTH),
            ("LOCK %s limit=0", ERR_OPT_LIMIT),
            ("LOCK %s 10 limit=65536", ERR_OPT_LIMIT),
            ("TRYLOCK %s limit=", ERR_OPT_LIMIT),
            ("LOCK %s limit", ERR_OPT_LIMIT),
            # Right after LOCK's name an unknown word is a bad wait-ms (PROTOCOL.md).
            ("LOCK %s bogus=1", ERR_BAD_WAIT),
            ("LOCK %s 10 bogus=1", ERR_OPT_UNKNOWN),
            ("TRYLOCK %s bogus=1", ERR_OPT_UNKNOWN),
            ("LOCK %s shared shared", ERR_OPT_TWICE),
            # UNLOCK takes a token there (leases), not an option.
            ("UNLOCK %s shared", "ERR BAD_ARGS token must be an unsigned 64-bit integer"),
            ("STATUS %s shared", ERR_TOO_MANY),
        ]
        for req, err in cases:
            c.send(req % n + "\n")
            self.assertEqual(c.line(), err, "request %r" % req)
        self.ping(c)
        self.assert_free(n)                     # nothing was locked


# ================================================================= leases

class LeaseTests(SharedDaemonCase):
    """LOCK/TRYLOCK ... ttl=<ms>, UNLOCK <name> <token>, RENEW (daemon/lease.c
    keeps the leases, daemon/conn.c answers). A lease's expiry is waited for
    with a LOCK <name> <wait-ms> that is granted when it happens, or with the
    daemon's "expired" log line; never with a sleep."""

    # A ttl that ends soon, and a wait that outlasts it (stretched under valgrind).
    SHORT_TTL = max(100, int(scaled(0.3) * 1000))
    LONG_WAIT = int(scaled(1.0) * 1000)

    def lease(self, c, name, opts="", ttl=600000, cmd="LOCK"):
        """<cmd> name [opts] ttl=<ttl> that must be granted at once; returns the token."""
        c.send("%s %s %sttl=%d\n" % (cmd, name, opts + " " if opts else "", ttl))
        return self.granted(c, name)

    def queue_lease(self, c, name, opts="", ttl=600000, suffix=""):
        """Sends LOCK name [opts] ttl=<ttl> that must wait, and waits for the
        daemon's "lock NAME: lease:PEER queued" line (suffix: " (shared)", ...)."""
        d = c.daemon or self.d
        mark = d.log_mark()
        c.send("LOCK %s %sttl=%d\n" % (name, opts + " " if opts else "", ttl))
        d.wait_log(r"lock %s: lease:%s queued%s$" % (re.escape(name), re.escape(c.local),
                                                      re.escape(suffix)), since=mark)

    def end_lease(self, name, token):
        """UNLOCK name token from a fresh connection."""
        with self.d.client() as c:
            c.send("UNLOCK %s %d\n" % (name, token))
            c.expect("OK %s" % name)

    def log_index(self, regex, since=0):
        """Index of the first daemon log line from since on matching regex, or -1."""
        rx = re.compile(regex)
        for i, line in enumerate(list(self.d.lines)[since:], since):
            if rx.search(line):
                return i
        return -1

    def status(self, c, name):
        c.send("STATUS %s\n" % name)
        return c.line()

    def daemon_id(self):
        return self.d.find_log(r"info daemon id (\S+)$").group(1)

    def test_grant_logged_and_status_names_the_lease(self):
        n = self.name()
        a, q = self.connect(), self.connect()
        mark = self.d.log_mark()
        tok = self.lease(a, n, ttl=600000)
        self.d.wait_log(r"debug lease %s: granted to lease:%s, token %d, ttl 600000 ms$"
                        % (re.escape(n), re.escape(a.local), tok), since=mark)
        m = re.match(r"^STATUS %s held holder=%s/lease:%s token=%d since=\d+ waiters=0 "
                     r"queue=1 lease=(\d+)$" % (re.escape(n), re.escape(self.daemon_id()),
                                               re.escape(a.local), tok), self.status(q, n))
        self.assertIsNotNone(m)
        self.assertLessEqual(int(m.group(1)), 600000)     # the time left, not the ttl asked
        q.send("LOCKS %s\n" % n)
        m = re.match(r"^LOCK %s exclusive holder=\S+ label=- token=%d since=\d+ holders=1 "
                     r"waiters=0 lease=(\d+)$" % (re.escape(n), tok), q.line())
        self.assertIsNotNone(m)
        self.assertLessEqual(int(m.group(1)), 600000)
        q.expect("END")
        self.end_lease(n, tok)
        self.assertEqual(self.status(q, n),
                         "STATUS %s free holder=- token=- since=- waiters=0 queue=0" % n)

    def test_lease_outlives_its_connection(self):
        n, m = self.name(), self.name("quit")
        a, b = self.connect(), self.connect()
        tok = self.lease(a, n)
        a.close()
        self.d.wait_closed(a)
        self.assert_busy(n)
        # QUIT ends the connection, not its leases, either.
        tq = self.lease(b, m, cmd="TRYLOCK")
        b.send("QUIT\n")
        b.expect("BYE")
        b.expect_eof()
        self.assert_busy(m)
        self.end_lease(n, tok)
        self.end_lease(m, tq)
        self.assert_free(n)
        self.assert_free(m)

    def test_release_from_another_connection(self):
        n = self.name()
        a, b, w = self.connect(), self.connect(), self.connect()
        tok = self.lease(a, n)
        self.queue(w, n)
        b.send("UNLOCK %s %d\n" % (n, tok))
        b.expect("OK %s" % n)
        self.assertGreater(self.granted(w, n), tok)
        self.unlock(w, n)
        # The taking connection may end its lease by token too.
        t2 = self.lease(a, n)
        self.assertGreater(t2, tok)
        a.send("UNLOCK %s %d\n" % (n, t2))
        a.expect("OK %s" % n)
        self.assert_free(n)

    def test_wrong_token(self):
        n, other = self.name(), self.name("other")
        a, b = self.connect(), self.connect()
        tok = self.lease(a, n)
        for req in ("UNLOCK %s %d" % (n, tok + 1), "UNLOCK %s %d" % (n, tok - 1),
                    "UNLOCK %s 0" % n, "UNLOCK %s %d" % (other, tok),
                    "RENEW %s %d 1000" % (n, tok + 1), "RENEW %s %d 1000" % (other, tok)):
            for c in (a, b):
                c.send(req + "\n")
                self.assertEqual(c.line(), ERR_LEASE_NOT_HELD, "request %r" % req)
        self.assert_busy(n)
        self.end_lease(n, tok)
        # An ended lease's token is wrong from now on.
        b.send("UNLOCK %s %d\nRENEW %s %d 1000\n" % (n, tok, n, tok))
        b.expect(ERR_LEASE_NOT_HELD, ERR_LEASE_NOT_HELD)
        self.assert_free(n)

    def test_unlock_without_token_does_not_end_a_lease(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        tok = self.lease(a, n)
        a.send("UNLOCK %s\n" % n)
        a.expect(ERR_NOT_HELD)
        b.send("UNLOCK %s\n" % n)
        b.expect(ERR_NOT_HELD)
        self.assert_busy(n)
        self.end_lease(n, tok)
        self.assert_free(n)

    def test_own_hold_unlock_with_token(self):
        n = self.name()
        a, b = self.connect(), self.connect()
        tok = self.lock(a, n)
        a.send("UNLOCK %s %d\n" % (n, tok + 1))      # not its token, and no such lease
        a.expect(ERR_LEASE_NOT_HELD)
        b.send("UNLOCK %s %d\n" % (n, tok))          # its token, but not b's hold
        b.expect(ERR_LEASE_NOT_HELD)
        b.send("RENEW %s %d 1000\n" % (n, tok))      # a connection's hold is no lease
        b.expect(ERR_LEASE_NOT_HELD)
        self.assert_busy(n)
        a.send("UNLOCK %s %d\n" % (n, tok))
        a.expect("OK %s" % n)
        self.assert_free(n)
        # Re-entrant: one hold per UNLOCK, with the token as without.
        tok = self.lock(a, n)
        self.assertEqual(self.lock(a, n), tok)
        a.send("UNLOCK %s %d\n" % (n, tok))
        a.expect("OK %s" % n)
        self.assert_busy(n)
        a.send("UNLOCK %s %d\n" % (n, tok))
        a.expect("OK %s" % n)
        self.assert_free(n)

    def test_renew_keeps_the_lease_past_its_first_ttl(self):
        n = self.name()
        a, b, w = self.connect(), self.connect(), self.connect()
        tok = self.lease(a, n, ttl=self.SHORT_TTL)
        b.send("RENEW %s %d 600000\n" % (n, tok))       # from any connection
        b.expect("OK %s" % n)
        # The wait outlasts the first ttl: had RENEW not worked, w would get it.
        w.send("LOCK %s %d\n" % (n, self.LONG_WAIT))
        w.expect("TIMEOUT %s" % n)
        self.assertEqual(self.log_index(r"lease %s \(token %d\) expired" % (re.escape(n), tok)),
                         -1)
        a.send("RENEW %s %d 600000\n" % (n, tok))       # the same token, again
        a.expect("OK %s" % n)
        self.end_lease(n, tok)
        self.assert_free(n)

    def test_renew_shortens_the_lease(self):
        n = self.name()
        a, w = self.connect(), self.connect()
        tok = self.lease(a, n, ttl=86400000)
        a.send("RENEW %s %d %d\n" % (n, tok, self.SHORT_TTL))
        a.expect("OK %s" % n)
        w.send("LOCK %s %d\n" % (n, int(scaled(5.0) * 1000)))
        self.assertGreater(self.granted(w, n, timeout=scaled(10.0)), tok)

    def test_expiry_grants_the_next_waiter(self):
        n = self.name()
        a, w, b = self.connect(), self.connect(), self.connect()
        mark = self.d.log_mark()
        tok = self.lease(a, n, ttl=self.SHORT_TTL)
        a.close()                                        # nobody to tell of the end
        self.queue(w, n, "LOCK %s %d" % (n, int(scaled(5.0) * 1000)))
        t2 = self.granted(w, n, timeout=scaled(10.0))
        self.assertGreater(t2, tok)
        # The reply can overtake the daemon's log: wait for the grant's line,
        # then the expiry must be logged before it.
        grant_rx = r"lock %s: granted to %s, token %d$" % (re.escape(n), re.escape(w.local), t2)
        self.d.wait_log(grant_rx, since=mark)
        expired = self.log_index(r"info lease %s \(token %d\) expired$" % (re.escape(n), tok),
                                 mark)
        self.assertNotEqual(expired, -1, self.d.log_tail())
        self.assertLess(expired, self.log_index(grant_rx, mark))
        # The ended lease's token is not held any more.
        b.send("UNLOCK %s %d\nRENEW %s %d 1000\n" % (n, tok, n, tok))
        b.expect(ERR_LEASE_NOT_HELD, ERR_LEASE_NOT_HELD)
        self.assert_busy(n)
        self.unlock(w, n)

    def test_expired_lease_granted_to_a_waiting_lease(self):
        n = self.name()
        a, b, w = self.connect(), self.connect(), self.connect()
        tok = self.lease(a, n, ttl=self.SHORT_TTL)
        self.queue_lease(b, n, ttl=self.SHORT_TTL)
        t2 = self.granted(b, n, timeout=scaled(10.0))
        self.assertGreater(t2, tok)
        # b's lease has a ttl of its own, from its grant on.
        w.send("LOCK %s %d\n" % (n, int(scaled(5.0) * 1000)))
        self.assertGreater(self.granted(w, n, timeout=scaled(10.0)), t2)
        self.d.wait_log(r"lease %s \(token %d\) expired$" % (re.escape(n), t2))

    def test_waiting_lease_request_cancelled_by_closing(self):
        n = self.name()
        h, a, w = self.connect(), self.connect(), self.connect()
        self.lock(h, n)
        self.queue_lease(a, n)
        self.queue(w, n)
        a.close()
        self.d.wait_closed(a)
        self.unlock(h, n)
        # Had the lease been granted after all, w would wait for ever.
        self.granted(w, n)
        q = self.connect()
        self.assertRegex(self.status(q, n), r"^STATUS %s held holder=\S+/%s token=\d+ "
                         r"since=\d+ waiters=0 queue=1$" % (re.escape(n), re.escape(w.local)))
        self.unlock(w, n)
        self.assert_free(n)

    def test_lease_awaited_by_the_holder_itself_is_cancelled_at_close(self):
        # The connection waits (for ever) for a lease of a name it holds
        # itself; closing must cancel that wait before releasing its hold, or
        # the lease would be granted to nobody and keep the name.
        n = self.name()
        a, q = self.connect(), self.connect()
        leases = int(stat_map(q)["leases"])
        self.lock(a, n)
        self.queue_lease(a, n)
        self.assertEqual(int(stat_map(q)["leases"]), leases + 1)
        a.close()
        self.d.wait_closed(a)
        self.assert_free(n)
        self.assertEqual(int(stat_map(q)["leases"]), leases)

    def test_waiting_lease_request_times_out(self):
        n = self.name()
        h, a = self.connect(), self.connect()
        self.lock(h, n)
        a.send("LOCK %s 50 ttl=600000\nTRYLOCK %s ttl=600000\nLOCK %s 0 ttl=600000\n"
               % (n, n, n))
        a.expect("TIMEOUT %s" % n, "BUSY %s" % n, "TIMEOUT %s" % n)
        self.unlock(h, n)
        self.assert_free(n)

    def test_not_reentrant(self):
        n, s = self.name(), self.name("shared")
        a = self.connect()
        tok = self.lease(a, n)
        a.send("TRYLOCK %s ttl=600000\nLOCK %s 0 ttl=600000\n" % (n, n))
        a.expect("BUSY %s" % n, "TIMEOUT %s" % n)
        # The connection's own lock is not the lease's either.
        a.send("TRYLOCK %s\n" % n)
        a.expect("BUSY %s" % n)
        self.end_lease(n, tok)
        self.lock(a, n)
        a.send("TRYLOCK %s ttl=600000\n" % n)
        a.expect("BUSY %s" % n)
        self.unlock(a, n)
        # Shared leases fit together: a second one is another lease, another token.
        t1 = self.lease(a, s, "shared")
        t2 = self.lease(a, s, "shared")
        self.assertGreater(t2, t1)
        self.end_lease(s, t1)
        self.end_lease(s, t2)
        self.assert_free(s)

    def test_shared_and_limit_leases(self):
        s, p = self.name("s"), self.name("p")
        a, b, c, x, q = (self.connect() for _ in range(5))
        r1 = self.lease(a, s, "shared")
        r2 = self.lease(b, s, "shared", cmd="TRYLOCK")
        self.assertRegex(self.status(q, s), r"^STATUS %s held holder=\S+/lease:%s token=%d "
                         r"since=\d+ waiters=0 queue=2 mode=shared holders=2 lease=\d+$"
                         % (re.escape(s), re.escape(a.local), r1))
        x.send("TRYLOCK %s\n" % s)
        x.expect("BUSY %s" % s)
        self.queue(x, s)                                 # a writer waits for both leases
        self.end_lease(s, r1)
        self.assertTrue(x.silent())
        self.end_lease(s, r2)
        self.assertGreater(self.granted(x, s), r2)
        self.unlock(x, s)

        l1 = self.lease(a, p, "limit=2")
        l2 = self.lease(b, p, "limit=2 ", cmd="TRYLOCK")
        c.send("TRYLOCK %s limit=2 ttl=600000\nLOCK %s limit=3 ttl=600000\n" % (p, p))
        c.expect("BUSY %s" % p, ERR_CONFLICT_LIMIT % 2)
        self.queue_lease(c, p, "limit=2", suffix=" (limit)")
        self.end_lease(p, l1)
        l3 = self.granted(c, p)
        self.assertGreater(l3, l2)
        self.assertRegex(self.status(q, p),
                         r"^STATUS %s held .* mode=limit limit=2 holders=2 lease=\d+$"
                         % re.escape(p))
        self.end_lease(p, l2)
        self.end_lease(p, l3)
        self.assert_free(p)

    def test_bad_args(self):
        c = self.connect()
        n = self.name()
        cases = [
            ("LOCK %s ttl=99", ERR_BAD_TTL),
            ("TRYLOCK %s ttl=99", ERR_BAD_TTL),
            ("LOCK %s 10 ttl=86400001", ERR_BAD_TTL),
            ("LOCK %s shared ttl=", ERR_BAD_TTL),
            ("LOCK %s ttl=100 ttl=200", ERR_OPT_TWICE),
            ("RENEW %s", ERR_MISSING),
            ("RENEW %s 5", ERR_MISSING),
            ("RENEW", ERR_MISSING),
            ("RENEW %s 5 99", ERR_BAD_TTL_MS),
            ("RENEW %s 5 ttl=100", ERR_BAD_TTL_MS),
            ("RENEW %s x 100", ERR_BAD_TOKEN),
            ("RENEW %s 5 100 shared", ERR_TOO_MANY),
            ("UNLOCK %s 5 6", ERR_TOO_MANY),
            ("UNLOCK %s 18446744073709551616", ERR_BAD_TOKEN),
        ]
        for req, err in cases:
            c.send((req % n if "%s" in req else req) + "\n")
            self.assertEqual(c.line(), err, "request %r" % req)
        self.ping(c)
        self.assert_free(n)                     # nothing was locked

    def test_max_leases(self):
        conf = "[server]\nmax_leases = 2\n"
        with Daemon(config=conf, name="lockbrokerd-" + self._testMethodName) as d:
            self.d = d                          # for queue(), end_lease(), ...
            x, y = self.name("x"), self.name("y")
            a, b, c = self.connect(d), self.connect(d), self.connect(d)
            t1 = self.lease(a, x)
            self.queue_lease(b, x)              # awaited leases count too
            c.send("LOCK %s ttl=600000\nTRYLOCK %s ttl=600000\n" % (y, y))
            c.expect(ERR_LIMIT_LEASES % 2, ERR_LIMIT_LEASES % 2)
            self.lock(c, y)                     # a connection's lock is no lease
            self.unlock(c, y)
            self.end_lease(x, t1)
            t2 = self.granted(b, x)
            t3 = self.lease(c, y)
            c.send("LOCK %s ttl=600000\n" % self.name("z"))
            c.expect(ERR_LIMIT_LEASES % 2)
            self.end_lease(x, t2)
            # Lease requests that end without a lease give their place back.
            self.lock(a, x)
            b.send("TRYLOCK %s ttl=600000\nLOCK %s 20 ttl=600000\n" % (x, x))
            b.expect("BUSY %s" % x, "TIMEOUT %s" % x)
            self.queue_lease(b, x)
            c.send("LOCK %s ttl=600000\n" % self.name("z"))
            c.expect(ERR_LIMIT_LEASES % 2)
            b.close()
            d.wait_closed(b)
            self.lease(c, x + "-2", ttl=self.SHORT_TTL)
            c.send("LOCK %s ttl=600000\n" % self.name("z"))
            c.expect(ERR_LIMIT_LEASES % 2)
            # ... and so do expired ones.
            d.wait_log(r"lease %s \(token \d+\) expired$" % re.escape(x + "-2"))
            self.lease(c, self.name("z"))

            # SIGHUP applies a new cap; the leases held are kept.
            with open(d.config_path, "w") as f:
                f.write("[server]\nmax_leases = 3\n")
            mark = d.log_mark()
            d.send_signal(signal.SIGHUP)
            d.wait_log(r"reloaded: .*max_leases 3", since=mark)
            self.lease(c, self.name("w"))
            c.send("LOCK %s ttl=600000\n" % self.name("v"))
            c.expect(ERR_LIMIT_LEASES % 3)
            self.end_lease(y, t3)
            self.lease(c, self.name("v"))
            stats = stat_map(c)
            self.assertEqual(stats["leases"], "3")

    def test_stats_counters(self):
        with Daemon(name="lockbrokerd-" + self._testMethodName) as d:
            self.d = d
            a, b, e = self.connect(d), self.connect(d), self.connect(d)
            before = stat_map(e)
            self.assertEqual([before[k] for k in ("leases", "leases_granted", "leases_released",
                                                  "leases_expired")], ["0"] * 4)
            r, x, h = self.name("released"), self.name("expired"), self.name("held")
            tr = self.lease(a, r)
            self.end_lease(r, tr)
            tx = self.lease(a, x, ttl=self.SHORT_TTL)
            a.send("RENEW %s %d %d\n" % (x, tx, self.SHORT_TTL))
            a.expect("OK %s" % x)
            self.lease(a, h)
            self.queue_lease(b, h)              # awaited
            # Refusals are no leases.
            e.send("TRYLOCK %s ttl=600000\nUNLOCK %s 1\nLOCK %s limit=2 ttl=600000\n"
                   % (h, h, h))
            e.expect("BUSY %s" % h, ERR_LEASE_NOT_HELD, ERR_CONFLICT_LOCK)
            d.wait_log(r"info lease %s \(token %d\) expired$" % (re.escape(x), tx))
            after = stat_map(e)
            self.assertEqual([after[k] for k in ("leases", "leases_granted", "leases_released",
                                                 "leases_expired")], ["2", "3", "1", "1"])
            self.assertEqual((after["locks_held"], after["waiters"]), ("1", "1"))
            self.assertEqual(after["cmd_renew"], "1")
            self.assertEqual(after["cmd_unlock"], "2")
            self.assertEqual(after["errors"], "2")


# ======================================================= restart, signals

class RestartTests(Case):

    def test_tokens_increase_across_restart(self):
        d = Daemon(name="lockbrokerd-restart")
        self.addCleanup(d.kill)
        d.start()
        n = self.name()
        c = d.client()
        t1 = self.lock(c, n)
        c.close()
        d.restart()
        c = d.client()
        t2 = self.lock(c, n)
        self.unlock(c, n)
        t3 = self.lock(c, n)
        c.close()
        d.stop()
        self.assertLess(t1, t2)
        self.assertLess(t2, t3)


class SignalTests(Case):

    def busy_daemon(self, name):
        """A daemon with holders, waiters (with and without deadline), a
        re-entrant holder and held-back pipelined requests."""
        d = Daemon(name=name)
        self.addCleanup(d.kill)
        d.start()
        x, y = self.name("x"), self.name("y")
        a, b, c, e = (self.connect(d) for _ in range(4))
        self.lock(a, x)
        self.lock(a, y)
        self.lock(a, y)
        self.lock(b, self.name("b"))
        self.queue(b, x)
        self.queue(c, y, "LOCK %s 600000\nPING\nLOCK %s" % (y, x))
        self.queue(e, x)
        return d, [a, b, c, e]

    def test_sigterm_with_holders_and_waiters_exits_0(self):
        d, clients = self.busy_daemon("lockbrokerd-sigterm")
        d.stop()                                # asserts exit code 0
        for c in clients:
            c.read_to_eof()
        self.assertIsNotNone(d.find_log(r"caught Terminated"))

    def test_sigterm_with_one_holder_exits_0(self):
        d = Daemon(name="lockbrokerd-sigterm-holder")
        self.addCleanup(d.kill)
        d.start()
        a = self.connect(d)
        self.lock(a, self.name())
        d.stop()
        a.read_to_eof()

    def test_sigterm_with_one_holder_and_one_waiter_exits_0(self):
        # Closing the holder at shutdown grants the lock to the waiter, which
        # is closed right after: nothing of it may leak (valgrind run).
        d = Daemon(name="lockbrokerd-sigterm-waiter")
        self.addCleanup(d.kill)
        d.start()
        a, b = self.connect(d), self.connect(d)
        self.lock(a, self.name())
        self.queue(b, self.name())
        d.stop()
        a.read_to_eof()
        b.read_to_eof()

    def test_sigint_with_holders_and_waiters_exits_0(self):
        d, clients = self.busy_daemon("lockbrokerd-sigint")
        d.stop(sig=signal.SIGINT)
        for c in clients:
            c.read_to_eof()


# ============================================================ unix socket

class UnixSocketTests(Case):

    def unix_daemon(self, extra="", name="lockbrokerd-unix"):
        d = Daemon(config=lambda tmp: "[server]\nunix_socket = %s/lb.sock\n%s"
                   % (tmp, extra), name=name)
        self.addCleanup(d.kill)
        return d

    def test_unix_socket(self):
        d = self.unix_daemon().start()
        path = os.path.join(d.tmpdir, "lb.sock")
        self.assertEqual(d.unix_path, path)
        st = os.stat(path)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)   # the default mode
        n = self.name()
        u, u2 = self.connect(d, unix=True), self.connect(d, unix=True)
        t = self.connect(d)
        self.ping(u)
        self.lock(u, n)
        t.send("TRYLOCK %s\n" % n)                     # one lock table for both
        t.expect("BUSY %s" % n)
        self.queue(u2, n)
        self.unlock(u, n)
        self.granted(u2, n)
        u2.close()                                      # closing releases
        self.lock(t, n, wait=scaled(5000))
        u.send("QUIT\n")
        u.expect("BYE")
        u.expect_eof()
        d.stop()
        self.assertFalse(os.path.exists(path), "socket file left behind")

    def test_unix_socket_mode(self):
        for mode in ("0600", "0666"):
            d = self.unix_daemon("unix_socket_mode = %s\n" % mode).start()
            st = os.stat(d.unix_path)
            self.assertEqual(stat.S_IMODE(st.st_mode), int(mode, 8))
            self.ping(self.connect(d, unix=True))
            d.stop()

    def test_stale_socket_file_is_replaced(self):
        d = self.unix_daemon()
        path = os.path.join(d.tmpdir, "lb.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)                                    # a dead daemon's socket
        s.close()
        d.start()
        self.ping(self.connect(d, unix=True))
        d.stop()

    def test_live_socket_is_not_stolen(self):
        d1 = self.unix_daemon(name="lockbrokerd-unix1").start()
        c = self.connect(d1, unix=True)
        r = run_daemon(["-l", "127.0.0.1:0", "-c", d1.config_path])
        check_failure_exit(r.returncode)
        self.assertIn("in use", r.stderr)
        self.ping(c)
        self.ping(self.connect(d1, unix=True))          # still d1's socket
        d1.stop()

    def test_path_that_is_not_a_socket(self):
        d = self.unix_daemon()
        with open(os.path.join(d.tmpdir, "lb.sock"), "w") as f:
            f.write("precious\n")
        r = run_daemon(["-l", "127.0.0.1:0", "-c", d.config_path])
        check_failure_exit(r.returncode)
        with open(os.path.join(d.tmpdir, "lb.sock")) as f:
            self.assertEqual(f.read(), "precious\n")


# ================================================================== IPv6

class IPv6Tests(Case):

    def test_ipv6_loopback(self):
        if not lbharness.can_bind("::1"):
            lbharness.skip("ipv6", "no ::1 on this machine")
        with Daemon(listen="[::1]:0", name="lockbrokerd-ipv6") as d:
            self.assertEqual(d.family, socket.AF_INET6)
            self.assertEqual(d.host, "::1")
            a, b = self.connect(d), self.connect(d)
            self.assertTrue(a.local.startswith("[::1]:"), a.local)
            n = self.name()
            self.ping(a)
            self.lock(a, n)
            self.queue(b, n)                    # matches the daemon's "[::1]:PORT"
            self.unlock(a, n)
            self.granted(b, n)


# ================================================================== dead peers

def ss_seconds(text):
    """ss's spelling of a timer ("119min", "1min30sec", "29sec", "5.123ms", "668ms")
    in seconds."""
    m = re.fullmatch(r"(?:(\d+)min)?(?:(\d+)(?:sec|\.))?(?:(\d+)ms)?", text)
    if not m or not text:
        raise ValueError("not an ss timer: %r" % text)
    minutes, secs, ms = (int(g or 0) for g in m.groups())
    return minutes * 60 + secs + ms / 1000.0


class KeepaliveTests(Case):
    """Accepted TCP connections carry the configured keepalive (daemon/server.c,
    tcp_tune), seen from outside with ss. The kernel's default would show
    timer:(keepalive,119min,0)."""

    def setUp(self):
        if not shutil.which("ss"):
            lbharness.skip("tools", "no ss command (iproute2) to read the keepalive timer")

    def keepalive_timer(self, d, c):
        """Seconds until the keepalive timer of the daemon's end of c fires."""
        port = c.sock.getsockname()[1]
        out = subprocess.run(["ss", "-tnoH", "state", "established",
                              "( sport = :%d and dport = :%d )" % (d.port, port)],
                             capture_output=True, text=True, timeout=TIMEOUT).stdout
        m = re.search(r"timer:\(keepalive,([^,]+),\d+\)", out)
        self.assertTrue(m, "no keepalive timer on the daemon's end of %s:\n%s" % (c.local, out))
        return ss_seconds(m.group(1))

    def test_default_keepalive_is_30s(self):
        with Daemon(name="lockbrokerd-keepalive") as d:
            c = self.connect(d)
            self.ping(c)
            self.assertLessEqual(self.keepalive_timer(d, c), 30)

    def test_sighup_applies_to_new_connections(self):
        d = Daemon(config="[server]\ntcp_keepalive_idle_s = 7\n", verbose=False,
                   name="lockbrokerd-keepalive-reload").start()
        self.addCleanup(d.stop)
        old = self.connect(d)
        self.ping(old)
        self.assertLessEqual(self.keepalive_timer(d, old), 7)
        with open(d.config_path, "w") as f:
            f.write("[server]\ntcp_keepalive_idle_s = 600\n")
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reloaded: .*, tcp_keepalive_idle_s 600, tcp_keepalive_interval_s 10, "
                   r"tcp_keepalive_count 3, tcp_user_timeout_ms 60000(?:,|$)", since=mark)
        new = self.connect(d)
        self.ping(new)
        self.assertGreater(self.keepalive_timer(d, new), 60)
        self.assertLessEqual(self.keepalive_timer(d, old), 7)      # keeps its own


class DeadPeerTests(Case):
    """A client host that dies without a FIN or RST (power, network) loses its
    locks once keepalive or the user timeout gives up on it, not hours later.

    The client lives in a network namespace joined by a veth pair
    (lbharness.NetNamespace); taking its end of the pair down drops every
    packet silently, as a dead host would. Needs root; skipped otherwise."""

    def setUp(self):
        try:
            self.ns = lbharness.NetNamespace()
        except lbharness.NetNamespaceUnavailable as e:
            lbharness.skip("root", "cannot make a network namespace to play a dead client "
                           "host: %s" % e)
        self.addCleanup(self.ns.delete)

    def start(self, text):
        # The veth address is not loopback: without users that takes allow_anonymous.
        d = Daemon(config="[server]\nallow_anonymous = yes\n" + text,
                   listen=self.ns.host_ip + ":0",
                   name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)
        return d

    def dead_client(self, d):
        try:
            c = self.ns.client(d)
        except lbharness.NetNamespaceUnavailable as e:
            lbharness.skip("root", "cannot open a socket in the network namespace: %s" % e)
        self.addCleanup(c.close)
        return c

    def wait_gone(self, d, c, mark):
        """The daemon says the peer stopped answering, then closes it."""
        d.wait_log(r" \(%s\): peer stopped answering \(keepalive/user timeout\), closing: "
                   % re.escape(c.local), timeout=scaled(30), since=mark)
        d.wait_closed(c)

    def test_silent_holder_is_dropped_by_keepalive(self):
        # No user timeout: keepalive alone, 1 s idle + 2 probes 1 s apart.
        d = self.start("[server]\ntcp_keepalive_idle_s = 1\ntcp_keepalive_interval_s = 1\n"
                       "tcp_keepalive_count = 2\ntcp_user_timeout_ms = 0\n")
        dead, alive, n = self.dead_client(d), self.connect(d), self.name()
        self.lock(dead, n)
        alive.send("TRYLOCK %s\n" % n)
        alive.expect("BUSY %s" % n)
        mark = d.log_mark()
        self.ns.cut()
        self.wait_gone(d, dead, mark)
        d.wait_log(r"\(%s\): closed, 1 holds and waits released" % re.escape(dead.local),
                   since=mark)
        alive.send("TRYLOCK %s\n" % n)
        self.granted(alive, n)

    def test_unacknowledged_grant_is_dropped_by_user_timeout(self):
        # Keepalive never probes a connection with data in flight, and is an
        # hour away here: only the user timeout can end this one.
        d = self.start("[server]\ntcp_keepalive_idle_s = 3600\ntcp_user_timeout_ms = 2000\n")
        alive, n = self.connect(d), self.name()
        self.lock(alive, n)
        dead = self.dead_client(d)
        self.queue(dead, n)
        mark = d.log_mark()
        self.ns.cut()
        self.unlock(alive, n)                   # "OK" goes to dead, never acknowledged
        d.wait_log(r"lock %s: granted to %s" % (re.escape(n), re.escape(dead.local)), since=mark)
        self.wait_gone(d, dead, mark)
        alive.send("TRYLOCK %s\n" % n)
        self.granted(alive, n)


# ===================================================== config and flags

GOOD_CONFIG = """\
; every key, non-default values
[server]
listen = 127.0.0.1:0
unix_socket =
unix_socket_mode = 0600
max_clients = 100
max_line = 2048
max_locks_per_client = 10
max_leases = 50
tcp_keepalive_idle_s = 60
tcp_keepalive_interval_s = 5
tcp_keepalive_count = 9
tcp_user_timeout_ms = 0

[zookeeper]
hosts =
root = /lockbroker-test
session_timeout_ms = 5000
lease_skew_ms = 250
local_handoff = 0

[log]
level = debug
"""


class ConfigTests(Case):

    def test_check_good_config(self):
        r = run_daemon(["-t"], config=GOOD_CONFIG)
        self.assertEqual(r.returncode, 0, r)
        self.assertIn("configuration OK", r.stdout)

    def test_check_without_config(self):
        r = run_daemon(["-t"])
        self.assertEqual(r.returncode, 0, r)

    def test_check_sample_config(self):
        path = os.path.join(srcdir(), "conf", "lockbrokerd.conf")
        r = run_daemon(["-t", "-c", path])
        self.assertEqual(r.returncode, 0, r)

    BAD_CONFIGS = [
        # (text, line, message)
        ("[server]\nmax_clients = 10\nbogus_key = 1\n", 3, "unknown key 'bogus_key' in [server]"),
        ("; comment\n[server]\n\nmax_clients = lots\n", 4,
         "max_clients: 'lots' is not an integer from 1 to 1000000"),
        ("[server]\nmax_clients = 0\n", 2, "max_clients"),
        ("[server]\nmax_clients = -5\n", 2, "max_clients"),
        ("[server]\nmax_line = 255\n", 2, "max_line: '255' is not an integer from 256 to 1048576"),
        ("[server]\nmax_line = 1048577\n", 2, "max_line"),
        ("[server]\nmax_locks_per_client = 0\n", 2, "max_locks_per_client"),
        ("[server]\nmax_locks_per_client = 10x\n", 2, "max_locks_per_client"),
        ("[server]\nlisten = localhost:7411\n", 2,
         "listen: 'localhost:7411': host names are not accepted; use 127.0.0.1:7411"),
        ("[server]\nlisten = 127.0.0.1\n", 2, "listen"),
        ("[server]\nunix_socket_mode = 0999\n", 2, "unix_socket_mode"),
        ("[server]\ntcp_keepalive_idle_s = 0\n", 2,
         "tcp_keepalive_idle_s: '0' is not an integer from 1 to 32767"),
        ("[server]\ntcp_keepalive_interval_s = 32768\n", 2, "tcp_keepalive_interval_s"),
        ("[server]\ntcp_keepalive_count = 128\n", 2,
         "tcp_keepalive_count: '128' is not an integer from 1 to 127"),
        ("[server]\ntcp_user_timeout_ms = 86400001\n", 2, "tcp_user_timeout_ms"),
        ("[server]\nunix_socket = /%s/lb.sock\n" % ("d" * 120), 2, "unix_socket"),
        ("\n\n[bogus]\nkey = 1\n", 4, "unknown section [bogus]"),
        ("[zookeeper]\nsession_timeout_ms = 999\n", 2, "session_timeout_ms"),
        ("[zookeeper]\nroot = relative/path\n", 2, "root"),
        ("[zookeeper]\nroot = /a/../b\n", 2, "root"),
        ("[zookeeper]\nbogus = 1\n", 2, "unknown key 'bogus' in [zookeeper]"),
        ("[log]\nlevel = loud\n", 2, "level: 'loud' is not one of error, warn, info, debug"),
        ("[server]\nmax_clients = 5\nthis line is not ini\n", 3,
         "'this line is not ini' has no '=' (write key = value)"),
        ("[server]\nlisten 127.0.0.1:7411\n", 2,
         "'listen 127.0.0.1:7411' has no '=' (write key = value)"),
        ("[server\nmax_clients = 5\n", 1, ""),
        ("[server]\nlisten = 127.0.0.1:0%s\n" % (" " * 300), 2, "longer than"),
    ]

    # Starting (not just -t) with these too: the daemon must exit, not run.
    START_TOO = ("bogus_key", "lots", "[bogus]", "not ini")

    def test_bad_configs(self):
        jobs = []
        for text, line, msg in self.BAD_CONFIGS:
            jobs.append((text, line, msg, ["-t"]))
            if any(word in text for word in self.START_TOO):
                jobs.append((text, line, msg, ["-l", "127.0.0.1:0"]))
        results = run_parallel(lambda job: run_daemon(job[3], config=job[0]), jobs)
        for (text, line, msg, flags), r in zip(jobs, results):
            with self.subTest(config=text, flags=flags):
                if isinstance(r, Exception):        # e.g. it started and kept running
                    self.fail("%r did not fail: %r" % (text, r))
                check_failure_exit(r.returncode)
                where = "%s:%d:" % (r.config_path, line)
                self.assertIn(where, r.stderr, r)
                self.assertIn(msg, r.stderr, r)
                self.assertNotIn("configuration OK", r.stdout)
                self.assertNotIn("ready", r.stderr)

    def test_missing_config_file(self):
        r = run_daemon(["-t", "-c", "/nonexistent/lockbrokerd.conf"])
        check_failure_exit(r.returncode)
        self.assertIn("/nonexistent/lockbrokerd.conf", r.stderr)
        self.assertIn("cannot open", r.stderr)

    def test_config_is_a_directory(self):
        # A directory read as an empty file: -t said "configuration OK".
        path = lbharness.make_tmpdir()
        for flags in (["-t"], ["-l", "127.0.0.1:0"]):
            with self.subTest(flags=flags):
                r = run_daemon(flags + ["-c", path])
                check_failure_exit(r.returncode)
                self.assertIn("lockbrokerd: %s: is a directory\n" % path, r.stderr)
                self.assertNotIn("configuration OK", r.stdout)
                self.assertNotIn("ready", r.stderr)

    def test_listen_host_name_flag(self):
        # No name is looked up for listening; the error says what to write.
        for flags in (["-t"], []):
            with self.subTest(flags=flags):
                r = run_daemon(flags + ["-l", "localhost:7411"])
                check_failure_exit(r.returncode)
                self.assertIn("lockbrokerd: listen: 'localhost:7411': host names are not "
                              "accepted; use 127.0.0.1:7411 or [::1]:7411\n", r.stderr)
                self.assertNotIn("configuration OK", r.stdout)
                self.assertNotIn("ready", r.stderr)

    def test_zk_auth_file_checked_at_start(self):
        d = lbharness.make_tmpdir()

        def auth(name, text, mode):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, mode)
            return "[zookeeper]\nhosts = 127.0.0.1:1/lb\nauth = %s\n" % path, path

        good, _ = auth("good", "lockbroker:s3cret\n", 0o640)
        r = run_daemon(["-t"], config=good)
        self.assertEqual(r.returncode, 0, r)
        for name, text, mode, why in (
                ("open", "lockbroker:s3cret\n", 0o644,
                 "others may read or write it (mode 0644); chmod o-rwx "),
                ("nouser", "s3cret\n", 0o600, "not user:password"),
                ("twolines", "lockbroker:s3cret\nmore\n", 0o600, "more than one line"),
                ("long", "lockbroker:" + "x" * 300, 0o600, "longer than 255 bytes")):
            config, path = auth(name, text, mode)
            for flags in (["-t"], ["-l", "127.0.0.1:0"]):
                with self.subTest(file=name, flags=flags):
                    r = run_daemon(flags, config=config)
                    check_failure_exit(r.returncode)
                    self.assertIn("lockbrokerd: [zookeeper] auth: %s: %s" % (path, why),
                                  r.stderr)
                    self.assertNotIn("s3cret", r.stderr)
                    self.assertNotIn("configuration OK", r.stdout)
                    self.assertNotIn("ready", r.stderr)
        r = run_daemon(["-t"], config="[zookeeper]\nauth = %s/missing\n" % d)
        check_failure_exit(r.returncode)
        self.assertIn("lockbrokerd: [zookeeper] auth: %s/missing: cannot open: " % d, r.stderr)

    def test_usage_says_ip_port(self):
        r = run_daemon(["-h"])
        self.assertIn("-l IP:PORT", r.stdout)
        self.assertNotIn("HOST:PORT", r.stdout)

    def test_bad_listen_flag(self):
        jobs = [(listen, ["-t"]) for listen in (
            "nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:http",
            "localhost:0", "", "[::1]", "[::1]:0x", "1.2.3.4.5:0", ":7411", "127.0.0.1:-1",
            "127.0.0.1:4294967297")]
        jobs += [(listen, []) for listen in ("nonsense", "127.0.0.1:99999", "[::1]")]
        results = run_parallel(lambda job: run_daemon(job[1] + ["-l", job[0]]), jobs)
        for (listen, flags), r in zip(jobs, results):
            with self.subTest(listen=listen, flags=flags):
                if isinstance(r, Exception):
                    self.fail("-l %r did not fail: %r" % (listen, r))
                check_failure_exit(r.returncode)
                self.assertIn("'%s'" % listen, r.stderr)
                self.assertNotIn("configuration OK", r.stdout)

    def test_unbracketed_ipv6_listen_flag_is_refused(self):
        # "[::1]:7411" is the IPv6 form; "::1:7411" would be read as the
        # address ::1:7411 without a port, and "::1" as [::1] on a random port.
        for listen in ("::1:7411", "::1"):
            with self.subTest(listen=listen):
                r = run_daemon(["-t", "-l", listen])
                check_failure_exit(r.returncode, "lockbrokerd -t -l %s" % listen)
                self.assertIn("'%s'" % listen, r.stderr)

    def test_listen_address_not_available(self):
        r = run_daemon(["-l", "192.0.2.1:0"],           # TEST-NET-1, not ours
                       config="[server]\nallow_anonymous = yes\n")
        check_failure_exit(r.returncode)
        self.assertIn("192.0.2.1:0", r.stderr)
        self.assertNotIn("ready", r.stderr)

    def test_bad_usage(self):
        for argv in (["-x"], ["extra-argument"], ["-c"], ["-l"]):
            with self.subTest(argv=argv):
                r = run_daemon(argv)
                check_failure_exit(r.returncode)
                self.assertIn("Usage:", r.stderr)

    def test_help_and_version(self):
        for flag in ("-h", "--help"):
            r = run_daemon([flag])
            self.assertEqual(r.returncode, 0, r)
            self.assertIn("Usage: lockbrokerd", r.stdout)
        for flag in ("-V", "--version"):
            r = run_daemon([flag])
            self.assertEqual(r.returncode, 0, r)
            self.assertRegex(r.stdout, r"^lockbrokerd \S+\n$")

    def test_empty_zookeeper_hosts_flag_is_refused(self):
        # A unit's `-z $ZK` with $ZK unset: not a daemon with private locks.
        for value in ("", "  "):
            with self.subTest(value=value):
                r = run_daemon(["-z", value, "-t"])
                self.assertEqual(r.returncode, 2, r)
                self.assertIn("lockbrokerd: -z: empty ZooKeeper hosts", r.stderr)
                self.assertNotIn("configuration OK", r.stdout)

    def test_flag_overrides_file(self):
        conf = "[server]\nlisten = 192.0.2.1:7411\nallow_anonymous = yes\n"  # cannot be bound
        r = run_daemon([], config=conf)
        check_failure_exit(r.returncode)                 # the file is used ...
        with Daemon(config=conf, listen="127.0.0.1:0") as d:     # ... but -l wins
            self.assertEqual(d.host, "127.0.0.1")
            self.ping(self.connect(d))

    def test_file_overrides_defaults(self):
        conf = "[server]\nlisten = 127.0.0.1:0\n[log]\nlevel = debug\n"
        with Daemon(config=conf, listen=None, verbose=False) as d:
            self.assertEqual(d.host, "127.0.0.1")
            self.assertNotEqual(d.port, 7411)
            a, b = self.connect(d), self.connect(d)
            n = self.name()
            self.lock(a, n)
            self.queue(b, n)                    # a debug line, without -v
            self.unlock(a, n)
            self.granted(b, n)


if __name__ == "__main__":
    unittest.main(verbosity=2)
