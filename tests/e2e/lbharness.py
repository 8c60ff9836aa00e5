"""lbharness - start lockbrokerd and talk to it, for the end-to-end suites.

Python 3 standard library only. The embedded-mode suite uses it now; the
distributed-mode suites reuse it (several daemons, each with its own config).

Environment:
  LOCKBROKERD         the daemon binary (default: ../../daemon/lockbrokerd
                      relative to this file)
  LB_DAEMON_WRAPPER   a command prefix for the daemon, e.g. "valgrind --quiet
                      --error-exitcode=99"; split like a shell would
  LB_TIMEOUT_SCALE    multiplies every timeout (e.g. 10 under valgrind)
  LB_REQUIRE          comma-separated keys of SKIP_KEYS (or "all", and "-key"
                      to leave one out): a test that would be skipped for
                      lack of what a listed key names fails instead (skip())

Nothing here sleeps to synchronise: callers wait for a reply line, a log line
(Daemon.wait_log) or end of file, each with a timeout that fails the test.
"""

import atexit
import ctypes
import errno
import itertools
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))

TIMEOUT_SCALE = float(os.environ.get("LB_TIMEOUT_SCALE") or "1")


def scaled(seconds):
    """seconds multiplied by LB_TIMEOUT_SCALE."""
    return seconds * TIMEOUT_SCALE


def scaled_ms(ms):
    """A daemon-side wait (a LOCK's wait-ms) multiplied by LB_TIMEOUT_SCALE,
    as an int: what waits for the daemon to act stretches with it."""
    return int(ms * TIMEOUT_SCALE)


# Default for a reply line or a log line; start-up gets longer (valgrind).
TIMEOUT = scaled(5.0)
START_TIMEOUT = scaled(10.0)
STOP_TIMEOUT = scaled(10.0)


def daemon_path():
    path = os.environ.get("LOCKBROKERD")
    if path:
        return path
    return os.path.normpath(os.path.join(HERE, "..", "..", "daemon", "lockbrokerd"))


def daemon_wrapper():
    """The LB_DAEMON_WRAPPER command prefix as a list (empty when unset)."""
    return shlex.split(os.environ.get("LB_DAEMON_WRAPPER") or "")


def wrapper_error_exitcode():
    """The exit code the wrapper uses for its own findings (valgrind's
    --error-exitcode), or None. A test expecting a failure exit must not
    accept this one, or a leak on an error path would pass unnoticed."""
    for arg in daemon_wrapper():
        m = re.match(r"--error-exitcode=(\d+)$", arg)
        if m:
            return int(m.group(1))
    return None


def check_failure_exit(rc, what="the daemon"):
    """Asserts rc is an ordinary failure exit: non-zero, not a signal, not
    the wrapper's error code."""
    if rc == 0:
        raise AssertionError("%s exited 0; expected a failure" % what)
    if rc < 0:
        raise AssertionError("%s died of signal %d" % (what, -rc))
    if rc == wrapper_error_exitcode():
        raise AssertionError("%s: exit code %d is the wrapper's (%s): it found errors"
                             % (what, rc, os.environ.get("LB_DAEMON_WRAPPER")))


def format_addr(sockname, family):
    """The daemon's spelling of an address: "1.2.3.4:5", "[::1]:5", "unix"."""
    if family == socket.AF_INET:
        return "%s:%d" % sockname[:2]
    if family == socket.AF_INET6:
        return "[%s]:%d" % sockname[:2]
    return "unix"


def parse_hostport(text):
    """ "127.0.0.1:5" -> ("127.0.0.1", 5, AF_INET); "[::1]:5" -> ("::1", 5, AF_INET6)."""
    m = re.match(r"^\[([^\]]+)\]:(\d+)$", text)
    if m:
        return m.group(1), int(m.group(2)), socket.AF_INET6
    m = re.match(r"^([^:\s]+):(\d+)$", text)
    if m:
        return m.group(1), int(m.group(2)), socket.AF_INET
    raise ValueError("not HOST:PORT: %r" % text)


# ------------------------------------------------------------------ skips

