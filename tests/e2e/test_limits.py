#!/usr/bin/env python3
"""End-to-end tests of lockbrokerd at its limits, in embedded mode: memory
running out (ERR INTERNAL), descriptors running out (accept() paused,
daemon/accept_pause.h), the per-daemon watch limit (WATCHES_MAX in
daemon/watch.h; PROTOCOL.md, WATCH), long listings within the unread
output bound (PROTOCOL.md, LOCKS and Transport), the quotas of what a
client can leave behind (PROTOCOL.md, Quotas) and the log's budget per kind
of line ([log] rate_limit, daemon/log.h). The per-connection limits are in
test_embedded.py.

Not run under valgrind (tests/e2e/valgrind_embedded.sh): the memory test
limits the daemon's address space, which valgrind's own allocator does not
survive. Nothing sleeps to synchronise: each step waits for a reply.
"""

import os
import re
import resource
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lbharness import Client, Daemon, TIMEOUT, read_stats, scaled  # noqa: E402
from test_auth import PASSWORDS, users_text, write_users  # noqa: E402

ERR_PER_ADDRESS = ("ERR LIMIT too many connections from this address (at most %d); "
                   "try again later")

ERR_NOMEM = "ERR INTERNAL out of memory"
WATCHES_MAX = 10000            # daemon/watch.h
WATCHES_PER_CONN_MAX = 100


def vm_rss(pid):
    """The process's resident memory in bytes (VmRSS of /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def vm_size(pid):
    """The process's address space in bytes (VmSize of /proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize for pid %d" % pid)


class OutOfMemoryTests(unittest.TestCase):
    """The daemon's address space is capped (RLIMIT_AS, set from outside
    with prlimit) at what it uses now: once its heap is used up, a request
    that needs more memory is answered ERR INTERNAL, and the daemon goes on
    serving; with the cap lifted it grants again."""

    def setUp(self):
        self.d = Daemon(config="[server]\nmax_locks_per_client = 1000000\n",
                        name="lockbrokerd-oom").start()
        self.addCleanup(self.d.stop)
        self.limit = resource.prlimit(self.d.pid, resource.RLIMIT_AS)
        self.addCleanup(self.lift)

    def lift(self):
        if self.d.running:
            resource.prlimit(self.d.pid, resource.RLIMIT_AS, self.limit)

    def test_requests_that_need_memory_get_err_internal(self):
        c = self.d.client()
        self.addCleanup(c.close)
        self.assertEqual(c.request("PING"), "PONG")
        resource.prlimit(self.d.pid, resource.RLIMIT_AS,
                         (vm_size(self.d.pid), self.limit[1]))
        # One request at a time: the replies reuse the buffers the last one
        # freed, and each new lock takes a little more of the heap.
        prefix = "n" * 180
        for i in range(100000):
            line = c.request("LOCK %s-%06d" % (prefix, i))
            if not line.startswith("OK "):
                break
        self.assertEqual(line, ERR_NOMEM, "after %d grants" % i)
        self.assertGreater(i, 0, "nothing granted before the cap was reached")
        stopped = "%s-%06d" % (prefix, i)
        # Every request that must allocate says so, and nothing is left held.
        for req in ("LOCK %s" % stopped,
                    "TRYLOCK t-%s" % ("c" * 150),
                    "LOCK l-%s ttl=10000" % ("d" * 150),
                    "LOCK s1-%s,s2-%s 0" % ("a" * 150, "b" * 150),
                    "WATCH w-%s" % ("x" * 150)):
            self.assertEqual(c.request(req), ERR_NOMEM, req)
        # Requests that need no new memory are served meanwhile.
        self.assertEqual(c.request("PING"), "PONG")
        self.assertEqual(c.request("STATUS %s" % stopped),
                         "STATUS %s free holder=- token=- since=- waiters=0 queue=0" % stopped)
        self.assertEqual(c.request("UNLOCK %s-%06d" % (prefix, 0)), "OK %s-%06d" % (prefix, 0))
        self.lift()
        self.assertRegex(c.request("LOCK %s" % stopped), r"^OK %s \d+$" % stopped)
        self.assertRegex(c.request("LOCK l-%s ttl=10000" % ("d" * 150)), r"^OK l-d+ \d+$")
        self.assertRegex(c.request("WATCH w-%s" % ("x" * 150)), r"^OK w-x+$")
        self.assertRegex(c.line(), r"^EVENT w-x+ free$")
        st = read_stats(c)
        self.assertEqual(st["errors"], "6")       # the six ERR INTERNAL replies
        self.assertEqual(st["locks_held"], str(i + 1))   # i granted, one released, two more


