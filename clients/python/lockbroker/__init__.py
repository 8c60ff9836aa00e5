"""lockbroker - a client for lockbrokerd, the lock broker (proto/PROTOCOL.md).

Standard library only, Python 3.9+. The safe way is the default:

    import lockbroker

    client = lockbroker.connect("127.0.0.1:7411")
    with client.lock("deploy", wait=30) as hold:
        run_step(fencing_token=hold.token)
        if hold.lost:                # LOST, a failed CHECK, or the window ran out
            raise SystemExit("lock lost: stop touching the resource")

Design (documented in README.md):

- Every hold has a connection of its own, as the protocol ties a hold to
  its connection: closing it (or the process dying) releases the lock
  (after the grace below, with a daemon that has sessions). A
  reader thread per connection reads every line, so a pushed `LOST` is seen
  at once, while the program is busy. A cleanly released hold's connection
  serves the next hold (up to 8 are kept idle).
- Jeopardy: a monitor thread per hold sends `CHECK <name> <token>` every
  quarter of the last safe window (at least every second, at most every
  100 ms) and marks the hold lost when the window runs out without a fresh
  answer (a frozen daemon, a dead network): `hold.lost` turns true before
  anyone else can be granted the lock (PROTOCOL.md, CHECK). A grant whose
  first CHECK promises no time (0: a daemon just back from a ZooKeeper
  outage, say) is no grant: lock() releases it and asks again while its
  wait lasts, then raises Timeout (trylock(): Busy); a hold it returns had
  a window.
- Leases renew themselves every third of their ttl on a connection of their
  own, and are released on exit; a lease granted after a wait is renewed at
  once, so its ttl counts from then.
- The client object is thread-safe: holds are independent, and queries
  (status, locks, stats, ping) share one connection behind a lock.
- A hold outlives a dropped connection for a grace (connect(...,
  grace=seconds), default 5 s; 0 or None: off). Each hold's connection
  sends `GRACE <ms>` after its login, which opens a session (PROTOCOL.md,
  Sessions). When that connection drops (a reset, a proxy restart, a
  daemon's handover that closes TLS connections), the daemon keeps the
  hold, detached, for the grace from when it saw the connection end,
  which may be before we notice (a reset that reached only the daemon
  shows at our next request), but not before it answered the last request
  answered on it. So the hold is certain until D = that request's send +
  the grace - a tenth of it (PROTOCOL.md, What a client may assume after
  a drop): the hold's own thread reconnects (at once, then 50 ms later,
  doubling to 1 s between tries, no try past D), logs in again, sends
  `RESUME <session> <secret>` and `CHECK`s every name, and the hold goes
  on with its token. It turns lost when `RESUME` or a `CHECK` says
  NOT_HELD, at D if it is not back by then (at once for a drop noticed
  after D), or when its window runs out first (jeopardy, as ever). With a
  session the monitor CHECKs at least every quarter of the grace, so a
  drop only a CHECK finds leaves most of it; a CHECK unanswered by D is a
  loss. Without a monitor (check=False) D counts from whatever request
  was last answered on the connection (the LOCK, say): a hold kept
  longer than the grace without a request is lost at a drop. A daemon without sessions (`GRACE` answered ERR BAD_COMMAND): as
  before, a dropped connection marks its hold lost. Requests waiting at
  the drop (a LOCK that waits) raise ConnectionLost: ask again.
- TLS (connect(address, ssl=context)): every connection the client opens
  (queries, holds, leases) is wrapped in TLS, checked against the
  context's CA and the address's host (or server_hostname). OpenSSL works
  on memory buffers and this module does the socket I/O, so the reader
  thread and the senders can share a connection (an ssl.SSLSocket must not
  be read and written from two threads at once).
- A minimum hold (lock(..., min_hold=seconds)): a hold released sooner than
  that after its grant is released with `UNLOCK <name> keep=<ms left>`, and
  the daemon keeps it until then (PROTOCOL.md, Releasing later): "at most
  once per period" across machines, without this process staying around.

Times on the API are seconds (float); on the wire, milliseconds.
"""

import collections
import math
import re
import socket
import ssl as _ssl
import threading
import time

__all__ = [
    "connect", "Client", "Hold", "Lease",
    "Error", "Timeout", "Busy", "Unavailable", "Conflict", "NotHeld", "Denied",
    "AuthFailed", "BadName", "LimitExceeded", "ProtocolError", "ConnectionLost",
]
__version__ = "0.2.0"

DEFAULT_ADDRESS = "127.0.0.1:7411"
DEFAULT_GRACE = 5.0                # seconds a hold outlives a dropped connection
# Reconnecting a hold after a drop: at once, then this long after a failed
# try, doubling up to RESUME_PAUSE_MAX, as `lockbroker run` does.
RESUME_PAUSE_MIN = 0.05
RESUME_PAUSE_MAX = 1.0
_SESSION_RE = re.compile(r"OK ([0-9a-f]{16}) ([0-9a-f]{32})")
NAME_MAX = 200
# PROTOCOL.md, "Lock names"; tests/e2e/lbnames.py holds this to that text.
_NAME_RE = re.compile(r"[A-Za-z0-9._:@-]{1,200}")
CHECK_EVERY_MIN = 0.1
CHECK_EVERY_MAX = 1.0
# A grant with no window (CHECK answered 0) is given back and asked for
# again this long after, doubling up to RETRY_MAX, while the wait lasts.
RETRY_MIN = 0.1
RETRY_MAX = 1.0
KEEP_MAX = 86400.0                 # seconds: UNLOCK's keep=<ms> goes to 86400000


# ------------------------------------------------------------------ errors

class Error(Exception):
    """Any failure; .line is the daemon's reply (or None)."""

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line


class Timeout(Error):
    """LOCK's wait ran out (TIMEOUT): somebody held the lock or waited ahead."""


class Busy(Error):
    """TRYLOCK: the lock is held (BUSY). BUSY names nobody: trylock() asks
    one STATUS (not for a set) and sets .status (its dict, or None when it
    could not be had), .holder and .label (None if unknown), and says them
    in the message."""

    status = None
    holder = None
    label = None


class Unavailable(Error):
    """ERR UNAVAILABLE: the daemon cannot reach ZooKeeper (distributed mode)."""


class Conflict(Error):
    """ERR CONFLICT: the name is in use in another mode or with another limit."""


class NotHeld(Error):
    """ERR NOT_HELD: the hold or lease is not held (any more)."""


class Denied(Error):
    """ERR NOAUTH or ERR DENIED: log in first, or this user may not use the name."""


class AuthFailed(Denied):
    """ERR AUTH_FAILED: wrong user or password, or the daemon has no users."""


class BadName(Error, ValueError):
    """An invalid lock name (checked here before sending, or ERR BAD_NAME)."""


class LimitExceeded(Error):
    """ERR LIMIT: too many clients, locks or leases on the daemon."""


class ProtocolError(Error):
    """An unexpected reply (ERR BAD_COMMAND, BAD_ARGS, INTERNAL, LINE_TOO_LONG, ...)."""