# What a test may be skipped for, by key. A skip is for a tool, a privilege
# or a facility this machine lacks, never for something the daemon did.
# LB_REQUIRE lists the keys that must not be skipped for (CI sets it: .ci/run);
# tests/lb_skip.sh applies the same rule to the shell tests.
SKIP_KEYS = {
    "zk": "java and Debian's zookeeper package (a real ZooKeeper server)",
    "root": "root and iproute2's ip (network namespaces)",
    "ipv6": "an IPv6 loopback address (::1)",
    "node": "node and npm (clients/node)",
    "venv": "/usr/bin/python3 with python3-venv, python3-setuptools and python3-wheel",
    "valgrind": "valgrind",
    "systemd": "systemd-analyze, and a daemon built with libsystemd (HAVE_LIBSYSTEMD: "
               "the file descriptor store of test_handover.py)",
    "deb": "dpkg-buildpackage, dh and lintian, with the source tree the top of a git "
           "work tree",
    "clang": "clang with libFuzzer and the sanitizers (found by configure)",
    "tools": "setsid(1), ss(8) and bash",
    "nofile": "an open-file hard limit of 1100 or more",
    "openssl": "the openssl command (test_tls.py makes its certificates with it)",
    "chromium": "Debian's chromium, chromium-driver and python3-selenium (test_page.py "
                "opens the live page in headless Chromium)",
    "promtool": "promtool, from Debian's prometheus package (test_monitoring_files.py)",
    "kazoo": "/usr/bin/python3 with Debian's python3-kazoo (test_foreign.py and "
             "test_interop.py take locks with kazoo's recipes)",
    "curator": "javac (a JDK: default-jdk-headless) and Debian's libcurator-recipes-java "
               "(test_interop.py compiles a Curator driver)",
    "go": "go and Debian's golang-github-samuel-go-zookeeper-dev (test_interop.py builds "
          "a go-zookeeper driver)",
}


def _require_keys(text):
    """The set of keys LB_REQUIRE=text requires; ValueError for a word that
    is no key, so that a typo cannot quietly require nothing."""
    want, drop = set(), set()
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        key = word[1:] if word.startswith("-") else word
        if key != "all" and key not in SKIP_KEYS:
            raise ValueError("LB_REQUIRE=%s: unknown key %r; the keys are all, %s"
                             % (text, key, ", ".join(sorted(SKIP_KEYS))))
        (drop if word.startswith("-") else want).update(
            SKIP_KEYS if key == "all" else (key,))
    return want - drop


REQUIRED = _require_keys(os.environ.get("LB_REQUIRE") or "")


def required(key):
    """True when LB_REQUIRE makes a skip for key a failure."""
    if key not in SKIP_KEYS:
        raise ValueError("no skip key %r" % key)
    return key in REQUIRED


def _required_message(key, why):
    return ("%s: not skipped but failed, as LB_REQUIRE=%s requires %s"
            % (why, os.environ.get("LB_REQUIRE"), SKIP_KEYS[key]))


def skip(key, why):
    """Skips the running test (unittest.SkipTest, as TestCase.skipTest) for
    lack of what key names, or fails it when LB_REQUIRE requires key.
    Works in setUp, setUpClass and setUpModule too."""
    if required(key):
        raise AssertionError(_required_message(key, why))
    raise unittest.SkipTest("%s [%s]" % (why, key))


def skip_unless(condition, key, why):
    """Decorator of a test method or class: as unittest.skipUnless, but the
    test fails instead when LB_REQUIRE requires key. Of a class, it is its
    setUpClass that fails, and so that of every subclass that does not
    define its own: their tests do not run."""
    if condition:
        return lambda obj: obj
    if not required(key):
        return unittest.skip("%s [%s]" % (why, key))

    def fail(*args):
        raise AssertionError(_required_message(key, why))

    def decorate(obj):
        if not isinstance(obj, type):
            return fail
        obj.setUpClass = classmethod(fail)
        return obj
    return decorate


def not_tested(key, what):
    """For a test that goes on without a part it cannot run here (the part
    is not a test of its own): says so on stderr, or fails when LB_REQUIRE
    requires key."""
    if required(key):
        raise AssertionError(_required_message(key, what + " cannot run"))
    sys.stderr.write("[not tested here: %s, for lack of %s] " % (what, SKIP_KEYS[key]))


def skip_file(prog, key, why):
    """For a test file that cannot run at all: exits 77 (automake: SKIP), or
    1 (FAIL) when LB_REQUIRE requires key."""
    if required(key):
        sys.stderr.write("%s: %s\n" % (prog, _required_message(key, why)))
        sys.exit(1)
    sys.stderr.write("%s: %s; skipping\n" % (prog, why))
    sys.exit(77)


