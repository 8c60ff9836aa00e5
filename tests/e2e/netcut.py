"""netcut - TCP proxies whose paths a test can cut and heal, for partition tests.

Python 3 standard library only (written for Debian 12's python3 3.11), no
root, loopback only. In the spirit of toxiproxy: every TCP path a test may
want to cut goes through a proxy listener of its own, labelled with the two
*nodes* it joins (any names: "D0", "s1", ...; see node_name()). A node's
connections to another node all go through that pair's listeners, so the
test can make the network between any two nodes misbehave:

    net = Net()
    addr = net.proxy("D0", "s1", ("127.0.0.1", 2181))   # listener for D0 -> s1
    ... D0 connects to addr instead of 127.0.0.1:2181 ...
    net.cut("D0", "s1")                  # both directions
    net.cut("s1", "D0", "a->b")          # only what s1 sends to D0
    net.partition({"D0", "s1"}, {"s2", "s3", "D1"})
    net.isolate("D0")                    # from every node it has a path to
    net.heal("D0", "s1"); net.heal_all()
    net.reset("D0", "s1")                # reset their connections (no cut)
    net.backend("D0")                    # "s1": where D0's live connection goes
    net.close()                          # every thread and socket

zkharness.ZkEnsemble(proxied=True) puts such proxies on every quorum and
election path between its servers and hands out client addresses through
proxies (ZkEnsemble.hosts_for(client)); see there.

What a cut does
---------------
A cut behaves like packets dropped in that direction, never like a closed
connection:

* Bytes in a cut direction stop moving: the proxy stops reading them from
  the sender (and keeps what it already read), so the sender's writes go
  into its socket buffer and then block, as with a peer that stops
  acknowledging. Nothing is closed and no FIN or RST crosses the cut: an
  end of file or a reset that arrives from a node is held like its bytes.
  Healing delivers what was held, in order (TCP would retransmit it), then
  goes on forwarding.
* A new connection across a cut (in either direction: a connection needs
  both) is accepted and held silently: the connector sees its connect()
  succeed and then nothing, the closest to a dropped SYN a user-space
  proxy can give (a dropped SYN would make connect() hang instead). The
  upstream connection is only made when the path heals; what the connector
  sent or closed meanwhile is delivered then.
* Where no cut is in the way, a close or reset on one side is passed on
  to the other. A refused upstream connect (nothing listens there) resets
  the accepted connection, at once or, for listeners made with
  retry_refused=<seconds>, after retrying that long every 50 ms. The
  connector cannot be refused (the kernel accepted it already), so it sees
  a reset after a successful connect; ZooKeeper's follower treats that as
  a failed leader, not as a port that is not open yet, and starts another
  election (seen: a follower that connected a few ms before the new
  leader's quorum port was open made the election take initLimit ticks
  longer). Retrying makes that case a short wait, like a retransmitted SYN.

cut() takes effect before it returns: the forwarding thread checks the cuts
under the same lock before every read and write. What was forwarded before
is in the receiver's socket buffer and is delivered (it had crossed the
network already).

The forwarding runs in one thread (a selector loop). Nodes of the test
itself (its 4-letter words, its ZkClient sessions) should talk to the real
ports, outside the model. Proxies listen on 127.0.0.1 ports picked by the
kernel and held for the Net's life, so they cannot collide with ports
picked later by zkharness.free_port().

Reuse (tests/soak/soak.py, other suites)
----------------------------------------
With sys.path holding tests/e2e:

    import zkharness
    ens = zkharness.ZkEnsemble(proxied=True)   # ens.net is a Net
    ens.start()
    hosts = ens.hosts_for("D0")                # [zookeeper] hosts of daemon D0
    ... start the daemons ...
    ens.net.partition({"D0", "s2"}, {"s1", "s3", "D1"})
    ens.net.backend("D0", kind="client")       # "s2": the server of D0's session
    ens.net.heal_all()
    ens.stop(); ens.cleanup()                  # closes the net it made

Nothing here knows about ZooKeeper except election_rewriter(); a Net can
stand in front of any TCP service.

Address rewriting
-----------------
A listener can rewrite the start of the stream of its connections (the
`rewrite` argument of proxy(), a factory of objects with feed(bytes) ->
bytes). ZooKeeper's leader-election connections need it:
election_rewriter() below explains why.
"""

import atexit
import collections
import errno
import selectors
import socket
import struct
import threading
import time
import weakref

__all__ = ["Net", "NetError", "node_name", "election_rewriter", "ConnInfo",
           "tcp_connections"]