class ConnectionLost(Error):
    """The connection closed or failed, or no reply came within the timeout."""


_ERRORS = {
    "UNAVAILABLE": Unavailable, "CONFLICT": Conflict, "NOT_HELD": NotHeld,
    "NOAUTH": Denied, "DENIED": Denied, "AUTH_FAILED": AuthFailed,
    "BAD_NAME": BadName, "LIMIT": LimitExceeded,
}


def _error_of(line, what):
    """The exception for an ERR line (or any unexpected line)."""
    parts = line.split(" ", 2)
    if parts[0] == "ERR" and len(parts) > 1:
        cls = _ERRORS.get(parts[1], ProtocolError)
    else:
        cls = ProtocolError
    return cls("%s: %s" % (what, line), line)


def check_name(name):
    """Raises BadName unless name is a valid lock name (PROTOCOL.md, Lock names)."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in (".", ".."):
        raise BadName("invalid lock name %r: 1 to %d bytes of A-Z a-z 0-9 . _ : @ -, "
                      "not . or .." % (name, NAME_MAX))


def _ms(seconds, what):
    if seconds is None:
        return None
    if seconds < 0:
        raise ValueError("%s must not be negative" % what)
    return int(round(seconds * 1000))


def _grace_ms(grace):
    """grace (seconds; 0 or None: off) as GRACE's <ms>, or None."""
    if grace is None or grace == 0:
        return None
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or \
            not 0.1 <= grace <= 3600:
        raise ValueError("grace must be 0 or None (off), or 0.1 to 3600 seconds")
    return int(round(grace * 1000))


def _keep_seconds(seconds, what):
    """seconds as a keep= or min_hold: a number from 0 to KEEP_MAX."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or \
            not 0 <= seconds <= KEEP_MAX:
        raise ValueError("%s must be 0 to %d seconds" % (what, KEEP_MAX))
    return seconds


def _options(shared, limit, delay, ttl_ms=None):
    opts = []
    if shared and limit is not None:
        raise ValueError("shared and limit exclude each other")
    if shared:
        opts.append("shared")
    if limit is not None:
        if not 1 <= int(limit) <= 65535:
            raise ValueError("limit must be 1 to 65535")
        opts.append("limit=%d" % int(limit))
    if ttl_ms is not None:
        opts.append("ttl=%d" % ttl_ms)
    if delay is not None:
        opts.append("delay=%d" % _ms(delay, "delay"))
    return opts


def parse_address(address):
    """("unix", path) or ("tcp", (host, port)) for "host:port", "[v6]:port",
    "host" (port 7411), "unix:/path" or "/path"."""
    if address.startswith("unix:"):
        return "unix", address[5:]
    if address.startswith("/"):
        return "unix", address
    m = re.match(r"^\[([^\]]+)\](?::(\d+))?$", address)
    if m:
        return "tcp", (m.group(1), int(m.group(2) or 7411))
    host, sep, port = address.rpartition(":")
    if not sep:
        return "tcp", (address, 7411)
    return "tcp", (host, int(port))


def _fields(words):
    """{key: value} of the key=value words."""
    out = {}
    for w in words:
        k, sep, v = w.partition("=")
        if sep:
            out[k] = v
    return out


# -------------------------------------------------------------------- TLS

def _ssl_why(e):
    """A short reason for an ssl error, without OpenSSL's source location."""
    if isinstance(e, _ssl.SSLCertVerificationError):
        return ("TLS: the broker's certificate did not verify (%s): check the CA "
                "and the host name" % (e.verify_message or e.reason))
    text = str(e.args[1]) if len(e.args) > 1 else str(e)
    text = re.sub(r"^\[[^]]*\] *| *\(_ssl\.c:\d+\)$", "", text)
    if "alert" in text:
        # What the broker said, e.g. "tlsv1 alert unknown ca": it did not
        # take our certificate (or our lack of one).
        return "TLS: the broker refused the session: %s" % text
    return "TLS: %s" % text


class _Tls:
    """TLS over a connected socket, through memory buffers: OpenSSL never
    touches the socket. One lock guards the SSLObject (OpenSSL's SSL object
    must not be used by two threads at once), and the records it makes go to
    the socket in the order it made them (self._out_queue, emptied under
    self._send_lock). The handshake runs here, on the socket's timeout."""

    def __init__(self, sock, context, server_hostname):
        self.sock = sock
        self._in = _ssl.MemoryBIO()
        self._out = _ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=False,
                                     server_hostname=server_hostname)
        self._lock = threading.Lock()         # the SSLObject and both buffers
        self._send_lock = threading.Lock()    # the socket's sending side
        self._out_queue = collections.deque()
        while True:
            try:
                self._obj.do_handshake()
                break
            except _ssl.SSLWantReadError:
                self._take_output()
                self._flush()
                data = sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the broker closed the connection during the "
                                               "TLS handshake")
                self._in.write(data)
        self._take_output()
        self._flush()

    def _take_output(self):
        """Queues what OpenSSL wrote (called under self._lock)."""
        data = self._out.read()
        if data:
            self._out_queue.append(data)

    def _flush(self):
        with self._send_lock:
            while self._out_queue:
                self.sock.sendall(self._out_queue.popleft())

    def sendall(self, data):
        view = memoryview(data)
        with self._lock:
            while view:
                view = view[self._obj.write(view):]
            self._take_output()
        self._flush()

    def recv(self):
        """Decrypted bytes: what OpenSSL holds already, else after reading
        the socket (a record may hold several lines, or part of one); b""
        at the end."""
        while True:
            with self._lock:
                try:
                    data = self._obj.read(65536)
                except _ssl.SSLWantReadError:
                    data = None
                except _ssl.SSLZeroReturnError:
                    data = b""
                self._take_output()           # a post-handshake message may need an answer
            self._flush()
            if data is not None:
                return data                   # b"": the broker's close_notify
            raw = self.sock.recv(65536)
            if not raw:
                return b""
            with self._lock:
                self._in.write(raw)


# ------------------------------------------------------------- connection