def cpu_seconds(pid):
    """User and system CPU time the process has used (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def nofile_leaving(pid, free):
    """The lowest open-file limit that leaves the process `free` descriptor
    numbers unused below it."""
    used = set(int(fd) for fd in os.listdir("/proc/%d/fd" % pid))
    limit = 0
    while free > 0 or limit in used:
        if limit not in used:
            free -= 1
        limit += 1
    return limit


class DescriptorExhaustionTests(unittest.TestCase):
    """The daemon's open-file limit is lowered from outside (prlimit) to
    leave it two descriptors. Once they are taken, every listener has a
    connection waiting that accept() cannot take (EMFILE): the daemon used
    to retry at once, for ever, at full CPU and with a log line each time."""

    FREE = 2

    def setUp(self):
        self.d = Daemon(config="[server]\nmax_clients = 64\nmetrics_listen = 127.0.0.1:0\n",
                        name="lockbrokerd-nofile").start()
        self.addCleanup(self.d.stop)
        m = self.d.wait_log(r"metrics: serving /metrics and /healthz on http://(\S+):(\d+)$")
        self.http = (m.group(1), int(m.group(2)))
        self.socks = []

    def connect(self, addr, send):
        """A connection the kernel took (the daemon may not have), with send sent."""
        c = Client.tcp(*addr)
        self.socks.append(c)
        c.send(send)
        return c

    def no_reply(self, c):
        """Waits a while for a reply that should not come; True if none came."""
        return not c._fill(time.monotonic() + scaled(0.5))

    def test_a_daemon_out_of_descriptors_waits_quietly_and_recovers(self):
        pid = self.d.pid
        hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (nofile_leaving(pid, self.FREE), hard))
        lock_port = (self.d.host, self.d.port)
        # Take the free descriptors; the next connection is not accepted.
        served = []
        while True:
            c = self.connect(lock_port, "PING\n")
            if self.no_reply(c):
                break
            c.expect("PONG")
            served.append(c)
            self.assertLessEqual(len(served), self.FREE + 3, "the limit did not bite")
        self.d.wait_log(r"accept.*: Too many open files")
        # At the limit: a few seconds of connections to both ports, each
        # waiting half a second for a reply that does not come. A daemon
        # that retries accept() at once spends all that time on the CPU.
        mark = self.d.log_mark()
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        for _ in range(4):
            self.assertTrue(self.no_reply(self.connect(lock_port, "PING\n")))
            self.assertTrue(self.no_reply(
                self.connect(self.http, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")))
        cpu, elapsed = cpu_seconds(pid) - cpu0, time.monotonic() - t0
        self.assertLess(cpu, elapsed / 4, "%.2f s of CPU in %.2f s at the limit" % (cpu, elapsed))
        with self.d._cond:
            said = [l for l in self.d.lines[mark:] if "accept" in l]
        self.assertLessEqual(len(said), 2, "\n".join(said[:5]))
        self.assertGreater(int(read_stats(served[0])["accept_pauses"]), 0)
        # Descriptors freed: new clients get in on both ports.
        for c in self.socks:
            c.close()
        with self.d.client() as c:
            self.assertEqual(c.request("PING"), "PONG")
        with Client.tcp(*self.http) as c:
            c.send("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertRegex(c.read_to_eof(), rb"^HTTP/1\.1 200 OK\r\n(.|\n)*\r\n\r\nok\n$")


class PerAddressTests(unittest.TestCase):
    """max_clients_per_address: one address cannot take every slot of
    max_clients (issue 41); other addresses and the Unix socket get in."""

    N = 3

    def setUp(self):
        def config(tmpdir):
            self.sock_path = os.path.join(tmpdir, "lb.sock")
            return ("[server]\nmax_clients_per_address = %d\nunix_socket = %s\n"
                    % (self.N, self.sock_path))
        self.d = Daemon(config=config, name="lockbrokerd-peraddr").start()
        self.addCleanup(self.d.stop)

    def connect(self, source="127.0.0.1"):
        # The mark before the connect: a refusal may be logged before
        # create_connection returns.
        mark = self.d.log_mark()
        s = socket.create_connection((self.d.host, self.d.port), timeout=TIMEOUT,
                                     source_address=(source, 0))
        c = Client(s)
        c.daemon = self.d
        c.mark = mark
        self.addCleanup(c.close)
        return c

    def test_the_next_connection_of_an_address_is_refused(self):
        first = [self.connect() for _ in range(self.N)]
        for c in first:
            self.assertEqual(c.request("PING"), "PONG")
        extra = self.connect()
        extra.expect(ERR_PER_ADDRESS % self.N)
        extra.expect_eof()
        self.d.wait_log(r"warn refusing 127\.0\.0\.1:\d+: max_clients_per_address \(%d\) "
                        r"reached by 127\.0\.0\.1 \(0 more refused since the last such line\)$" % self.N,
                        since=extra.mark)
        # Another address, and the Unix socket, are not that address.
        self.assertEqual(self.connect("127.0.0.2").request("PING"), "PONG")
        with Client.unix(self.sock_path) as u:
            self.assertEqual(u.request("PING"), "PONG")
        # A slot of the address freed: it gets in again.
        first[0].close()
        self.d.wait_closed(first[0])
        self.assertEqual(self.connect().request("PING"), "PONG")
        self.assertEqual(read_stats(first[1])["rejected_per_address"], "1")


class WatchLimitTests(unittest.TestCase):
    """10000 watches per daemon, all connections together."""

    def setUp(self):
        # Every client here is 127.0.0.1: one account, with room for more.
        self.d = Daemon(config="[server]\nmax_watches_per_user = %d\n" % (2 * WATCHES_MAX),
                        name="lockbrokerd-watches").start()
        self.addCleanup(self.d.stop)

    def watch_all(self, c, names):
        """WATCHes every name in one send; asserts an OK and a free EVENT each."""
        c.send("".join("WATCH %s\n" % n for n in names))
        lines = c.lines(2 * len(names))
        self.assertEqual([l for l in lines if l.startswith("OK ")],
                         ["OK %s" % n for n in names])
        self.assertEqual(sorted(l for l in lines if not l.startswith("OK ")),
                         sorted("EVENT %s free" % n for n in names))

    def test_the_daemon_refuses_the_watch_past_its_limit(self):
        conns = []
        for k in range(WATCHES_MAX // WATCHES_PER_CONN_MAX):
            c = self.d.client()
            self.addCleanup(c.close)
            self.watch_all(c, ["w%d-%d" % (k, i) for i in range(WATCHES_PER_CONN_MAX)])
            conns.append(c)
        late = self.d.client()
        self.addCleanup(late.close)
        limit = "ERR LIMIT this daemon has %d watches" % WATCHES_MAX
        self.assertEqual(late.request("WATCH late"), limit)
        # A name watched already is no exception: each watch counts.
        self.assertEqual(late.request("WATCH w0-0"), limit)
        self.assertEqual(late.request("PING"), "PONG")
        # An UNWATCH makes room for one; a closed connection for its hundred.
        self.assertEqual(conns[0].request("UNWATCH w0-0"), "OK w0-0")
        self.watch_all(late, ["late"])
        self.assertEqual(late.request("WATCH late-2"), limit)
        mark = self.d.log_mark()
        conns[1].close()
        self.d.wait_log(r"\(%s\): closed" % re.escape(conns[1].local), since=mark)
        self.watch_all(late, ["late-%d" % i for i in range(2, 2 + WATCHES_PER_CONN_MAX - 1)])
        self.assertEqual(late.request("WATCH late-x"),
                         "ERR LIMIT a connection watches at most 100 locks")
        other = self.d.client()
        self.addCleanup(other.close)
        self.watch_all(other, ["other"])
        self.assertEqual(other.request("WATCH other-2"), limit)
        # Events still reach every watcher at the limit.
        holder = self.d.client()
        self.addCleanup(holder.close)
        self.assertRegex(holder.request("LOCK w99-99"), r"^OK w99-99 \d+$")
        conns[99].expect_match(r"EVENT w99-99 held \d+ holders=1 .*")

class ListingTests(unittest.TestCase):
    """LOCKS and HOLDERS replies of thousands of lines, written as the client
    reads them: a client that never reads costs the daemon its 64 KiB
    output bound, not the whole reply."""

    NAMES = 10000
    CLIENTS = 100

    def setUp(self):
        self.d = Daemon(config="[server]\nmax_locks_per_client = %d\n" % self.NAMES,
                        name="lockbrokerd-listings").start()
        self.addCleanup(self.d.stop)
        self.holder = self.d.client()
        self.addCleanup(self.holder.close)
        self.assertEqual(self.holder.request("CLIENT listings-holder-%s" % ("x" * 40)), "OK")
        # Long names make long lines: a LOCKS reply of about 3 MB.
        self.names = ["listing-%05d-%s" % (i, "n" * 120) for i in range(self.NAMES)]
        self.holder.send("".join("LOCK %s 0\n" % n for n in self.names))
        for n, line in zip(self.names, self.holder.lines(self.NAMES, timeout=scaled(30))):
            self.assertTrue(line.startswith("OK %s " % n), line)

    def quiet_client(self):
        """A client whose receive buffer is small, connected to the daemon."""
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(TIMEOUT)
        s.connect((self.d.host, self.d.port))
        c = Client(s)
        self.addCleanup(c.close)
        return c

    def read_listing(self, c, word, timeout=None):
        """The lines of one listing up to END (END left out)."""
        lines = []
        while True:
            line = c.line(timeout=timeout)
            if line == "END":
                return lines
            self.assertTrue(line.startswith(word + " "), line)
            lines.append(line)

    def test_clients_that_never_read_a_listing_cost_little_memory(self):
        good = self.d.client()
        self.addCleanup(good.close)
        self.assertEqual(good.request("PING"), "PONG")
        before = vm_rss(self.d.pid)
        mark = self.d.log_mark()
        quiet = []
        for _ in range(self.CLIENTS):
            c = self.quiet_client()
            c.send("LOCKS\n")
            quiet.append(c)
        # Each listing client stops being parsed: its reply is unread (before
        # this change a whole reply was queued, then the client "draining";
        # now it waits in its pending slot for the client to read).
        self.d.wait_log_count(r"conn \d+: going from reading to (waiting|draining)",
                              self.CLIENTS, timeout=scaled(60), since=mark)
        self.assertEqual(good.request("PING"), "PONG")
        grown = vm_rss(self.d.pid) - before
        # At most the 64 KiB bound and its bookkeeping per client (6.4 MB
        # for 100); whole replies would be 300 MB.
        self.assertLess(grown, 12 * 1024 * 1024,
                        "the daemon grew by %.1f MB" % (grown / 1048576.0))
        # Still served: another LOCKS, read, lists every name.
        good.send("LOCKS\n")
        self.assertEqual(len(self.read_listing(good, "LOCK")), self.NAMES)

    def test_a_slow_reader_gets_every_name_once_in_order(self):
        reader = self.quiet_client()
        reader.send("LOCKS\nPING\n")
        # Few lines read: the daemon's cursor is then at most a few buffers
        # ahead (its 64 KiB bound, the kernel's), far from the last names,
        # whatever the kernel's buffers grow to as more is read.
        got = [reader.line() for _ in range(100)]
        # The table changes while it is listed: names go behind and ahead of
        # the cursor, new ones come.
        gone = self.names[10:60] + self.names[9900:10000]
        self.holder.send("".join("UNLOCK %s\n" % n for n in gone))
        self.holder.lines(len(gone))
        self.assertEqual(self.holder.request("LOCK listing-00000-new 0")[:3], "OK ")
        self.assertEqual(self.holder.request("LOCK listing-99999-new 0")[:3], "OK ")
        while True:
            line = reader.line(timeout=scaled(30))
            if line == "END":
                break
            got.append(line)
        self.assertEqual(reader.line(), "PONG")
        listed = [l.split()[1] for l in got]
        self.assertEqual([l for l in got if not l.startswith("LOCK ")], [])
        # Once each, in name order.
        self.assertTrue(listed == sorted(set(listed)), "not once each in name order")
        # Every name there throughout is listed; one that came after the
        # cursor passed its place is, one before it is not.
        kept = set(self.names) - set(gone)
        self.assertEqual(kept - set(listed), set())
        self.assertTrue("listing-99999-new" in listed, "a name after the cursor is missing")
        self.assertFalse("listing-00000-new" in listed, "a name behind the cursor is listed")
        self.assertEqual(set(listed) & set(self.names[10:60]), set(self.names[10:60]))
        self.assertEqual(len(set(listed) & set(self.names[9900:10000])), 0,
                         "names unlocked before the cursor came to them are listed")

    def test_a_prefix_glob_lists_its_names_only(self):
        c = self.d.client()
        self.addCleanup(c.close)
        self.assertEqual(c.request("LOCK listing-0123 0")[:3], "OK ")
        c.send("LOCKS listing-0123*\n")
        want = ["listing-0123"] + ["listing-0123%d-%s" % (i, "n" * 120) for i in range(10)]
        self.assertEqual([l.split()[1] for l in self.read_listing(c, "LOCK")], want)
        c.send("HOLDERS listing-0123?-*\n")
        self.assertEqual([l.split()[1] for l in self.read_listing(c, "HOLDER")], want[1:])
        c.send("LOCKS listing-1*\n")
        self.assertEqual(self.read_listing(c, "LOCK"), [])

    def test_holders_is_written_as_read_too(self):
        reader = self.quiet_client()
        reader.send("HOLDERS\nPING\n")
        lines = self.read_listing(reader, "HOLDER", timeout=scaled(30))
        self.assertEqual([l.split()[1] for l in lines], self.names)
        self.assertEqual(reader.line(), "PONG")



# ERR LIMIT of the quota of holds that may be kept (PROTOCOL.md, Quotas).
KEEP_ACCOUNT = "ERR LIMIT %s already has %d holds with a lock-delay or keep="
KEEP_TOTAL = "ERR LIMIT this daemon already has %d holds with a lock-delay or keep="
STILL_HELD = "; the lock is still held"
DAY = 86400000


class QuotaTests(unittest.TestCase):
    """What a client leaves behind (kept holds, holds with a lock-delay,
    leases, watches) counts against its account, a user or a client
    address, and against the daemon (issue 41)."""

    def daemon(self, config, unix=False):
        def text(tmpdir):
            if unix:
                self.sock = os.path.join(tmpdir, "lb.sock")
                return config + "unix_socket = %s\n" % self.sock
            return config
        d = Daemon(config=text, name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)
        return d

    def connect(self, d, unix=False):
        c = Client.unix(self.sock) if unix else d.client()
        self.addCleanup(c.close)
        return c

    def keep(self, c, name, ms=DAY):
        self.assertRegex(c.request("LOCK %s 0" % name), r"^OK %s \d+$" % name)
        return c.request("UNLOCK %s keep=%d" % (name, ms))

    def assert_held_by(self, c, name):
        """c itself holds name: no lock-delay, the holder is its address."""
        self.assertRegex(c.request("STATUS %s" % name),
                         r"^STATUS %s held holder=\S+/%s token=\d+ since=\d+ waiters=0 "
                         r"queue=1$" % (name, re.escape(c.local)))

    def test_one_connection_cannot_keep_more_than_its_quota(self):
        d = self.daemon("[server]\nmax_kept_holds_per_user = 3\n")
        c = self.connect(d)
        for i in range(3):
            self.assertEqual(self.keep(c, "k%d" % i), "OK k%d" % i)
        full = KEEP_ACCOUNT % ("address 127.0.0.1", 3)
        # Refused: the hold stays the connection's, as it was.
        self.assertEqual(self.keep(c, "k3"), full + STILL_HELD)
        self.assert_held_by(c, "k3")
        self.assertRegex(c.request("CHECK k3"), r"^OK k3 \d+ \d+$")
        # A set: all or nothing.
        self.assertRegex(c.request("LOCK s1,s2 0"), r"^OK s1,s2 \d+,\d+$")
        self.assertEqual(c.request("UNLOCK s1,s2 keep=1000"),
                         full + "; nothing was released")
        self.assert_held_by(c, "s1")
        self.assertEqual(c.request("UNLOCK s1,s2"), "OK s1,s2")
        # A hold that may be kept is refused at its request: a lock-delay
        # is one; the lock is then not taken.
        self.assertEqual(c.request("LOCK d1 delay=1000"), full)
        self.assertEqual(c.request("TRYLOCK d1 delay=1000"), full)
        self.assertRegex(c.request("STATUS d1"), r"^STATUS d1 free ")
        # Without keep=, UNLOCK goes on as ever; a re-entrant hold too.
        self.assertRegex(c.request("LOCK k3"), r"^OK k3 \d+$")
        self.assertEqual(c.request("UNLOCK k3 keep=1000"), "OK k3")
        self.assertEqual(c.request("UNLOCK k3"), "OK k3")
        self.assertRegex(c.request("STATUS k3"), r"^STATUS k3 free ")
        st = read_stats(c)
        self.assertEqual((st["locks_keepable"], st["locks_delayed"], st["keep_refused"]),
                         ("3", "3", "4"))
        # A kept hold that ends makes room for one.
        self.assertEqual(c.request("BREAK k0"), "OK k0")
        self.assertEqual(self.keep(c, "k3"), "OK k3")
        self.assertEqual(self.keep(c, "k4"), full + STILL_HELD)

    def test_connection_churn_with_a_lock_delay_cannot_pass_the_quota(self):
        # lock_delay_ms: every LOCK without delay= has one.
        d = self.daemon("[server]\nmax_kept_holds_per_user = 3\nlock_delay_ms = 60000\n")
        for i in range(3):
            c = self.connect(d)
            self.assertRegex(c.request("LOCK a%d" % i), r"^OK a%d \d+$" % i)
            c.close()
            d.wait_closed(c)
            self.assertRegex(self.connect(d).request("STATUS a%d" % i),
                             r"^STATUS a%d held .* delay=\d+$" % i)
        c = self.connect(d)
        full = KEEP_ACCOUNT % ("address 127.0.0.1", 3)
        self.assertEqual(c.request("LOCK a3"), full)
        self.assertEqual(c.request("LOCK a3 delay=5000"), full)
        # A waiting request with a lock-delay counts, and so is refused.
        self.assertEqual(c.request("LOCK a0 delay=5000"), full)
        # delay=0 asks for none: nothing that outlives the client.
        self.assertRegex(c.request("LOCK a3 delay=0"), r"^OK a3 \d+$")
        self.assertEqual(c.request("UNLOCK a3"), "OK a3")
        self.assertEqual(read_stats(c)["locks_keepable"], "3")

    def test_the_daemon_wide_cap_holds_across_accounts(self):
        d = self.daemon("[server]\nmax_kept_holds = 4\nmax_kept_holds_per_user = 3\n",
                        unix=True)
        tcp, local = self.connect(d), self.connect(d, unix=True)
        for i in range(3):
            self.assertEqual(self.keep(tcp, "t%d" % i), "OK t%d" % i)
        # The Unix socket's clients are one account of their own.
        self.assertRegex(local.request("LOCK u0 delay=60000"), r"^OK u0 \d+$")
        self.assertEqual(self.keep(local, "u1"), KEEP_TOTAL % 4 + STILL_HELD)
        self.assertEqual(local.request("LOCK u2 delay=1000"), KEEP_TOTAL % 4)
        self.assertEqual(tcp.request("LOCK t3 delay=1000"), KEEP_ACCOUNT % ("address 127.0.0.1", 3))
        # Lowering a quota (SIGHUP) refuses new entries and ends none.
        with open(d.config_path, "w") as f:
            f.write("[server]\nmax_kept_holds = 2\nmax_kept_holds_per_user = 1\n"
                    "unix_socket = %s\n" % self.sock)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reloaded: .*max_kept_holds 2, max_kept_holds_per_user 1", since=mark)
        for i in range(3):
            self.assertRegex(local.request("STATUS t%d" % i), r"^STATUS t%d held .* delay=\d+$" % i)
        self.assertEqual(local.request("UNLOCK u0"), "OK u0")
        self.assertEqual(local.request("LOCK u0 delay=1000"), KEEP_TOTAL % 2)
        self.assertEqual(tcp.request("LOCK t3 delay=1000"), KEEP_ACCOUNT % ("address 127.0.0.1", 1))
        self.assertEqual(read_stats(local)["locks_keepable"], "3")

    def test_a_user_has_a_share_of_the_leases_and_the_watches(self):
        def config(tmpdir):
            path = os.path.join(tmpdir, "users")
            write_users(path, users_text({"alice": "atk-*", "bob": "*"}))
            return ("[server]\nusers_file = %s\nmax_leases = 5\nmax_leases_per_user = 2\n"
                    "max_watches_per_user = 3\n" % path)
        d = Daemon(config=config, name="lockbrokerd-" + self._testMethodName).start()
        self.addCleanup(d.stop)

        def login(user):
            c = self.connect(d)
            self.assertEqual(c.request("AUTH %s %s" % (user, PASSWORDS[user])), "OK %s" % user)
            return c
        a1, a2, b = login("alice"), login("alice"), login("bob")
        self.assertRegex(a1.request("LOCK atk-1 ttl=%d" % DAY), r"^OK atk-1 \d+$")
        self.assertRegex(a2.request("LOCK atk-2 ttl=%d" % DAY), r"^OK atk-2 \d+$")
        leases = "ERR LIMIT user alice already holds or awaits 2 leases through this daemon"
        self.assertEqual(a1.request("LOCK atk-3 ttl=%d" % DAY), leases)
        a1.close()
        d.wait_closed(a1)
        self.assertEqual(a2.request("LOCK atk-3 ttl=%d" % DAY), leases)   # leases outlive it
        self.assertRegex(b.request("LOCK x ttl=%d" % DAY), r"^OK x \d+$")  # bob's share
        # Watches: every connection of the user together.
        a3 = login("alice")
        for c, name in ((a2, "atk-w1"), (a2, "atk-w2"), (a3, "atk-w3")):
            self.assertEqual(c.request("WATCH %s" % name), "OK %s" % name)
            self.assertEqual(c.line(), "EVENT %s free" % name)
        watches = "ERR LIMIT user alice already has 3 watches in this daemon"
        self.assertEqual(a3.request("WATCH atk-w4"), watches)
        self.assertEqual(a2.request("WATCH atk-w1"), "OK atk-w1")   # watched already: no more
        self.assertEqual(b.request("WATCH atk-w4"), "OK atk-w4")
        self.assertEqual(b.line(), "EVENT atk-w4 free")
        self.assertEqual(a2.request("UNWATCH atk-w2"), "OK atk-w2")
        self.assertEqual(a3.request("WATCH atk-w4"), "OK atk-w4")
        self.assertEqual(a3.line(), "EVENT atk-w4 free")
        self.assertEqual(a3.request("WATCH atk-w5"), watches)
        self.assertEqual(read_stats(b)["leases"], "3")


class LogRateLimitTests(unittest.TestCase):
    """A client that repeats one request writes a bounded number of log
    lines of one kind, then one line that counts the rest; debug lines are
    never suppressed."""

    LIMIT = 50
    N = 1000
    SUPPRESSED_RE = (r"info log: (\d+) lines like \"lock %s: %s released it with keep= "
                     r"\(token %llu\): [^\"]*\" suppressed in the last \d+ s")

    def test_a_flood_of_keep_lines_is_cut_and_counted(self):
        d = Daemon(config="[log]\nrate_limit = %d\n" % self.LIMIT,
                   name="lockbrokerd-lograte").start()
        self.addCleanup(d.stop)
        c = d.client()
        self.addCleanup(c.close)
        mark = d.log_mark()
        # Each UNLOCK keeps the hold 1 ms, and the next LOCK waits for it.
        c.send("LOCK x 60000\nUNLOCK x keep=1\n" * self.N)
        lines = c.lines(2 * self.N, timeout=scaled(60.0))
        self.assertEqual(sum(l == "OK x" for l in lines), self.N)
        # The suppressed lines are counted once the flood is over.
        suppressed, pos = 0, mark
        while True:
            written = sum(re.search(r"info lock x: \S+ released it with keep= \(token \d+\)", l)
                          is not None for l in d.lines[mark:pos])
            if written + suppressed >= self.N:
                break
            pos = d.log_mark()
            m = d.wait_log(self.SUPPRESSED_RE, since=pos, timeout=scaled(20.0))
            suppressed += int(m.group(1))
            pos = d.log_mark()
        self.assertEqual(written + suppressed, self.N)
        self.assertGreater(suppressed, 0)
        # At most LIMIT a second: the flood takes a few seconds at most.
        self.assertLess(written, self.N // 2)
        # Debug lines (-v) are all there.
        self.assertEqual(sum(re.search(r"debug lock x: granted to ", l) is not None
                             for l in d.lines[mark:]), self.N)


if __name__ == "__main__":
    unittest.main(verbosity=2)