HOST = "127.0.0.1"
BUF_LIMIT = 256 * 1024        # bytes read ahead per direction before we stop reading
CHUNK = 65536


class NetError(Exception):
    pass


def node_name(x):
    """The node name of x: a str is itself; an object gives its `node`
    attribute (zkharness.ZkServer of an ensemble: "s<myid>") or else its
    `name` (lbharness.Daemon: the name it was given)."""
    if isinstance(x, str):
        return x
    n = getattr(x, "node", None) or getattr(x, "name", None)
    if not isinstance(n, str):
        raise NetError("no node name for %r" % (x,))
    return n


# ------------------------------------------------------------------ rewriting

class _ElectionRewriter:
    """Rewrites the address in the first message of a ZooKeeper
    leader-election connection (QuorumCnxManager.InitialMessage).

    A server that opens an election connection starts with: long protocol
    version (-65535, or -65534 with multiAddress; a version >= 0 is the
    pre-3.5 format, a bare sid), long sid, int length, the server's own
    election address as text ("127.0.0.1:3888", '|'-separated with
    multiAddress). When the receiver has the larger sid it closes that
    connection and connects back, to the address in the message rather
    than to the one in its own zoo.cfg (QuorumCnxManager.handleConnection,
    3.8). That address is the sender's real one, which would bypass the
    proxies; this rewriter replaces it with the proxy for the way back."""

    HEAD = struct.Struct(">qqi")

    def __init__(self, address):
        self.address = address          # "host:port" written in place
        self.buf = b""
        self.done = False

    def feed(self, data):
        if self.done:
            return data
        self.buf += data
        if len(self.buf) < 8:
            return b""
        version = struct.unpack_from(">q", self.buf)[0]
        if version >= 0:                 # old format: the sid alone
            self.done = True
            out, self.buf = self.buf, b""
            return out
        if len(self.buf) < self.HEAD.size:
            return b""
        version, sid, n = self.HEAD.unpack_from(self.buf)
        if n < 0 or n > 1 << 20:         # not ours to judge: pass it on
            self.done = True
            out, self.buf = self.buf, b""
            return out
        if len(self.buf) < self.HEAD.size + n:
            return b""
        rest = self.buf[self.HEAD.size + n:]
        addr = self.address() if callable(self.address) else self.address
        new = addr.encode("ascii")
        self.done = True
        self.buf = b""
        return self.HEAD.pack(version, sid, len(new)) + new + rest


def election_rewriter(address):
    """A `rewrite` factory for proxy(): each connection's first election
    message says `address` (a "host:port" str, or a callable giving one)
    instead of the sender's own election address."""
    return lambda: _ElectionRewriter(address)


# ------------------------------------------------------------------ the proxy

ConnInfo = collections.namedtuple("ConnInfo", [
    "id", "src", "dst", "kind", "state", "client", "upstream_local",
    "opened", "bytes_up", "bytes_down", "last_up", "last_down", "held_up",
    "held_down"])
ConnInfo.__doc__ = """A snapshot of one proxied connection.

id            serial number
src, dst      nodes: the connector (src) and the listener's other end (dst)
kind          the listener's kind ("client", "quorum", "election", ...)
state         "held" (accepted across a cut, not connected upstream yet),
              "connecting", "retry" (refused, trying again soon), "open",
              "closed"
client        the connector's address (host, port) as the proxy sees it
upstream_local  the proxy's own address on the upstream connection, or None
opened        time.monotonic() of the accept
bytes_up, bytes_down  bytes delivered src -> dst and dst -> src
last_up, last_down    time.monotonic() of the last delivery, or None
held_up, held_down    bytes read but held by a cut (or not written yet)
"""


class _Pipe:
    """One direction of a connection: src socket -> dst socket."""

    __slots__ = ("src", "dst", "buf", "eof", "shut", "failed", "filter",
                 "delivered", "last")

    def __init__(self, filt=None):
        self.src = self.dst = None
        self.buf = bytearray()
        self.eof = False        # src said end of file (or reset: failed)
        self.shut = False       # the end of file was passed on to dst
        self.failed = False     # src reset: pass a reset on, not an EOF
        self.filter = filt
        self.delivered = 0
        self.last = None


