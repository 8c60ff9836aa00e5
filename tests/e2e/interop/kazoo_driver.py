"""kazoo_driver.py - kazoo's locks driven line by line, for test_interop.py.

Usage: /usr/bin/python3 kazoo_driver.py <connect-string> <session-timeout-ms>
(Debian's python3-kazoo is installed for Debian's python3 only.)

One KazooClient (one ZooKeeper session) for every lock. Commands on
stdin, one a line; answers on stdout, one a line, each printed when it
happens (a test waits for them instead of sleeping):

  acquire ID PATH lock|read|write|semaphore [DATA]
      kazoo's Lock, ReadLock, WriteLock or Semaphore (one lease) on PATH,
      with DATA as its identifier (the node's data; default "kazoo-ID"),
      acquired in a thread of its own. Answers `acquired ID NODE CZXID
      PZXID` once it holds (NODE the lock node's or the lease's name,
      CZXID its creation's zxid, PZXID the lock path's pzxid read then),
      `error ID ...` if it fails.
  release ID     answers `released ID`
  cancel ID      ends it whatever its state: cancel() of a waiting acquire
                 (kazoo deletes its node), `cancelled ID`; release() of a
                 held lock, `released ID`
  quit           exits; the session ends with the process

At start, `ready` once the session is connected.
"""

import sys
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import CancelledError
from kazoo.recipe.lock import Semaphore

_out = threading.Lock()


def say(line):
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Holder:
    """One lock and the thread that takes it."""

    def __init__(self, zk, ident, lock):
        self.zk = zk
        self.id = ident
        self.lock = lock
        self.guard = threading.Lock()
        self.held = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            self.lock.acquire()
        except CancelledError:
            holders.pop(self.id, None)
            say("cancelled %s" % self.id)
            return
        except Exception as e:     # noqa: BLE001 - reported to the test
            holders.pop(self.id, None)
            say("error %s acquire: %r" % (self.id, e))
            return
        if isinstance(self.lock, Semaphore):
            node = self.lock.create_path.rsplit("/", 1)[1]
        else:
            node = self.lock.node
        stat = self.zk.exists("%s/%s" % (self.lock.path, node))
        pstat = self.zk.exists(self.lock.path)
        with self.guard:
            self.held = True
        say("acquired %s %s %d %d" % (self.id, node, stat.czxid if stat else -1,
                                      pstat.pzxid if pstat else -1))


holders = {}


def command(zk, line):
    w = line.split()
    if not w:
        return
    ident = w[1] if len(w) > 1 else "-"
    if w[0] == "acquire":
        kinds = {"lock": zk.Lock, "read": zk.ReadLock, "write": zk.WriteLock,
                 "semaphore": zk.Semaphore}
        if len(w) < 4 or w[3] not in kinds or ident in holders:
            say("error %s usage: acquire ID PATH lock|read|write|semaphore [DATA] (ID unused)"
                % ident)
            return
        h = Holder(zk, ident, kinds[w[3]](w[2], w[4] if len(w) > 4 else "kazoo-" + ident))
        holders[ident] = h
        h.thread.start()
    elif w[0] in ("release", "cancel"):
        h = holders.get(ident)
        if h is None:
            say("error %s no such lock" % ident)
        elif w[0] == "cancel" and not h.held:
            h.lock.cancel()
            h.thread.join()
            if h.held:     # it got the lock before it saw the cancel
                holders.pop(ident, None)
                h.lock.release()
                say("released %s" % ident)
        else:
            holders.pop(ident, None)
            h.lock.release()
            say("released %s" % ident)
    elif w[0] == "quit":
        raise SystemExit(0)
    else:
        say("error %s unknown command %s" % (ident, w[0]))


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: kazoo_driver.py <connect-string> <session-timeout-ms>\n")
        return 2
    zk = KazooClient(hosts=sys.argv[1], timeout=int(sys.argv[2]) / 1000.0,
                     connection_retry={"max_tries": -1, "max_delay": 0.5},
                     command_retry={"max_tries": -1, "max_delay": 0.5})
    zk.start()
    say("ready")
    try:
        for line in sys.stdin:
            command(zk, line)
    except SystemExit:
        pass
    zk.stop()
    zk.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
