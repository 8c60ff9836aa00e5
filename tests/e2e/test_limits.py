#!/usr/bin/env python3
"""End-to-end tests of lockbrokerd at its limits, in embedded mode: memory
running out (ERR INTERNAL) and the per-daemon watch limit (WATCHES_MAX in
daemon/watch.h; PROTOCOL.md, WATCH). The per-connection limits are in
test_embedded.py.

Not run under valgrind (tests/e2e/valgrind_embedded.sh): the memory test
limits the daemon's address space, which valgrind's own allocator does not
survive. Nothing sleeps to synchronise: each step waits for a reply.
"""

import os
import re
import resource
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lbharness import Daemon, read_stats  # noqa: E402

ERR_NOMEM = "ERR INTERNAL out of memory"
WATCHES_MAX = 10000            # daemon/watch.h
WATCHES_PER_CONN_MAX = 100


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


class WatchLimitTests(unittest.TestCase):
    """10000 watches per daemon, all connections together."""

    def setUp(self):
        self.d = Daemon(name="lockbrokerd-watches").start()
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