class _Listener:
    def __init__(self, net, src, dst, kind, upstream, rewrite, retry_refused):
        self.net = net
        self.src, self.dst, self.kind = src, dst, kind
        self.upstream = upstream
        self.rewrite = rewrite
        self.retry_refused = retry_refused
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((net.host, 0))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()[:2]

    def upstream_address(self):
        u = self.upstream() if callable(self.upstream) else self.upstream
        if isinstance(u, int):
            u = (self.net.host, u)
        return tuple(u)


class _Conn:
    def __init__(self, net, listener, csock, caddr):
        self.id = next(net._serial)
        self.net = net
        self.listener = listener
        self.src, self.dst, self.kind = listener.src, listener.dst, listener.kind
        self.cs = csock
        self.us = None
        self.client = caddr[:2]
        self.upstream_local = None
        self.state = "held"
        self.opened = time.monotonic()
        self.retry_at = None
        self.up = _Pipe(listener.rewrite() if listener.rewrite else None)
        self.down = _Pipe()
        self.up.src = self.down.dst = csock
        self.reg = {}           # socket -> registered events

    def info(self):
        return ConnInfo(self.id, self.src, self.dst, self.kind, self.state, self.client,
                        self.upstream_local, self.opened, self.up.delivered,
                        self.down.delivered, self.up.last, self.down.last,
                        len(self.up.buf), len(self.down.buf))


_live_nets = weakref.WeakSet()


def _close_all_at_exit():
    for n in list(_live_nets):
        try:
            n.close()
        except Exception:  # noqa: BLE001
            pass


atexit.register(_close_all_at_exit)