class _Conn:
    """One connection: a reader thread splits pushed LOST lines from replies.
    Requests go one at a time (self._req_lock). With context (an
    ssl.SSLContext), TLS, checked for server_hostname (default: the
    address's host). With grace_ms, GRACE after the login: .session is
    then (id, secret), else None (no grace asked, or a daemon without
    sessions)."""

    def __init__(self, address, timeout, user=None, password=None, label=None,
                 context=None, server_hostname=None, grace_ms=None):
        kind, where = parse_address(address)
        if kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(where)
        else:
            sock = socket.create_connection(where, timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls = None
        if context is not None:
            if server_hostname is None and kind == "tcp":
                server_hostname = where[0]
            try:
                self.tls = _Tls(sock, context, server_hostname)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(None)
        self.sock = sock
        self.timeout = timeout
        self._req_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies = []
        self._discard = 0             # replies still due to requests that timed out
        self._closed = None           # why the connection ended, or None
        self.on_lost = None           # fn(name, token, reason) for LOST lines
        self.session = None           # (id, secret) of GRACE or RESUME
        # The send time of the last request answered (time.monotonic()), or
        # None: the daemon cannot have seen this connection end before it.
        self.answered_sent = None
        self._reader = threading.Thread(target=self._read, daemon=True,
                                        name="lockbroker-reader")
        self._reader.start()
        try:
            if user is not None:
                self.expect_ok("AUTH %s %s" % (user, password or ""), "OK %s" % user, "AUTH")
            if label is not None:
                self.expect_ok("CLIENT %s" % label, "OK", "CLIENT")
            if grace_ms is not None:
                reply = self.request("GRACE %d" % grace_ms)
                m = _SESSION_RE.fullmatch(reply)
                if m:
                    self.session = (m.group(1), m.group(2))
                elif not reply.startswith(("ERR BAD_COMMAND", "ERR NOAUTH")):
                    # (No sessions there, or no login: the lock request says so.)
                    raise _error_of(reply, "GRACE %d" % grace_ms)
        except BaseException:
            self.close()
            raise

    def _recv(self):
        return self.tls.recv() if self.tls is not None else self.sock.recv(65536)

    def _send(self, data):
        """Sends bytes as they are (request() sends one line)."""
        if self.tls is not None:
            self.tls.sendall(data)
        else:
            self.sock.sendall(data)

    def _read(self):
        buf = b""
        why = "the broker closed the connection"
        try:
            while True:
                data = self._recv()
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    raw, buf = buf.split(b"\n", 1)
                    line = raw.decode("ascii", "replace").rstrip("\r")
                    if line.startswith("LOST "):
                        parts = line.split(" ", 3)
                        cb = self.on_lost
                        if cb and len(parts) == 4:
                            cb(parts[1], parts[2], parts[3])
                        continue
                    with self._cond:
                        if self._discard:
                            self._discard -= 1     # the late reply of a timed-out request
                        else:
                            self._replies.append(line)
                        self._cond.notify_all()
        except _ssl.SSLError as e:
            why = _ssl_why(e)
        except OSError as e:
            why = "connection error: %s" % e
        with self._cond:
            if self._closed is None:
                self._closed = why
            self._cond.notify_all()
        cb = self.on_lost
        if cb:
            cb(None, None, self._closed)

    def request(self, line, timeout=-1):
        """Sends line, returns the reply line. timeout: seconds, None for ever,
        -1 for the connection's. Raises ConnectionLost when the connection
        fails or no reply comes in time (the late reply is then skipped: the
        connection stays open, and so does what it holds)."""
        if timeout == -1:
            timeout = self.timeout
        with self._req_lock:
            with self._cond:
                if self._closed is not None:
                    raise ConnectionLost(self._closed)
            sent = time.monotonic()
            try:
                self._send(line.encode("ascii") + b"\n")
            except OSError as e:
                why = "cannot send: %s" % e
                if self.tls is not None:
                    # A broker that refused our certificate sent an alert and
                    # closed: the reader, which the reset ends, may have read it.
                    with self._cond:
                        self._cond.wait_for(lambda: self._closed is not None, self.timeout)
                        if self._closed is not None and self._closed.startswith("TLS"):
                            why = self._closed
                self.close()
                raise ConnectionLost(why)
            deadline = None if timeout is None else time.monotonic() + timeout
            with self._cond:
                while not self._replies:
                    if self._closed is not None:
                        raise ConnectionLost(self._closed)
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(left)
                if self._replies:
                    self.answered_sent = sent
                    return self._replies.pop(0)
                self._discard += 1
            raise ConnectionLost("no reply to %s within %.1f s" % (line.split(" ")[0], timeout))

    def expect_ok(self, line, ok, what):
        reply = self.request(line)
        if reply != ok:
            raise _error_of(reply, what)

    @property
    def closed(self):
        return self._closed is not None

    QUIT_WAIT = 1.0                   # seconds quit() waits for BYE at most

    def quit(self):
        """Closes, after a QUIT when the connection has a session: a close
        alone would leave what it holds detached for the grace; QUIT
        releases it now (and ends the session). Waits for BYE briefly: a
        daemon that does not answer keeps it for the grace."""
        if self.session is not None and not self.closed:
            try:
                self.request("QUIT", timeout=min(self.timeout, self.QUIT_WAIT))
            except Error:
                pass
        self.close()

    def close(self, why="closed by the client"):
        with self._cond:
            if self._closed is None:
                self._closed = why
            self._cond.notify_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


# ------------------------------------------------------------------ holds

class Hold:
    """A lock held through a connection of its own. Use as a context manager
    (released on exit) or call release(). .token is the fencing token (int);
    .lost turns true once the hold is known lost, with .lost_reason.

    A set (lock(["a", "b"])): .names and .tokens are lists, a token per name
    in the order given, .token is that list too and .name is "a,b"; .lost
    turns true when any of the names is lost (the set is then lost).

    .min_hold (seconds or None) and .release_on_failure are lock()'s;
    .kept is what the release asked the daemon to keep (seconds, 0.0 for at
    once; None before the release and for a hold that was lost).

    With a session (connect(..., grace=...) and a daemon that has them),
    a dropped connection is taken back (RESUME) on a new one before D,
    the send of the last request answered on it + the grace - a tenth;
    .resumes counts the times it was, .session is the session's id (None
    without one). safe_remaining() never goes past D after a drop."""

    def __init__(self, conn, name, token, mode, check=True, give_back=None,
                 min_hold=None, release_on_failure=False, granted_at=None,
                 reconnect=None, grace=None):
        self.min_hold = min_hold
        self.release_on_failure = release_on_failure
        # When the OK came, by our clock: later than the grant, so a keep
        # counted from here never ends before min_hold after the grant.
        self._granted_at = time.monotonic() if granted_at is None else granted_at
        self.kept = None
        self.names = name if isinstance(name, list) else [name]
        self.tokens = token if isinstance(token, list) else [token]
        self.name = ",".join(self.names)
        self._give_back = give_back   # takes the connection after a clean release
        self.token = token
        self.mode = mode
        self._conn = conn
        self._lost = threading.Event()
        self.lost_reason = None
        self._callbacks = []
        self._lock = threading.Lock()
        self._released = False
        self._safe_until = None       # monotonic seconds; None: no window (no CHECK)
        self._no_window = False       # the first CHECK promised no time: Client._acquire
                                      # gives the hold back and asks again
        self._stop = threading.Event()
        self._check_window = check    # False: CHECK only after a RESUME, for NOT_HELD
        # The session: reconnect(timeout) opens a logged-in connection
        # without GRACE, on which RESUME takes the hold back.
        self._session = conn.session if reconnect is not None and grace else None
        self.session = self._session[0] if self._session else None
        self._reconnect = reconnect
        self._grace = grace
        self._resumer = None          # the thread taking the hold back, while it runs
        # After a drop, until it is taken back: D, until when the daemon
        # certainly keeps the hold (_kept_until()); its timer marks the hold
        # lost then (generation _drop_gen), with _drop_reason.
        self._drop_until = None
        self._drop_gen = 0
        self._drop_reason = None
        # Whether a CHECK was answered since the grant: until then the last
        # answer is the LOCK's, sent before a wait of any length, too early
        # to bound a CHECK's wait by (it still bounds D after a drop).
        self._confirmed = False
        self.resumes = 0
        self._attach(conn)
        self._monitor = None
        if check:
            self._first_check()
            if self._safe_until is not None and not self.lost:
                self._monitor = threading.Thread(target=self._watch, daemon=True,
                                                 name="lockbroker-check")
                self._monitor.start()

    # -- loss
    @property
    def lost(self):
        """True once the hold is known lost (LOST, CHECK failed or ran out,
        connection dropped). Stop using the resource then."""
        return self._lost.is_set()

    def on_lost(self, fn):
        """Calls fn(hold, reason) once when the hold is lost (at once if it is
        already); from a library thread: keep it short."""
        with self._lock:
            if not self._lost.is_set():
                self._callbacks.append(fn)
                return
        fn(self, self.lost_reason)

    def wait_lost(self, timeout=None):
        """Blocks until the hold is lost or timeout seconds pass; returns .lost."""
        return self._lost.wait(timeout)

    def safe_remaining(self):
        """Seconds the hold is certainly safe from now (0 when lost or unknown):
        the last window, and after a drop no later than D (_kept_until())."""
        if self.lost or self._safe_until is None:
            return 0.0
        until, drop = self._safe_until, self._drop_until
        if drop is not None:
            until = min(until, drop)
        return max(0.0, until - time.monotonic())

    def _mark_lost(self, reason, unless_back=None):
        """Marks the hold lost; unless_back: only while that drop generation
        has not been taken back (checked under the same lock as RESUME's)."""
        with self._lock:
            if self._lost.is_set() or self._released:
                return
            if unless_back is not None and (self._drop_gen != unless_back or
                                            self._drop_until is None):
                return
            self.lost_reason = reason
            self._lost.set()
            callbacks, self._callbacks = self._callbacks, []
        self._stop.set()
        for fn in callbacks:
            try:
                fn(self, reason)
            except Exception:       # a callback's bug must not kill the reader
                pass

    def _attach(self, conn):
        """Makes conn the hold's: its LOST lines and its end come here (an
        earlier connection's, replaced by a RESUME, no longer count)."""
        def on_lost(name, token, reason):
            if conn is self._conn:
                self._on_line_lost(name, token, reason)
        self._conn = conn
        conn.on_lost = on_lost

    def _on_line_lost(self, name, token, reason):
        if name is None:
            if self._session is not None:
                self._dropped(reason)
            else:
                self._mark_lost(reason)
        elif (name, token) in zip(self.names, map(str, self.tokens)):
            self._mark_lost(reason)     # of a set: any name's loss is the set's

    # -- taking the hold back after a drop
    def _kept_until(self, conn=None):
        """D: until when the daemon certainly keeps the hold if conn (the
        hold's) has dropped, or None if nothing was answered on it. The
        daemon keeps it for the grace from when it saw the connection end,
        which may be well before we notice (a NAT's reset that reached only
        the daemon shows at our next request), but not before it answered
        the last request answered on it: so the grace, less the tenth the
        protocol takes off for clock rates, counts from that request's send
        (PROTOCOL.md, Sessions, What a client may assume after a drop)."""
        sent = (conn or self._conn).answered_sent
        if sent is None or not self._grace:
            return None
        grace_ms = int(round(self._grace * 1000))
        return sent + (grace_ms - (grace_ms + 9) // 10) / 1000.0

    def _begin_drop(self, reason):
        """Called under self._lock at a drop: D (and its timer started), or
        None when D has passed already (the hold may be gone: lost)."""
        until = self._kept_until()
        if until is None or time.monotonic() >= until:
            return None
        self._drop_gen += 1
        self._drop_until, self._drop_reason = until, reason
        timer = threading.Timer(until - time.monotonic(), self._drop_expired,
                                args=(self._drop_gen,))
        timer.daemon = True
        timer.start()
        return until

    def _late_reason(self, reason):
        sent = self._conn.answered_sent
        return ("the connection dropped (%s) and was not taken back within the grace of %g s: "
                "noticed too late, %.3f s after the send of the last request answered on it, "
                "from which the grace counts" % (reason, self._grace,
                                                  time.monotonic() - (sent or 0.0)))

    def _expired_reason(self):
        return ("the connection dropped (%s) and was not taken back within the grace of %g s "
                "counted from the last request answered on it (the daemon may free the hold "
                "from then)" % (self._drop_reason, self._grace))

    def _drop_expired(self, gen):
        """D has come (the timer of drop generation gen): lost, unless taken
        back meanwhile. The tries stop too (_take_back)."""
        self._mark_lost(self._expired_reason(), unless_back=gen)

    def _dropped(self, reason):
        """The connection ended without our asking: take the hold back on a
        new one, in a thread of its own (once at a time), until D."""
        with self._lock:
            if self._lost.is_set() or self._released or self._resumer is not None:
                return
            until = self._begin_drop(reason)
            if until is not None:
                self._resumer = threading.Thread(target=self._resume_thread, args=(reason,),
                                                 daemon=True, name="lockbroker-resume")
                self._resumer.start()
        if until is None:
            self._mark_lost(self._late_reason(reason))

    def _resume_thread(self, reason):
        try:
            self._take_back(reason)
        finally:
            with self._lock:
                self._resumer = None

    def _take_back(self, reason):
        """Reconnects (RESUME_PAUSE_MIN doubling to RESUME_PAUSE_MAX between
        tries) until RESUME answers, no try going on past D (_drop_until,
        set by _begin_drop()) nor the hold's window; then CHECKs every name.
        True when the hold is back on a new connection; False when it is
        lost (marked so, unless released meanwhile). A RESUME answered after
        the hold was marked lost releases what it took back at once (QUIT)."""
        sid, secret = self._session
        pause = RESUME_PAUSE_MIN
        while True:
            now, until = time.monotonic(), self._drop_until
            if self.lost:
                return False
            if self._check_window and self._safe_until is not None and now >= self._safe_until:
                self._mark_lost("jeopardy: the connection dropped (%s) and the hold's window "
                                "ran out before it was taken back" % reason)
                return False
            if until is None or now >= until:
                self._mark_lost(self._expired_reason())
                return False
            conn = None
            try:
                conn = self._reconnect(min(self._conn.timeout, max(0.05, until - now)))
                left = until - time.monotonic()
                if left <= 0 or self.lost:
                    conn.close()          # no RESUME past D: the loop ends it
                    continue
                reply = conn.request("RESUME %s %s" % (sid, secret), timeout=max(0.05, left))
            except (ConnectionLost, LimitExceeded) as e:   # not yet: try again
                if conn is not None:
                    conn.close()
                reason = "%s; %s" % (reason.split("; ")[0], e)
                self._drop_reason = reason
                time.sleep(max(0.0, min(pause, until - time.monotonic())))
                pause = min(pause * 2, RESUME_PAUSE_MAX)
                continue
            except Error as e:            # AUTH refused now: it will not get better
                self._mark_lost("the connection dropped (%s) and the new one failed: %s"
                                % (reason, e))
                return False
            words = reply.split(" ")
            if len(words) != 3 or words[:2] != ["OK", sid] or not words[2].isdigit():
                conn.close()
                self._mark_lost("the connection dropped (%s) and the hold was not taken "
                                "back: %s" % (reason, reply))
                return False
            conn.session = self._session
            with self._lock:
                late = self._lost.is_set()
                if not late:
                    old = self._conn
                    self._attach(conn)
                    self._drop_until = None   # back: D no longer applies
                    self._drop_gen += 1
            if late:                      # lost at D meanwhile: let it go now, not after the grace
                conn.quit()
                return False
            old.close()
            self.resumes += 1
            if self._check_window:
                safe = self._check()
            else:                         # no window kept: only whether it is still held
                safe = None
                for name, token in zip(self.names, self.tokens):
                    safe = self._check_one(name, token, None)
                    if safe is None or safe is _DROPPED:
                        break
            if safe is _DROPPED:          # dropped again: D counts from the RESUME
                reason = "dropped again after RESUME: %s" % self._conn._closed
                with self._lock:
                    until = self._begin_drop(reason)
                if until is None:
                    self._mark_lost(self._late_reason(reason))
                    return False
                pause = RESUME_PAUSE_MIN
                continue
            return not self.lost

    # -- jeopardy
    def _check(self):
        """One CHECK per name: updates the window (a set's is its least safe
        name's), or marks the hold lost."""
        sent = time.monotonic()
        timeout = None if self._safe_until is None else max(0.0, self._safe_until - sent)
        safe = None
        for name, token in zip(self.names, self.tokens):
            one = self._check_one(name, token, timeout)
            if one is None or one is _DROPPED or one <= 0:
                return one
            safe = one if safe is None else min(safe, one)
        if self._safe_until is None or sent + safe > self._safe_until:
            self._safe_until = sent + safe
        return safe

    def _check_one(self, name, token, timeout):
        conn = self._conn
        if timeout is None:
            timeout = conn.timeout
        # With a session, an answer that has not come by D may never come: a
        # reset that reached only the daemon (its grace then runs) while what
        # we send goes nowhere. Wait no longer than D.
        until = self._kept_until(conn) if self._session is not None and self._confirmed \
            else None
        if until is not None:
            timeout = max(0.0, min(timeout, until - time.monotonic()))
        try:
            reply = conn.request("CHECK %s %d" % (name, token), timeout=timeout)
            self._confirmed = True
        except ConnectionLost as e:
            if conn is not self._conn:
                return _DROPPED           # taken back meanwhile: ask on the new one
            if self._session is not None and conn.closed:
                self._dropped(str(e))     # taken back on a new connection, if it can be
                return _DROPPED
            if until is not None and time.monotonic() >= until and \
                    (self._safe_until is None or until < self._safe_until):
                self._mark_lost("no answer from the broker within the grace of %g s counted "
                                "from the last request answered (%s): it may have seen the "
                                "connection end and free the hold" % (self._grace, e))
                return None
            self._mark_lost("jeopardy: %s" % e if self._safe_until is not None else str(e))
            return None
        words = reply.split(" ")
        if len(words) == 4 and words[0] == "OK" and words[1] == name and \
                words[2] == str(token) and words[3].isdigit():
            return int(words[3]) / 1000.0
        if reply.startswith("ERR BAD_COMMAND"):
            return -1.0               # an older daemon: no jeopardy
        if reply.startswith("ERR NOT_HELD"):
            self._mark_lost("not held (%s)" % reply)
            return None
        return 0.0                    # no window this time; ask again soon

    def _first_check(self):
        safe = self._check()
        if safe is _DROPPED:
            # Taken back (or not) in the resume thread, whose CHECK gives the window.
            resumer = self._resumer
            if resumer is not None:
                resumer.join()
            if self.lost:
                return
            safe = 0.0 if self._safe_until is None else 1.0
        if safe == -1.0:
            self._safe_until = None
        elif safe is not None and safe <= 0:
            self._no_window = True

    def _watch(self):
        while not self._stop.is_set():
            window = max(0.0, self._safe_until - time.monotonic())
            every = min(CHECK_EVERY_MAX, max(CHECK_EVERY_MIN, window / 4))
            if self._session is not None:
                # A drop only the next CHECK finds must leave most of the
                # grace (D) for taking the hold back: also under 100 ms.
                every = min(every, self._grace / 4)
            if self._stop.wait(min(every, window)):
                return
            if time.monotonic() >= self._safe_until:
                # The connection stays open until release(): a daemon that was
                # only slow keeps the lock until the program has stopped.
                self._mark_lost("jeopardy: the broker did not confirm the hold in time")
                return
            if self._resumer is not None:
                continue                  # being taken back: its thread CHECKs
            if self._check() is None:
                return

    # -- release
    def min_hold_left(self):
        """Seconds of min_hold still to run (0.0 when it has run, or none was asked)."""
        if not self.min_hold:
            return 0.0
        return max(0.0, self.min_hold - (time.monotonic() - self._granted_at))

    def release(self, keep=None):
        """UNLOCK and close the connection. Raises NotHeld if the hold was
        lost meanwhile (after which nothing is held).

        keep: seconds (0 to 86400) the daemon keeps the hold after this
        release before anybody else is granted it, as `UNLOCK ... keep=<ms>`
        (PROTOCOL.md, Releasing later); keep=0 releases at once. Without it,
        a hold taken with min_hold is kept for what is left of min_hold
        (rounded up to the millisecond), any other is released at once."""
        keep_ms = None if keep is None else int(round(_keep_seconds(keep, "keep") * 1000))
        while True:
            with self._lock:
                if self._released:
                    return
                resumer = self._resumer
                if resumer is None:
                    self._released = True
                    break
            resumer.join()                # being taken back: release it there (grace at most)
        self._stop.set()
        clean = False
        try:
            if self._lost.is_set():
                raise NotHeld("lock %s was lost: %s" % (self.name, self.lost_reason))
            if keep_ms is None:
                keep_ms = min(int(KEEP_MAX * 1000), math.ceil(self.min_hold_left() * 1000))
            line = "UNLOCK %s" % self.name
            if keep_ms > 0:
                line += " keep=%d" % keep_ms
            try:
                reply = self._conn.request(line)
            except ConnectionLost as e:
                # Dropped meanwhile: take it back and release it there, rather
                # than leave it detached for the grace.
                if self._session is None or not self._conn.closed or \
                        not self._release_take_back(str(e)):
                    raise NotHeld("lock %s: %s" % (self.name, e if self._session is None
                                                  or not self._conn.closed
                                                  else "not taken back after a drop"))
                try:
                    reply = self._conn.request(line)
                except ConnectionLost as e2:
                    raise NotHeld("lock %s: %s" % (self.name, e2))
            if reply != "OK %s" % self.name:
                raise _error_of(reply, "UNLOCK %s" % self.name)
            self.kept = keep_ms / 1000.0
            clean = True
            # Released cleanly: the connection may serve the next hold.
            if self._monitor is not None:
                self._monitor.join(self._conn.timeout)
            if self._give_back and not (self._monitor and self._monitor.is_alive()):
                conn, self._conn = self._conn, None
                self._give_back(conn)
        finally:
            if self._conn is not None:
                # Not released (lost, or an unexpected reply): whatever the
                # daemon still has of it ends with the connection, as without
                # a session, not after the grace.
                if clean:
                    self._conn.close()
                else:
                    self._conn.quit()

    def _release_take_back(self, reason):
        """release() found the connection dropped: take the hold back (until
        D) to release it there."""
        with self._lock:
            until = self._begin_drop(reason)
        return until is not None and self._take_back(reason)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        # release_on_failure: a block that failed releases at once, so that
        # another machine may try the job without waiting out min_hold.
        keep = 0 if self.release_on_failure and _failed(exc_type, exc) else None
        try:
            self.release(keep)
        except NotHeld:
            if exc_type is None:
                raise

    def __repr__(self):
        return "<Hold %s token=%s%s>" % (self.name, self.token, " lost" if self.lost else "")


_DROPPED = object()   # Hold._check's answer when the connection dropped: being taken back


def _failed(exc_type, exc):
    """Whether a with block ended by an exception: any, but sys.exit() and
    sys.exit(0), which end a job that did what it had to."""
    if exc_type is None:
        return False
    return not (issubclass(exc_type, SystemExit) and getattr(exc, "code", 1) in (None, 0))


class Lease:
    """A lease: held by no connection, renewed every third of its ttl in the
    background until release(). .lost turns true when a renewal is refused
    (NOT_HELD) or the ttl runs out without one."""

    def __init__(self, client, conn, name, token, ttl, granted_at, renew=True):
        self.name = name
        self.token = token
        self.ttl = ttl
        self._client = client
        self._conn = conn
        self._lost = threading.Event()
        self.lost_reason = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._renewals = 0
        self._cond = threading.Condition()
        self._released = False
        self._deadline = granted_at + ttl          # by our clock, counted from the send
        self._thread = None
        if renew:
            self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                            name="lockbroker-lease")
            self._thread.start()

    @property
    def lost(self):
        """True once the lease is known ended: stop using the resource."""
        return self._lost.is_set()

    @property
    def renewals(self):
        """Renewals answered OK so far."""
        return self._renewals

    def wait_lost(self, timeout=None):
        return self._lost.wait(timeout)

    def wait_renewals(self, n, timeout=None):
        """Blocks until n renewals have been answered; returns whether they were."""
        with self._cond:
            return self._cond.wait_for(lambda: self._renewals >= n or self.lost, timeout) \
                and self._renewals >= n

    def remaining(self):
        """Seconds the lease certainly lasts from now (its ttl counted from the
        send of the last renewal), 0 once lost."""
        return 0.0 if self.lost else max(0.0, self._deadline - time.monotonic())

    def _mark_lost(self, reason):
        with self._lock:
            if self._lost.is_set() or self._released:
                return
            self.lost_reason = reason
            self._lost.set()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def renew(self, ttl=None):
        """RENEW now (for ttl seconds, default the lease's). Raises NotHeld."""
        ttl = self.ttl if ttl is None else ttl
        sent = time.monotonic()
        reply = self._conn.request("RENEW %s %d %d" % (self.name, self.token, _ms(ttl, "ttl")))
        if reply == "OK %s" % self.name:
            self._deadline = sent + ttl
            self.ttl = ttl
            with self._cond:
                self._renewals += 1
                self._cond.notify_all()
            return
        err = _error_of(reply, "RENEW %s" % self.name)
        if isinstance(err, NotHeld):
            self._mark_lost(reply)
        raise err

    def _renew_loop(self):
        while not self._stop.wait(self.ttl / 3.0):
            if time.monotonic() >= self._deadline:
                self._mark_lost("expired: no renewal answered within its ttl")
                return
            try:
                self.renew()
            except NotHeld:
                return
            except ConnectionLost:
                try:                       # a new connection; the lease is not tied to it
                    self._conn.close()
                    self._conn = self._client._new_conn()
                except OSError:
                    pass
            except Error:
                pass                       # UNAVAILABLE: try again, until its deadline

    def release(self):
        """UNLOCK <name> <token>. Raises NotHeld if it had ended."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._stop.set()
        try:
            if self._lost.is_set():
                raise NotHeld("lease %s ended: %s" % (self.name, self.lost_reason))
            reply = self._conn.request("UNLOCK %s %d" % (self.name, self.token))
            if reply != "OK %s" % self.name:
                raise _error_of(reply, "UNLOCK %s" % self.name)
        finally:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.release()
        except NotHeld:
            if exc_type is None:
                raise

    def __repr__(self):
        return "<Lease %s token=%d%s>" % (self.name, self.token, " lost" if self.lost else "")


# ----------------------------------------------------------------- client

class Client:
    """A broker's address and credentials; opens connections as needed.
    Thread-safe. Use connect() to make one."""

    def __init__(self, address=DEFAULT_ADDRESS, timeout=10.0, user=None, password=None,
                 label=None, check=True, ssl=None, server_hostname=None,
                 grace=DEFAULT_GRACE):
        self.address = address
        self._grace_ms = _grace_ms(grace)
        self.grace = self._grace_ms / 1000.0 if self._grace_ms else None
        self.timeout = timeout
        self.user = user
        self._password = password
        self.label = label
        self.check = check
        self.ssl = ssl
        self.server_hostname = server_hostname
        self._query = None
        self._query_lock = threading.Lock()
        self._idle = []               # connections of released holds, for the next ones
        self._idle_lock = threading.Lock()
        self._closed = False
        # Connect once now, so that a wrong address or password fails here;
        # over TLS also a certificate the broker refuses, which TLS 1.3 says
        # only after the handshake: a PING waits for that.
        with self._query_lock:
            self._query = self._new_conn()
            if ssl is not None:
                try:
                    reply = self._query.request("PING")
                except ConnectionLost as e:
                    self._query.close()
                    raise ConnectionLost("cannot connect to %s: %s" % (address, e)) from None
                if reply != "PONG":
                    self._query.close()
                    raise _error_of(reply, "PING")

    def _new_conn(self, timeout=None, grace=False):
        """A logged-in connection (timeout: for its connect and login, else
        the client's); grace: with GRACE, for a hold."""
        if self._closed:
            raise ConnectionLost("the client is closed")
        return self._open_conn(timeout, grace)

    def _open_conn(self, timeout, grace):
        try:
            conn = _Conn(self.address, self.timeout if timeout is None else timeout, self.user,
                         self._password, self.label, self.ssl, self.server_hostname,
                         self._grace_ms if grace else None)
            conn.timeout = self.timeout
            return conn
        except _ssl.SSLError as e:
            raise ConnectionLost("cannot connect to %s: %s" % (self.address, _ssl_why(e))) \
                from e
        except OSError as e:
            raise ConnectionLost("cannot connect to %s: %s" % (self.address, e))

    def _reconnect(self, timeout):
        """A connection to take a hold back on (RESUME): logged in, no GRACE;
        also after close(), which leaves holds as they are."""
        return self._open_conn(timeout, False)

    IDLE_MAX = 8

    def _hold_conn(self):
        """A connection for a new hold: an idle one (a released hold's), or new."""
        with self._idle_lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
        return self._new_conn(grace=True)

    def _give_back(self, conn):
        conn.on_lost = None
        with self._idle_lock:
            if not self._closed and not conn.closed and len(self._idle) < self.IDLE_MAX:
                self._idle.append(conn)
                return
        conn.close()

    # -- locks
    def _acquire(self, cmd, name, wait, shared, limit, delay, min_hold=None,
                 release_on_failure=False, on_pending=None):
        """A hold with a window: a grant whose first CHECK promises no time
        is released (UNLOCK, no keep) and asked for again, after a pause
        growing from RETRY_MIN to RETRY_MAX, with what is left of wait,
        until one comes with a window or the wait ends (Timeout; Busy for
        TRYLOCK, which does not wait)."""
        if min_hold is not None:
            min_hold = _keep_seconds(min_hold, "min_hold") or None
        multi = isinstance(name, (list, tuple))     # a set (PROTOCOL.md, Sets of locks)
        names = list(name) if multi else [name]
        for n in names:
            check_name(n)
        if multi and (not 1 <= len(names) <= 16 or len(set(names)) != len(names)):
            raise BadName("a set is 1 to 16 distinct names: %r" % (name,))
        wait_ms = _ms(wait, "wait")
        end = None if wait_ms is None else time.monotonic() + wait_ms / 1000.0
        left_ms, pause, grants = wait_ms, RETRY_MIN, 0
        while True:
            hold = self._grant(cmd, names, multi, wait, left_ms, shared, limit, delay,
                               min_hold, release_on_failure, on_pending)
            if not hold._no_window:
                return hold
            grants += 1
            try:
                hold.release(keep=0)
            except Error:
                pass                    # lost meanwhile, or the connection failed: not held
            why = "granted %d time%s, but the broker promised no time for it (CHECK " \
                  "answered 0)" % (grants, "" if grants == 1 else "s")
            if cmd == "TRYLOCK":
                raise Busy("lock %s: %s" % (hold.name, why))  # not waiting: as if held
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    raise Timeout("lock %s not granted with time to use it within %s s: %s"
                                  % (hold.name, wait, why))
                pause = min(pause, left)
            time.sleep(pause)
            if end is not None:
                left_ms = max(0, int((end - time.monotonic()) * 1000))
            pause = min(pause * 2, RETRY_MAX)

    def _grant(self, cmd, names, multi, wait, wait_ms, shared, limit, delay, min_hold,
               release_on_failure, on_pending):
        """One LOCK (waiting wait_ms) or TRYLOCK of names, on a connection of
        its own: the Hold, its first CHECK asked."""
        name = ",".join(names)
        words = [cmd, name]
        if cmd == "LOCK" and wait_ms is not None:
            words.append(str(wait_ms))
        words += _options(shared, limit, delay)
        conn = self._hold_conn()
        if on_pending:
            on_pending(conn)
        try:
            timeout = None if cmd == "LOCK" and wait_ms is None else \
                self.timeout + (wait_ms or 0) / 1000.0
            reply = conn.request(" ".join(words), timeout=timeout)
            granted_at = time.monotonic()
            parts = reply.split(" ")
            tokens = parts[2].split(",") if len(parts) == 3 else []
            if len(parts) == 3 and parts[0] == "OK" and parts[1] == name and \
                    len(tokens) == len(names) and all(t.isdigit() for t in tokens):
                mode = "shared" if shared else "limit=%d" % limit if limit else "exclusive"
                tokens = [int(t) for t in tokens]
                return Hold(conn, names if multi else name, tokens if multi else tokens[0],
                            mode, check=self.check, give_back=self._give_back,
                            min_hold=min_hold, release_on_failure=release_on_failure,
                            granted_at=granted_at, reconnect=self._reconnect,
                            grace=self.grace)
            if reply == "TIMEOUT %s" % name:
                raise Timeout("lock %s not granted within %s s" % (name, wait), reply)
            if reply == "BUSY %s" % name:
                raise self._busy(name, multi, reply)
            raise _error_of(reply, "%s %s" % (cmd, name))
        except BaseException:
            conn.close()
            raise

    def _busy(self, name, multi, reply):
        """The Busy for a TRYLOCK answered BUSY, with who holds the lock as
        one STATUS says (one round trip more; in distributed mode one
        ZooKeeper read). Not for a set, whose taken name is not known; and
        without a holder if the STATUS fails or finds the lock free again."""
        st = None
        if not multi:
            try:
                st = self.status(name)
            except (Error, OSError):
                pass                    # best effort: Busy all the same
        who = ""
        if st and st["held"] and st["holder"]:
            who = " by %s" % st["holder"]
            if st["label"]:
                who += " label=%s" % st["label"]
            if st["delay"] is not None:
                who += ", kept %.1f s more after its release (min_hold or a lock-delay)" \
                    % st["delay"]
        e = Busy("lock %s is held%s" % (name, who), reply)
        e.status = st
        if who:
            e.holder, e.label = st["holder"], st["label"]
        return e

    def lock(self, name, wait=None, shared=False, limit=None, delay=None, min_hold=None,
             release_on_failure=False):
        """Takes the lock (waits at most wait seconds; None: for ever) and
        returns its Hold, a context manager. Raises Timeout, Conflict,
        Unavailable, Denied, BadName, ConnectionLost. name may be a list of
        up to 16 names, a set: all are held or none, without deadlock
        between sets (Hold.names, Hold.tokens).

        A grant whose first CHECK promises no time (0: a daemon just back
        from a ZooKeeper outage, say) is released at once and the lock
        asked for again, after a pause of 0.1 s doubling up to 1 s, while
        wait lasts: Timeout if none with a window came in time.

        min_hold: seconds (up to 86400) the lock stays held after its grant
        even when released sooner: the release then asks the daemon to keep
        it for the rest (Hold.release). release_on_failure: a `with` block
        ended by an exception releases at once all the same."""
        return self._acquire("LOCK", name, wait, shared, limit, delay, min_hold,
                             release_on_failure)

    def trylock(self, name, shared=False, limit=None, delay=None, min_hold=None,
                release_on_failure=False):
        """Takes the lock if it is free now, else raises Busy (also when
        granted with no time promised, CHECK 0: released at once). With
        min_hold=period: at most once per period across all its callers."""
        return self._acquire("TRYLOCK", name, None, shared, limit, delay, min_hold,
                             release_on_failure)

    def lease(self, name, ttl, wait=None, shared=False, limit=None, renew=True):
        """Takes a lease for ttl seconds (0.1 to 86400) and returns a Lease,
        renewed in the background (renew=False: not) until released.
        A lease takes no min_hold (lease(..., min_hold=...) is a TypeError):
        the daemon keeps only a connection's own hold after its release
        (PROTOCOL.md, Releasing later); a lease lasts as long as its ttl and
        renewals say, whoever is connected."""
        check_name(name)
        ttl_ms = _ms(ttl, "ttl")
        if not 100 <= ttl_ms <= 86400000:
            raise ValueError("ttl must be 0.1 to 86400 seconds")
        wait_ms = _ms(wait, "wait")
        words = ["LOCK", name] + ([str(wait_ms)] if wait_ms is not None else [])
        words += _options(shared, limit, None, ttl_ms)
        conn = self._new_conn()
        try:
            sent = time.monotonic()
            reply = conn.request(" ".join(words), timeout=None if wait_ms is None
                                 else self.timeout + wait_ms / 1000.0)
            parts = reply.split(" ")
            if not (len(parts) == 3 and parts[0] == "OK" and parts[1] == name and
                    parts[2].isdigit()):
                if reply == "TIMEOUT %s" % name:
                    raise Timeout("lease %s not granted within %s s" % (name, wait), reply)
                raise _error_of(reply, "LOCK %s" % name)
            lease = Lease(self, conn, name, int(parts[2]), ttl, sent, renew=renew)
            # Granted after a wait: its ttl began at the grant, so renew now
            # and count it from here (PROTOCOL.md, Leases).
            if time.monotonic() - sent > ttl / 10.0:
                lease.renew()
            return lease
        except BaseException:
            conn.close()
            raise

    # -- queries
    def _ask(self, line, until_end=False):
        with self._query_lock:
            for attempt in (1, 2):
                if self._query is None or self._query.closed:
                    if self._query is not None:
                        self._query.close()     # ended by the broker: the socket is still open
                    self._query = self._new_conn()
                try:
                    first = self._query.request(line)
                    if not until_end or first.startswith("ERR "):
                        return [first]
                    lines = [first]
                    while lines[-1] != "END":
                        lines.append(self._query.request_more())
                    return lines
                except ConnectionLost:
                    self._query.close()
                    self._query = None
                    if attempt == 2:
                        raise

    def ping(self):
        """PING: raises unless the broker answers PONG."""
        reply = self._ask("PING")[0]
        if reply != "PONG":
            raise _error_of(reply, "PING")

    def status(self, name):
        """STATUS: a dict with state ("held"/"free") and held (True/False, as
        `lockbroker status --json` says), holder, token (int or None), since
        (epoch seconds or None), waiters, queue, and mode, limit, holders,
        delay (s), lease (s left), label when given."""
        check_name(name)
        reply = self._ask("STATUS %s" % name)[0]
        words = reply.split(" ")
        if len(words) < 3 or words[0] != "STATUS" or words[1] != name:
            raise _error_of(reply, "STATUS %s" % name)
        return _status_dict(words[2], _fields(words[3:]))

    def locks(self, glob=None):
        """LOCKS [glob]: a list of dicts (name, mode, holder, label, token,
        since, holders, waiters, lease), this daemon's holds and waits."""
        lines = self._ask("LOCKS" + (" %s" % glob if glob else ""), until_end=True)
        if lines[0].startswith("ERR "):
            raise _error_of(lines[0], "LOCKS")
        out = []
        for line in lines[:-1]:
            words = line.split(" ")
            if words[0] == "LOCK" and len(words) >= 3:
                d = _status_dict("held", _fields(words[3:]))
                d["name"], d["mode"] = words[1], words[2]
                out.append(d)
        return out

    def holders(self, glob=None):
        """HOLDERS [glob]: every holder (all of a shared or limit lock's) and
        queued request, through every daemon in distributed mode: a list of
        dicts (name, mode, state "held" or "queued", holder, label, token -
        None where the daemon does not know it - since, lease)."""
        lines = self._ask("HOLDERS" + (" %s" % glob if glob else ""), until_end=True)
        if lines[0].startswith("ERR "):
            raise _error_of(lines[0], "HOLDERS")
        out = []
        for line in lines[:-1]:
            words = line.split(" ")
            if words[0] == "HOLDER" and len(words) >= 4:
                d = _status_dict(words[3], _fields(words[4:]))
                d["name"], d["mode"] = words[1], words[2]
                out.append(d)
        return out

    def stats(self):
        """STATS: {name: value}, numbers as int where they are."""
        lines = self._ask("STATS", until_end=True)
        if lines[0].startswith("ERR "):
            raise _error_of(lines[0], "STATS")
        out = {}
        for line in lines[:-1]:
            words = line.split(" ", 2)
            if len(words) == 3 and words[0] == "STAT":
                out[words[1]] = int(words[2]) if words[2].isdigit() else words[2]
        return out

    def close(self):
        """Closes the query connection. Holds and leases stay as they are
        (release them first)."""
        self._closed = True
        with self._query_lock:
            if self._query is not None:
                self._query.close()
                self._query = None
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _request_more(self, timeout=-1):
    """The next reply line of a multi-line answer (LOCKS, STATS)."""
    if timeout == -1:
        timeout = self.timeout
    deadline = time.monotonic() + timeout
    with self._cond:
        while not self._replies:
            if self._closed is not None:
                raise ConnectionLost(self._closed)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        if self._replies:
            return self._replies.pop(0)
    self.close("no END within %.1f s" % timeout)     # the rest would answer later requests
    raise ConnectionLost("no END within %.1f s" % timeout)


_Conn.request_more = _request_more


def _status_dict(state, f):
    def num(k, scale=None):
        v = f.get(k)
        if v is None or not v.isdigit():
            return None
        return int(v) / scale if scale else int(v)
    return {
        "state": state, "held": state == "held",
        "holder": None if f.get("holder", "-") == "-" else f["holder"],
        "token": num("token"), "since": num("since", 1000.0), "waiters": num("waiters"),
        "queue": num("queue"), "mode": f.get("mode", "exclusive"), "limit": num("limit"),
        "holders": num("holders"), "delay": num("delay", 1000.0),
        "lease": num("lease", 1000.0),
        "label": None if f.get("label", "-") == "-" else f.get("label"),
    }


def connect(address=DEFAULT_ADDRESS, timeout=10.0, user=None, password=None, label=None,
            check=True, ssl=None, server_hostname=None, grace=DEFAULT_GRACE):
    """A Client for the broker at address ("host:port", "host", "[v6]:port",
    "unix:/path" or "/path"): timeout for connects and replies (seconds),
    user and password for AUTH, label for CLIENT (names the holds in STATUS
    and LOCKS), check=False to skip jeopardy (CHECK) on holds.

    ssl: an ssl.SSLContext for the daemon's TLS listener ([tls] listen),
    e.g. ssl.create_default_context(cafile="ca.pem"), with
    load_cert_chain("deploy.pem", "deploy.key") for a certificate login.
    The broker's certificate is checked for server_hostname, by default the
    address's host (an IP address is checked against the certificate's IP
    names). A failed handshake raises ConnectionLost saying why.

    grace: seconds (0.1 to 3600; 0 or None: off) each hold outlives a
    dropped connection, taken back on a new one meanwhile (GRACE and
    RESUME, PROTOCOL.md; the daemon caps it at its max_grace_ms)."""
    return Client(address, timeout, user, password, label, check, ssl, server_hostname,
                  grace)