def main_in_parallel(groups, verbosity=2):
    """unittest.main() for a test file whose classes wait more than they
    compute (ZooKeeper's timeouts): run without arguments, it runs each
    group of class names as a process of its own, all at once, and prints
    their outputs one after the other; it fails when one of them failed.
    With arguments (one class, one test), or LB_NO_SPLIT=1, it is
    unittest.main(). Each group's classes start their own servers in
    their own temporary directories, so groups share nothing."""
    if len(sys.argv) > 1 or os.environ.get("LB_NO_SPLIT") == "1":
        unittest.main(verbosity=verbosity)
        return
    runs = []
    for group in groups:
        out = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, sys.argv[0]] + list(group),
                                stdout=out, stderr=subprocess.STDOUT)
        runs.append((group, proc, out))
    failed = []
    for group, proc, out in runs:
        proc.wait()
        out.seek(0)
        sys.stdout.flush()
        sys.stdout.buffer.write(out.read())
        sys.stdout.flush()
        if proc.returncode != 0:
            failed.append("%s (exit %d)" % (" ".join(group), proc.returncode))
    if failed:
        sys.stderr.write("%s: failed: %s\n" % (os.path.basename(sys.argv[0]), "; ".join(failed)))
        sys.exit(1)
    sys.exit(0)


# ------------------------------------------------------------------ cleanup

_live_daemons = weakref.WeakSet()
_temp_dirs = []
_live_namespaces = set()


def _cleanup_at_exit():
    for d in list(_live_daemons):
        d.kill()
    for ns in list(_live_namespaces):
        ns.delete()
    for path in _temp_dirs:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_cleanup_at_exit)


def make_tmpdir(prefix="lbtest-"):
    """A fresh directory, removed at exit. Short, so that Unix socket paths fit."""
    path = tempfile.mkdtemp(prefix=prefix)
    _temp_dirs.append(path)
    return path


# ------------------------------------------------------------------ results