class Net:
    """A set of cuttable TCP proxies between named nodes (see the module doc).

    Every method is thread-safe. Directions: "both", "a->b" (only what a
    sends to b is dropped) or "b->a". Nodes given as objects are named with
    node_name()."""

    def __init__(self, host=HOST, name="net"):
        self.host = host
        self.name = name
        self._lock = threading.RLock()
        self._serial = iter(range(1, 1 << 62))
        self._listeners = {}        # (src, dst, kind) -> _Listener
        self._by_sock = {}          # listener socket -> _Listener
        self._conns = {}            # id -> _Conn (live ones)
        self._history = []          # ConnInfo of closed connections (last 1000)
        self._cuts = set()          # directed (a, b): a's bytes to b are dropped
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._dirty = False
        self._closed = False
        self.errors = []            # unexpected exceptions in the loop thread
        self._thread = threading.Thread(target=self._run, name="netcut-%s" % name,
                                        daemon=True)
        self._thread.start()
        _live_nets.add(self)

    # ---------------------------------------------------------------- setup

    def proxy(self, src, dst, upstream, kind="tcp", rewrite=None, retry_refused=0.0):
        """The (host, port) of the listener for src's connections to dst of
        this kind, created on first use. upstream: (host, port), a port, or
        a callable giving either, looked up at every connect (so it may
        change, e.g. when a server is given new ports). rewrite: a factory
        of stream rewriters for src -> dst (election_rewriter()).
        retry_refused: seconds to go on trying a refused upstream connect
        before resetting the connector (see the module doc)."""
        src, dst = node_name(src), node_name(dst)
        key = (src, dst, kind)
        with self._lock:
            if self._closed:
                raise NetError("net closed")
            lst = self._listeners.get(key)
            if lst is None:
                lst = _Listener(self, src, dst, kind, upstream, rewrite, retry_refused)
                self._listeners[key] = lst
                self._by_sock[lst.sock] = lst
                self._dirty = True
            self._wake()
            return lst.address

    def address(self, src, dst, kind="tcp"):
        """(host, port) of an existing listener; KeyError if none."""
        return self._listeners[(node_name(src), node_name(dst), kind)].address

    def addr_str(self, src, dst, kind="tcp"):
        return "%s:%d" % self.address(src, dst, kind)

    def nodes(self):
        """Every node named by a listener."""
        with self._lock:
            out = set()
            for (s, d, _k) in self._listeners:
                out.update((s, d))
            return out

    def listeners(self):
        """[(src, dst, kind, (host, port), upstream (host, port))]."""
        with self._lock:
            out = []
            for (s, d, k), lst in sorted(self._listeners.items()):
                try:
                    up = lst.upstream_address()
                except Exception:  # noqa: BLE001
                    up = None
                out.append((s, d, k, lst.address, up))
            return out

    # ---------------------------------------------------------------- cuts

    @staticmethod
    def _directed(a, b, direction):
        a, b = node_name(a), node_name(b)
        if a == b:
            raise NetError("a node is not cut from itself: %r" % a)
        if direction == "both":
            return [(a, b), (b, a)]
        if direction == "a->b":
            return [(a, b)]
        if direction == "b->a":
            return [(b, a)]
        raise NetError("direction: 'both', 'a->b' or 'b->a', not %r" % (direction,))

    def cut(self, a, b, direction="both"):
        """Drop what a sends to b ("a->b"), what b sends to a ("b->a"), or
        both (default), on every proxied path between them, from now on."""
        with self._lock:
            self._cuts.update(self._directed(a, b, direction))
            self._dirty = True
            self._wake()

    def heal(self, a, b, direction="both"):
        """Undo cut(a, b, direction): held bytes are delivered, held
        connections made."""
        with self._lock:
            self._cuts.difference_update(self._directed(a, b, direction))
            self._dirty = True
            self._wake()

    def heal_all(self):
        with self._lock:
            self._cuts.clear()
            self._dirty = True
            self._wake()

    def reset(self, a, b):
        """Reset every live proxied connection between a and b (either way)
        at once, on both sides, as a NAT or a proxy that restarts would; no
        cut: new connections go through. Returns how many were reset."""
        a, b = node_name(a), node_name(b)
        with self._lock:
            gone = [c for c in self._conns.values() if {c.src, c.dst} == {a, b}]
            for c in gone:
                self._close_conn(c, abort=True)
            self._wake()
        return len(gone)

    def partition(self, *groups, direction="both"):
        """Cut every node of each group from every node of the other groups
        (direction relative to the order of the groups: with "a->b", what
        an earlier group sends to a later one is dropped). Nodes in no
        group keep their paths. Returns the directed cuts made."""
        groups = [{node_name(x) for x in g} for g in groups]
        seen = set()
        for g in groups:
            if g & seen:
                raise NetError("a node is in two groups: %r" % sorted(g & seen))
            seen |= g
        made = []
        with self._lock:
            for i, g in enumerate(groups):
                for h in groups[i + 1:]:
                    for a in g:
                        for b in h:
                            made += self._directed(a, b, direction)
            self._cuts.update(made)
            self._dirty = True
            self._wake()
        return made

    def isolate(self, node, direction="both"):
        """Cut node from every other node the net knows ("a->b": only what
        node sends is dropped)."""
        node = node_name(node)
        with self._lock:
            for other in self.nodes() - {node}:
                self._cuts.update(self._directed(node, other, direction))
            self._dirty = True
            self._wake()

    def is_cut(self, a, b):
        """True if what a sends to b is dropped."""
        with self._lock:
            return (node_name(a), node_name(b)) in self._cuts

    def cuts(self):
        """The directed cuts in force: a set of (from, to)."""
        with self._lock:
            return set(self._cuts)

    # ---------------------------------------------------------------- looking

    def connections(self, src=None, dst=None, kind=None, live=True):
        """ConnInfo snapshots of the proxied connections (live ones, or
        with live=False also the last closed ones), filtered."""
        src = node_name(src) if src is not None else None
        dst = node_name(dst) if dst is not None else None
        with self._lock:
            items = [c.info() for c in self._conns.values()]
            if not live:
                items = self._history + items
        return [c for c in items
                if (src is None or c.src == src) and (dst is None or c.dst == dst)
                and (kind is None or c.kind == kind)]

    def backends(self, src, kind=None):
        """The nodes that src has an open connection (of this kind) to, over
        which the other end has answered (bytes_down > 0), most recently
        answered first. For a ZooKeeper client: the server of its session."""
        conns = [c for c in self.connections(src=src, kind=kind)
                 if c.state == "open" and c.bytes_down > 0]
        conns.sort(key=lambda c: c.last_down or 0, reverse=True)
        out = []
        for c in conns:
            if c.dst not in out:
                out.append(c.dst)
        return out

    def backend(self, src, kind=None):
        """The one node src's answered open connection(s) (of this kind) go
        to, or None; NetError if there are several."""
        b = self.backends(src, kind)
        if len(b) > 1:
            raise NetError("%s has open connections to %r" % (node_name(src), b))
        return b[0] if b else None

    def upstream_ports(self):
        """The proxy's local ports of its live upstream connections (for
        checking that nothing reaches a server around the proxies)."""
        with self._lock:
            return {c.upstream_local[1] for c in self._conns.values() if c.upstream_local}

    # ---------------------------------------------------------------- life

    @property
    def running(self):
        """True while the forwarding thread runs (until close())."""
        return self._thread.is_alive()

    def close(self):
        """Stop the thread and close every socket (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake()
        self._thread.join(10.0)
        with self._lock:
            for c in list(self._conns.values()):
                self._close_conn(c, abort=True)
            for lst in self._listeners.values():
                lst.sock.close()
            self._listeners.clear()
            self._by_sock.clear()
            try:
                self._sel.close()
            except Exception:  # noqa: BLE001
                pass
            self._wake_r.close()
            self._wake_w.close()
        _live_nets.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<Net %s: %d listeners, %d connections, cuts %r>" % (
            self.name, len(self._listeners), len(self._conns), sorted(self._cuts))

    # ---------------------------------------------------------------- the loop

    def _wake(self):
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass

    def _run(self):
        while True:
            with self._lock:
                if self._closed:
                    return
                if self._dirty:
                    self._dirty = False
                    self._refresh()
            timeout = 1.0
            with self._lock:
                now = time.monotonic()
                for c in self._conns.values():
                    if c.state == "retry":
                        timeout = max(0.0, min(timeout, c.retry_at - now))
            try:
                events = self._sel.select(timeout)
            except OSError as e:
                if e.errno == errno.EBADF:
                    return
                raise
            with self._lock:
                if self._closed:
                    return
                for key, mask in events:
                    what, obj = key.data
                    try:
                        if what == "wake":
                            try:
                                while self._wake_r.recv(4096):
                                    pass
                            except (BlockingIOError, OSError):
                                pass
                        elif what == "listen":
                            self._accept(obj)
                        else:
                            self._io(obj, key.fileobj, mask)
                    except Exception as e:  # noqa: BLE001 - keep forwarding the rest
                        self.errors.append(e)
                        if what == "conn":
                            self._close_conn(obj, abort=True)
                self._refresh()

    def _blocked_up(self, c):
        return (c.src, c.dst) in self._cuts

    def _blocked_down(self, c):
        return (c.dst, c.src) in self._cuts

    def _refresh(self):
        """Start held connections whose path healed, move what can move,
        and set every socket's selector interest."""
        for lst in self._listeners.values():
            if lst.sock not in self._sel.get_map():
                self._sel.register(lst.sock, selectors.EVENT_READ, ("listen", lst))
        now = time.monotonic()
        for c in list(self._conns.values()):
            if c.state == "retry" and c.retry_at <= now:
                c.state = "held"
            if c.state == "held" and not (self._blocked_up(c) or self._blocked_down(c)):
                self._connect(c)
            if c.state == "open":
                self._pump(c)
            if c.state != "closed":
                self._interest(c)

    def _accept(self, lst):
        for _ in range(64):
            try:
                s, addr = lst.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ECONNABORTED):
                    return
                raise
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = _Conn(self, lst, s, addr)
            self._conns[c.id] = c
            if not (self._blocked_up(c) or self._blocked_down(c)):
                self._connect(c)
            if c.state != "closed":
                self._interest(c)

    def _connect(self, c):
        try:
            target = c.listener.upstream_address()
        except Exception:  # noqa: BLE001 - no upstream known: like a refusal
            self._close_conn(c, abort=True)
            return
        us = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        us.setblocking(False)
        us.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.us = us
        c.up.dst = c.down.src = us
        err = us.connect_ex(target)
        c.state = "connecting"
        if err in (0,):
            self._connected(c)
        elif err not in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            self._refused(c)

    def _refused(self, c):
        """The upstream connect failed: try again later, or reset the
        connector."""
        if c.us is not None:
            if c.reg.get(c.us):
                try:
                    self._sel.unregister(c.us)
                except (KeyError, ValueError, OSError):
                    pass
            c.reg.pop(c.us, None)
            c.us.close()
            c.us = c.up.dst = c.down.src = None
        now = time.monotonic()
        if now - c.opened < c.listener.retry_refused:
            c.state = "retry"
            c.retry_at = now + 0.05
        else:
            self._close_conn(c, abort=True)

    def _connected(self, c):
        try:
            c.upstream_local = c.us.getsockname()[:2]
        except OSError:
            pass
        c.state = "open"
        self._pump(c)

    def _interest(self, c):
        want = {c.cs: 0}
        if c.us is not None:
            want[c.us] = 0
        if c.state == "connecting":
            want[c.us] |= selectors.EVENT_WRITE
        elif c.state == "open":
            for p, blocked in ((c.up, self._blocked_up(c)), (c.down, self._blocked_down(c))):
                if blocked:
                    continue
                if not p.eof and len(p.buf) < BUF_LIMIT:
                    want[p.src] |= selectors.EVENT_READ
                if p.buf:
                    want[p.dst] |= selectors.EVENT_WRITE
        for s, ev in want.items():
            old = c.reg.get(s, 0)
            if ev == old:
                continue
            if ev and old:
                self._sel.modify(s, ev, ("conn", c))
            elif ev:
                self._sel.register(s, ev, ("conn", c))
            else:
                self._sel.unregister(s)
            c.reg[s] = ev

    def _io(self, c, sock, mask):
        if c.state == "closed":
            return
        if c.state == "connecting":
            if sock is c.us and mask & selectors.EVENT_WRITE:
                err = c.us.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._refused(c)
                    return
                self._connected(c)
            return
        for p, blocked in ((c.up, self._blocked_up(c)), (c.down, self._blocked_down(c))):
            if blocked or c.state != "open":
                continue
            if p.src is sock and mask & selectors.EVENT_READ:
                self._read(c, p)
        if c.state == "open":
            self._pump(c)

    def _read(self, c, p):
        for _ in range(16):
            if p.eof or len(p.buf) >= BUF_LIMIT:
                return
            try:
                data = p.src.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:             # reset: pass it on like one
                p.eof = p.failed = True
                return
            if not data:
                p.eof = True
                if p.filter is not None and not p.filter.done:
                    p.buf += p.filter.buf    # an incomplete head goes as it is
                return
            if p.filter is not None:
                data = p.filter.feed(data)
            p.buf += data

    def _pump(self, c):
        """Write what may be written; pass ends of file and resets on."""
        for p, blocked in ((c.up, self._blocked_up(c)), (c.down, self._blocked_down(c))):
            if blocked or c.state != "open":
                continue
            while p.buf:
                try:
                    n = p.dst.send(p.buf)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    # The receiver is gone (reset): drop what was for it,
                    # and let the reset go back like its bytes would, once
                    # that direction is not cut.
                    p.buf.clear()
                    p.shut = True
                    q = c.down if p is c.up else c.up
                    q.eof = q.failed = True
                    break
                del p.buf[:n]
                p.delivered += n
                p.last = time.monotonic()
            if p.eof and not p.buf and not p.shut:
                if p.failed:
                    self._close_conn(c, abort=True)
                    return
                p.shut = True
                try:
                    p.dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if c.up.shut and c.down.shut:
            self._close_conn(c)

    def _close_conn(self, c, abort=False):
        if c.state == "closed":
            return
        c.state = "closed"
        for s in (c.cs, c.us):
            if s is None:
                continue
            if c.reg.get(s):
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError, OSError):
                    pass
            if abort:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
            try:
                s.close()
            except OSError:
                pass
        c.reg.clear()
        self._conns.pop(c.id, None)
        self._history.append(c.info())
        del self._history[:-1000]


# ------------------------------------------------------------------ checks

def tcp_connections():
    """Established IPv4 TCP connections of this machine from /proc/net/tcp,
    as a list of ((local host, port), (remote host, port))."""
    out = []
    try:
        with open("/proc/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return out

    def addr(text):
        h, p = text.split(":")
        ip = socket.inet_ntoa(struct.pack("<I", int(h, 16)))
        return ip, int(p, 16)
    for line in lines:
        parts = line.split()
        if len(parts) > 3 and parts[3] == "01":      # ESTABLISHED
            out.append((addr(parts[1]), addr(parts[2])))
    return out


if __name__ == "__main__":
    # A tiny self-check: an echo server behind a proxy, cut and healed.
    import sys
    srv = socket.socket()
    srv.bind((HOST, 0))
    srv.listen(8)

    def echo():
        s, _ = srv.accept()
        while True:
            d = s.recv(100)
            if not d:
                break
            s.sendall(d)
        s.close()
    threading.Thread(target=echo, daemon=True).start()
    with Net() as net:
        a = net.proxy("c", "e", srv.getsockname())
        cs = socket.create_connection(a)
        cs.sendall(b"one")
        assert cs.recv(10) == b"one"
        net.cut("c", "e")
        cs.sendall(b"two")
        cs.settimeout(0.5)
        try:
            cs.recv(10)
            raise SystemExit("got data across a cut")
        except socket.timeout:
            pass
        net.heal_all()
        cs.settimeout(5)
        assert cs.recv(10) == b"two"
        assert net.backend("c") == "e"
        cs.close()
        srv.close()
    sys.stdout.write("netcut self-check ok\n")