class RunResult:
    """Outcome of a daemon run that was expected to end by itself."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def __repr__(self):
        return "RunResult(rc=%r, stdout=%r, stderr=%r)" % (
            self.returncode, self.stdout, self.stderr)


def run_daemon(args, config=None, timeout=None, wrapper=None):
    """Runs the daemon to completion (-t, -h, bad flags or configs).

    config: INI text, written to a temporary file whose path is appended as
    "-c PATH" (the result's .config_path says where). Returns a RunResult;
    stdout and stderr are str.
    """
    argv = list(args)
    config_path = None
    if config is not None:
        config_path = os.path.join(make_tmpdir(), "lockbrokerd.conf")
        with open(config_path, "w") as f:
            f.write(config)
        argv += ["-c", config_path]
    cmd = (daemon_wrapper() if wrapper is None else list(wrapper)) + [daemon_path()] + argv
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=timeout or START_TIMEOUT)
    r = RunResult(p.returncode, p.stdout.decode("utf-8", "replace"),
                  p.stderr.decode("utf-8", "replace"))
    r.config_path = config_path
    r.argv = cmd
    return r


# ------------------------------------------------------------------ daemon

class Daemon:
    """One lockbrokerd process.

        with Daemon(config="[server]\\nmax_clients = 5\\n") as d:
            c = d.client()
            c.send("PING\\n"); c.expect("PONG")
        # leaving the block stops it with SIGTERM and asserts exit code 0

    config: INI text, or a callable taking the daemon's temp dir and returning
    INI text (for paths such as unix_socket); written to tmpdir/lockbrokerd.conf.
    listen: the -l flag (default 127.0.0.1:0, a free port); None for no -l.
    verbose: pass -v, which the "queued" and "closed" debug lines need.
    args: more flags.
    binary: the daemon binary to run instead of daemon_path() (a copy).
    pass_fds: descriptors the daemon inherits, at the same numbers.
    """

    # "... ready: embedded mode, listening on 127.0.0.1:7411[ and /path]"; other
    # ", key value" items before "listening on" are tolerated.
    READY_RE = re.compile(r"ready: (\S+) mode, (?:[^,]*, )*?listening on (\S+)(?: and (.+))?$")

    def __init__(self, config=None, listen="127.0.0.1:0", verbose=True, args=(),
                 env=None, wrapper=None, name="lockbrokerd", binary=None, pass_fds=()):
        self.name = name
        self.binary = binary
        self.pass_fds = tuple(pass_fds)
        self.tmpdir = make_tmpdir()
        self.config_path = None
        if config is not None:
            text = config(self.tmpdir) if callable(config) else config
            self.config_path = os.path.join(self.tmpdir, "lockbrokerd.conf")
            with open(self.config_path, "w") as f:
                f.write(text)
        self.argv = []
        if self.config_path:
            self.argv += ["-c", self.config_path]
        if listen is not None:
            self.argv += ["-l", listen]
        if verbose:
            self.argv.append("-v")
        self.argv += list(args)
        self.env = env
        self.wrapper = daemon_wrapper() if wrapper is None else list(wrapper)
        self.proc = None
        self.returncode = None
        self.lines = []            # every stderr line so far, without "\n"
        self._cond = threading.Condition()
        self._stderr_done = False
        self._reader = None
        self.mode = None
        self.listen_addr = None    # "127.0.0.1:PORT" as the daemon says it
        self.host = self.port = self.family = None
        self.unix_path = None

    # -- life cycle

    def start(self, timeout=None):
        """Starts the daemon and waits for its "ready" line. Returns self."""
        cmd = self.wrapper + [self.binary or daemon_path()] + self.argv
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     pass_fds=self.pass_fds,
                                     stderr=subprocess.PIPE, env=env, start_new_session=True)
        _live_daemons.add(self)
        self._reader = threading.Thread(target=self._read_stderr, name="%s-stderr" % self.name,
                                        daemon=True)
        self._reader.start()
        try:
            m = self.wait_log(self.READY_RE, timeout or START_TIMEOUT)
        except BaseException:
            self.kill()
            raise
        self.mode = m.group(1)
        self.listen_addr = m.group(2)
        self.host, self.port, self.family = parse_hostport(self.listen_addr)
        self.unix_path = m.group(3)
        return self

    def _read_stderr(self):
        f = self.proc.stderr
        for raw in iter(f.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        f.close()
        with self._cond:
            self._stderr_done = True
            self._cond.notify_all()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=None):
        """Waits for the process to end by itself; returns its exit code."""
        try:
            self.returncode = self.proc.wait(timeout or STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("%s did not exit within %.1fs\n%s"
                                 % (self.name, timeout or STOP_TIMEOUT, self.log_tail()))
        self._reader.join(timeout or STOP_TIMEOUT)
        _live_daemons.discard(self)
        return self.returncode

    def stop(self, sig=signal.SIGTERM, expect=0, timeout=None):
        """Sends sig (SIGTERM), waits for the exit and returns the exit code.
        With expect (default 0) not None, asserts the exit code, so that a
        valgrind finding (--error-exitcode) or a crash fails the test."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.wait_exit(timeout)
        if expect is not None and rc != expect:
            raise AssertionError("%s exited with %d, expected %d\n%s"
                                 % (self.name, rc, expect, self.log_tail(60)))
        return rc

    def kill(self):
        """SIGKILL, no questions asked (cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            self.returncode = self.proc.poll()
        _live_daemons.discard(self)

    def restart(self, timeout=None):
        """Stops (asserting exit 0) and starts again with the same flags and
        config. The port may change when it was 0; the log starts afresh."""
        self.stop()
        with self._cond:
            self.lines = []
            self._stderr_done = False
        self.returncode = None
        return self.start(timeout)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        else:
            self.kill()
        return False

    # -- the log

    def log_mark(self):
        """The current end of the log, for wait_log(since=...)."""
        with self._cond:
            return len(self.lines)

    def log_tail(self, n=30):
        with self._cond:
            lines = self.lines[-n:]
        return "--- %s stderr (last %d lines) ---\n%s\n---" % (self.name, len(lines),
                                                               "\n".join(lines))

    def find_log(self, regex, since=0):
        """The first match of regex among the lines logged so far, or None."""
        rx = re.compile(regex) if isinstance(regex, str) else regex
        with self._cond:
            for line in self.lines[since:]:
                m = rx.search(line)
                if m:
                    return m
        return None

    def wait_log(self, regex, timeout=None, since=0):
        """Waits for a stderr line matching regex (re.search), looking at
        lines from index `since` on (see log_mark). Returns the match; fails
        the test on timeout or when the daemon's stderr closes first."""
        rx = re.compile(regex) if isinstance(regex, str) else regex
        timeout = TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pos = since
        with self._cond:
            while True:
                while pos < len(self.lines):
                    m = rx.search(self.lines[pos])
                    pos += 1
                    if m:
                        return m
                if self._stderr_done:
                    rc = self.proc.poll() if self.proc else None
                    raise AssertionError("%s ended (exit code %s) before logging a line "
                                         "matching %r\n%s"
                                         % (self.name, rc, rx.pattern, self.log_tail()))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("%s logged no line matching %r within %.1fs\n%s"
                                         % (self.name, rx.pattern, timeout, self.log_tail()))
                self._cond.wait(left)

    def wait_log_count(self, regex, n, timeout=None, since=0):
        """Waits for n stderr lines matching regex from index `since` on, and
        returns their matches; fails the test as wait_log does."""
        rx = re.compile(regex) if isinstance(regex, str) else regex
        timeout = TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        found = []
        pos = since
        with self._cond:
            while True:
                while pos < len(self.lines) and len(found) < n:
                    m = rx.search(self.lines[pos])
                    pos += 1
                    if m:
                        found.append(m)
                if len(found) == n:
                    return found
                left = deadline - time.monotonic()
                if self._stderr_done or left <= 0:
                    raise AssertionError("%s logged %d of %d lines matching %r\n%s"
                                         % (self.name, len(found), n, rx.pattern,
                                            self.log_tail()))
                self._cond.wait(left)

    def wait_queued(self, client, name, timeout=None):
        """Waits for the debug line saying that client's LOCK name is queued
        (needs -v). Only lines logged after the client connected count."""
        return self.wait_log(r"lock %s: %s queued$" % (re.escape(name), re.escape(client.local)),
                             timeout, since=client.mark)

    def wait_closed(self, client, timeout=None):
        """Waits for the debug line saying that the daemon closed client's
        connection (needs -v; TCP clients only, Unix peers are all "unix")."""
        return self.wait_log(r"\(%s\): closed" % re.escape(client.local), timeout,
                             since=client.mark)

    # -- clients

    def client(self, unix=False, timeout=None):
        """A connected Client: TCP to the listen address, or the Unix socket."""
        mark = self.log_mark()
        if unix:
            if not self.unix_path:
                raise AssertionError("%s has no Unix socket" % self.name)
            c = Client.unix(self.unix_path, timeout=timeout)
        else:
            c = Client.tcp(self.host, self.port, family=self.family, timeout=timeout)
        c.daemon = self
        c.mark = mark
        return c


# ------------------------------------------------------------------ client

class Client:
    """One connection to the daemon, with line-buffered reads.

    Every read has a timeout that fails the test; every assertion message says
    what was received instead, and ends with the daemon's recent log when the
    client came from Daemon.client().
    """

    def __init__(self, sock, timeout=None):
        self.sock = sock
        self.timeout = TIMEOUT if timeout is None else timeout
        self.buf = b""
        self.eof = False
        self.reset = False
        self.daemon = None
        self.mark = 0
        self.local = format_addr(sock.getsockname(), sock.family)

    @classmethod
    def tcp(cls, host, port, family=socket.AF_INET, timeout=None):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.settimeout(TIMEOUT if timeout is None else timeout)
            s.connect((host, port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            s.close()
            raise
        return cls(s, timeout)

    @classmethod
    def unix(cls, path, timeout=None):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(TIMEOUT if timeout is None else timeout)
            s.connect(path)
        except BaseException:
            s.close()
            raise
        return cls(s, timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<Client %s>" % self.local

    def _fail(self, msg):
        if self.daemon is not None:
            msg += "\n" + self.daemon.log_tail()
        raise AssertionError("client %s: %s" % (self.local, msg))

    # -- sending

    def send(self, data):
        """Sends all of data (str is encoded as latin-1, so "\\xff" is one byte)."""
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    # -- receiving

    def _fill(self, deadline):
        """Reads once, waiting until deadline. False on timeout; sets eof."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            self.reset = True
            data = b""
        if not data:
            self.eof = True
        self.buf += data
        return True

    def line_bytes(self, timeout=None):
        """The next reply line as bytes, without its "\\n" (a "\\r" stays)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 1:]
                return line
            if self.eof:
                self._fail("connection closed%s before a full reply line; pending %r"
                           % (" (reset)" if self.reset else "", self.buf[:200]))
            if not self._fill(deadline):
                self._fail("no reply line within %.1fs; pending %r" % (timeout, self.buf[:200]))

    def line(self, timeout=None):
        """The next reply line as str (latin-1), without its "\\n"."""
        return self.line_bytes(timeout).decode("latin-1")

    def lines(self, n, timeout=None):
        return [self.line(timeout) for _ in range(n)]

    def expect(self, *expected, timeout=None):
        """Reads one line per argument and asserts each equals it exactly."""
        for exp in expected:
            got = self.line(timeout)
            if got != exp:
                self._fail("expected %r, got %r" % (exp, got))

    def expect_match(self, regex, timeout=None):
        """Reads one line and asserts it matches regex entirely; returns the match."""
        got = self.line(timeout)
        m = re.fullmatch(regex, got)
        if not m:
            self._fail("expected a line matching %r, got %r" % (regex, got))
        return m

    def request(self, line, timeout=None):
        """Sends line + "\\n" and returns the reply line."""
        self.send(line + "\n")
        return self.line(timeout)

    def expect_eof(self, timeout=None, allow_reset=False):
        """Asserts that the server closes the connection with nothing more to say."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.eof:
            if self.buf:
                break
            if not self._fill(deadline):
                self._fail("connection still open after %.1fs" % timeout)
        if self.buf:
            self._fail("expected end of file, got %r" % self.buf[:200])
        if self.reset and not allow_reset:
            self._fail("connection reset instead of closed")

    def read_to_eof(self, timeout=None):
        """Everything until the server closes (reset counts as close). Returns bytes."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not self.eof:
            if not self._fill(deadline):
                self._fail("connection still open after %.1fs" % timeout)
        data, self.buf = self.buf, b""
        return data

    def silent(self):
        """True if nothing has arrived: no buffered bytes, not readable now.
        Only a hint that no reply was sent (one may be on its way); use it
        to catch a wrong early reply, never to prove an ordering."""
        if self.buf or self.eof:
            return False
        r, _, _ = select.select([self.sock], [], [], 0)
        return not r


def read_stats(c):
    """STATS over the client c, as {name: value-string}."""
    c.send("STATS\n")
    out = {}
    while True:
        line = c.line()
        if line == "END":
            return out
        m = re.fullmatch(r"STAT (\S+) (.*)", line)
        if not m:
            raise AssertionError("bad STATS line %r" % line)
        out[m.group(1)] = m.group(2)


def contend_sets(clients, sets, rounds):
    """Each client, in a thread of its own, takes its set (a list of names,
    in its own order) with one LOCK, checks that no other client holds any
    of them, and releases it with one UNLOCK, `rounds` times. Raises when two
    holds overlapped, when a reply is wrong or when one stalls past the
    client's timeout (a deadlock); returns the tokens each client was given."""
    held, guard, errors = set(), threading.Lock(), []
    tokens = [[] for _ in clients]

    def run(i):
        c, names = clients[i], sets[i]
        joined = ",".join(names)
        try:
            for _ in range(rounds):
                c.send("LOCK %s\n" % joined)
                m = c.expect_match(r"OK %s (\d+(?:,\d+)*)" % re.escape(joined))
                toks = m.group(1).split(",")
                if len(toks) != len(names):
                    raise AssertionError("%d tokens for %s" % (len(toks), joined))
                with guard:
                    if held & set(names):
                        raise AssertionError("%s granted while %s held" % (joined, held))
                    held.update(names)
                tokens[i].append(toks)
                with guard:
                    held.difference_update(names)
                c.send("UNLOCK %s\n" % joined)
                c.expect("OK %s" % joined)
        except BaseException as e:              # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return tokens


def stats(daemon):
    """The daemon's STATS as {name: value-string}, over a fresh connection."""
    with daemon.client() as c:
        return read_stats(c)


def can_bind(host):
    """True if a socket can bind host (e.g. "::1") on this machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return False
    try:
        s.bind((host, 0))
        return True
    except OSError as e:
        if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            return False
        raise
    finally:
        s.close()


# ------------------------------------------------------------------ a client host that dies

class NetNamespaceUnavailable(Exception):
    """This machine cannot give us a network namespace (not root, no iproute2,
    no namespace support in a container)."""


class NetNamespace:
    """A network namespace joined to this one by a veth pair: a stand-in for
    a client host whose network can be cut without a FIN or a RST.

        ns = NetNamespace()          # NetNamespaceUnavailable if it cannot be
        d = Daemon(listen=ns.host_ip + ":0")
        c = ns.client(d)             # a Client whose socket lives in the namespace
        ns.cut()                     # its packets vanish from now on
        ns.delete()

    The pair has addresses 10.X.Y.1 (this side, host_ip) and 10.X.Y.2 (the
    namespace, ns_ip) in a /30 no interface here uses yet: nothing leaves the
    machine. Needs root and iproute2's `ip`.
    """

    CLONE_NEWNET = 0x40000000
    _serial = itertools.count()

    def __init__(self):
        if os.geteuid() != 0:
            raise NetNamespaceUnavailable("not root")
        if not shutil.which("ip"):
            raise NetNamespaceUnavailable("no ip command (iproute2)")
        tag = "lb%05d%02x" % (os.getpid() % 100000, next(self._serial) % 256)
        self.name = tag                     # interface names: at most 15 bytes
        self.host_if = tag + "h"
        self.ns_if = tag + "n"
        self.host_ip, self.ns_ip = self._free_subnet()
        self._made = False
        _live_namespaces.add(self)
        try:
            self._ip("netns", "add", self.name)
            self._made = True
            self._ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            self._ip("link", "set", self.ns_if, "netns", self.name)
            self._ip("addr", "add", self.host_ip + "/30", "dev", self.host_if)
            self._ip("link", "set", self.host_if, "up")
            self._ip("-n", self.name, "addr", "add", self.ns_ip + "/30", "dev", self.ns_if)
            self._ip("-n", self.name, "link", "set", self.ns_if, "up")
        except NetNamespaceUnavailable:
            self.delete()
            raise

    @staticmethod
    def _ip(*args):
        p = subprocess.run(["ip"] + list(args), stdin=subprocess.DEVNULL, capture_output=True)
        if p.returncode != 0:
            raise NetNamespaceUnavailable("ip %s: %s" % (" ".join(args),
                                                         p.stderr.decode(errors="replace").strip()))
        return p.stdout.decode(errors="replace")

    @classmethod
    def _free_subnet(cls):
        """Two addresses of a 10.x.y.z/30 that no address here is in."""
        used = cls._ip("-o", "-4", "addr", "show")
        for i in range(1000):
            a, b, c = 200 + (os.getpid() + i) % 55, (os.getpid() * 7 + i) % 256, (i % 64) * 4
            prefix = "10.%d.%d." % (a, b)
            if prefix not in used:
                return prefix + str(c + 1), prefix + str(c + 2)
        raise NetNamespaceUnavailable("no free 10.x.y.0/24 found")

    @staticmethod
    def _setns(fd):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, NetNamespace.CLONE_NEWNET) != 0:
            return ctypes.get_errno()
        return 0

    def _enter(self):
        """Switches this thread into the namespace; returns the fd to come back by."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            fd = os.open("/run/netns/" + self.name, os.O_RDONLY)
        except OSError:
            os.close(back)
            raise
        try:
            e = self._setns(fd)
        finally:
            os.close(fd)
        if e:
            os.close(back)
            raise NetNamespaceUnavailable("setns: %s" % os.strerror(e))
        return back

    def client(self, daemon, timeout=None):
        """A Client connected from inside the namespace to daemon (TCP)."""
        mark = daemon.log_mark()
        back = self._enter()
        try:
            # A socket stays in the namespace it was made in.
            c = Client.tcp(daemon.host, daemon.port, family=daemon.family, timeout=timeout)
        finally:
            e = self._setns(back)
            os.close(back)
            if e:
                raise RuntimeError("cannot return from network namespace %s: %s; later "
                                   "tests would run inside it" % (self.name, os.strerror(e)))
        c.daemon = daemon
        c.mark = mark
        return c

    def cut(self):
        """Takes the namespace's end of the pair down: every packet to or from
        it is dropped from now on, and nothing tells the other side."""
        self._ip("-n", self.name, "link", "set", self.ns_if, "down")

    def delete(self):
        """Removes the pair and the namespace (idempotent)."""
        if not self._made:
            return
        self._made = False
        subprocess.run(["ip", "link", "del", self.host_if], stdin=subprocess.DEVNULL,
                       capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], stdin=subprocess.DEVNULL,
                       capture_output=True)
        _live_namespaces.discard(self)
