"""Real-ZooKeeper test harness for lockbroker's end-to-end tests.

Standard library only (Python >= 3.9; written for Debian 12's python3 3.11).
It runs the ZooKeeper server from Debian 12's ``zookeeper`` package (3.8.0)
under Java 17, on loopback ports only, with temporary data directories, and
always stops what it started.

Main entry points
-----------------
ZkServer            one standalone server (start/stop/kill/restart/pause/resume)
ZkEnsemble          a 3-server (or n-server) quorum on loopback ports;
                    proxied=True puts every path between members (and
                    clients, through hosts_for()) behind netcut.py proxies
                    that a test can cut and heal (ZkEnsemble.net)
register_cleanup()  unittest helper: stop + remove, or keep logs on failure
fourlw()            send a four-letter word, return the text answer
srvr(), mntr(), zxid(), mode(), sessions(), ephemerals()  parsed 4lw answers
ZkClient            a tiny synchronous ZooKeeper wire-protocol client
                    (create/delete/exists/get_data/get_children[2]/sync,
                    watches and wait_event(), reconnect to the same session)
wait_children()     wait until a node's children satisfy a predicate, on one
                    session, woken by a watch rather than polling
ls_recursive()      every znode under a path (Python client, fast)
ls_recursive_cli()  the same through org.apache.zookeeper.ZooKeeperMain

Environment
-----------
LB_KEEP_LOGS=1          keep every server's temporary directory (logs, data)
ZKHARNESS_JAVA          java binary (default: ``java`` on PATH)
ZKHARNESS_JVM_FLAGS     extra JVM flags appended to the server defaults
                        (split on whitespace); jvm_flags=[...] replaces them
ZKHARNESS_NO_PDEATHSIG  set to start servers without setpriv --pdeathsig

Clean-up
--------
Every server/ensemble created is registered; an atexit handler SIGKILLs the
survivors and removes their temporary directories (except those kept by
mark_failed()/LB_KEEP_LOGS). If SIGTERM had the default disposition when the
first server was created, a SIGTERM handler does the same but keeps the
directories (a test-suite timeout killing a hung test wants the logs).
Servers run under `setpriv --pdeathsig KILL`, so even a SIGKILLed Python
process does not leak JVMs (its temp dirs do stay behind then).

ZooKeeper 3.8 quirks handled here
---------------------------------
* '/usr/share/java/*' as class path binds SLF4J to a random one of six
  bindings (slf4j-nop on this machine -> no server log at all); classpath()
  lists exact jars and one binding (log4j 1.2).
* /etc/zookeeper/conf/log4j.properties says rootLogger=${zookeeper.root.logger}
  with no default -> "log4j:WARN No appenders"; we pass our own file via
  -Dlog4j.configuration and log to <dir>/zookeeper.log only.
* ruok answers imok before the server serves; srvr then says "This
  ZooKeeper instance is not currently serving requests". Readiness = imok
  AND a Mode line. A 4lw that arrives while zkDb is still null gets its
  answer but the socket is never closed (NPE in removeCnxn): probes use a
  short timeout and do not wait for EOF.
* ZooKeeperMain with a command on its command line exits without closing
  its session (it lingers until expiry and is counted by mntr/dump);
  zk_cli() feeds commands on stdin followed by `quit`.
* When the leader dies, followers drop ALL their clients too (they go
  LOOKING); clients must reconnect to keep their session.
* An election-port bind failure is retried 3x1 s and then exit(14), often
  after a quorum was already reported; ensembles use
  zookeeper.electionPortBindRetry=1 and check logs for BindException.
"""

import atexit
import collections
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

__all__ = [
    "ZkError", "ZkStartError", "ZkPortInUse", "ZkTimeout", "ZkApiError", "ZkNoNode",
    "ZkNodeExists", "ZkConnectionLoss",
    "ZkServer", "ZkEnsemble", "ZkClient", "register_cleanup",
    "leftover_processes", "global_session_count", "test_failed",
    "free_port", "free_ports", "classpath", "wait_for",
    "fourlw", "parse_kv", "srvr", "mntr", "mode", "zxid", "parse_zxid",
    "parse_cons", "cons", "sessions", "session_count",
    "parse_dump", "ephemerals",
    "ls_recursive", "ls_recursive_cli", "zk_cli", "cleanup_all", "keep_logs",
    "wait_children", "WatchedEvent",
    "digest_id", "OPEN_ACL_UNSAFE",
]

HOST = "127.0.0.1"
JAVA = os.environ.get("ZKHARNESS_JAVA", "java")
JAVA_DIR = "/usr/share/java"
QUORUM_PEER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZK_CLI_MAIN = "org.apache.zookeeper.ZooKeeperMain"

# Fast, light JVM. Measured on a (busy) 2-core VM, 12 interleaved starts each,
# time to "Mode: standalone": no flags 1.23 s median / 1.07 CPU-s; these
# without C1-only 1.33 s / 1.10 CPU-s; these 0.93 s / 0.83 CPU-s. C1-only
# (TieredStopAtLevel=1) is what saves CPU at start-up, which matters when 3
# servers start at once on 2 cores; steady-state request latency was not
# measurably different. SerialGC + small heap: fewer threads, ~64 MB RSS.
# -UsePerfData: no /tmp/hsperfdata_* files.
DEFAULT_JVM_FLAGS = [
    "-Xms64m", "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Xss512k",
    "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]
# For the short-lived CLI only C1 is worth it (no time for C2 to pay off).
CLI_JVM_FLAGS = [
    "-Xms16m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData", "-Xshare:auto", "-Djava.awt.headless=true",
    "-Djava.net.preferIPv4Stack=true",
]

SERVER_LOG4J = """\
# written by zkharness.py: everything goes to a file, nothing to the console
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=${zookeeper.log.dir}/${zookeeper.log.file}
log4j.appender.FILE.Append=true
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n
"""
QUIET_LOG4J = "log4j.rootLogger=OFF\n"


# --------------------------------------------------------------------------
# errors

class ZkError(Exception):
    """Base class of every harness error."""


class ZkStartError(ZkError):
    """A server did not come up (the message carries the log tail)."""


class ZkPortInUse(ZkStartError):
    """A server could not bind one of its ports."""


class ZkTimeout(ZkError):
    """wait_for() or a server wait ran out of time."""


class ZkApiError(ZkError):
    """A ZooKeeper request failed; .code is the KeeperException code."""

    def __init__(self, code, path=None):
        self.code = code
        self.path = path
        name = ERROR_NAMES.get(code, "error %d" % code)
        super().__init__("%s%s" % (name, " for %s" % path if path else ""))


class ZkNoNode(ZkApiError):
    pass


class ZkNodeExists(ZkApiError):
    pass


class ZkConnectionLoss(ZkApiError):
    pass


ERROR_NAMES = {
    -1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY",
    -4: "CONNECTIONLOSS", -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED",
    -7: "OPERATIONTIMEOUT", -8: "BADARGUMENTS", -12: "UNKNOWNSESSION",
    -100: "APIERROR", -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION",
    -108: "NOCHILDRENFOREPHEMERALS", -110: "NODEEXISTS", -111: "NOTEMPTY",
    -112: "SESSIONEXPIRED", -113: "INVALIDCALLBACK", -114: "INVALIDACL",
    -115: "AUTHFAILED", -118: "SESSIONMOVED", -119: "NOTREADONLY",
    -120: "EPHEMERALONLOCALSESSION", -121: "NOWATCHER",
    -123: "RECONFIGDISABLED", -125: "QUOTAEXCEEDED", -127: "THROTTLEDOP",
}


def _api_error(code, path=None):
    cls = {-101: ZkNoNode, -110: ZkNodeExists, -4: ZkConnectionLoss}.get(
        code, ZkApiError)
    return cls(code, path)


# --------------------------------------------------------------------------
# small helpers

def keep_logs():
    """True when LB_KEEP_LOGS is set to something other than ''/0/no/false."""
    v = os.environ.get("LB_KEEP_LOGS", "")
    return v.strip().lower() not in ("", "0", "no", "false")


def wait_for(predicate, timeout, interval=0.05, what="condition"):
    """Poll predicate() until it returns a truthy value; return that value.

    Exceptions from predicate count as "not yet". Raises ZkTimeout (with the
    last exception, if any) after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - "not yet"
            last_exc = e
        if time.monotonic() >= deadline:
            raise ZkTimeout("timed out after %.1fs waiting for %s%s" % (
                timeout, what,
                " (last error: %r)" % (last_exc,) if last_exc else ""))
        time.sleep(interval)


_handed_out_ports = set()
_ports_lock = threading.Lock()


def free_port(host=HOST, exclude=()):
    """A currently free TCP port on `host` (bind port 0, read it, close).

    Never returns the same port twice in one Python process, nor one in
    `exclude`. There is an unavoidable race until the server binds it; the
    server classes re-pick and retry when a bind fails at start.
    """
    for _ in range(200):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((host, 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        with _ports_lock:
            if port in _handed_out_ports or port in exclude:
                continue
            _handed_out_ports.add(port)
        return port
    raise ZkError("could not find a free port")


def free_ports(n, host=HOST):
    """n distinct free ports (see free_port)."""
    out = []
    while len(out) < n:
        out.append(free_port(host, exclude=out))
    return out


def classpath(conf_dir=None):
    """The JVM class path for server and CLI.

    Deliberately NOT '/usr/share/java/*': that directory holds six SLF4J
    bindings (nop, simple, jdk14, jcl, log4j12, maven3) plus log4j-over-slf4j,
    and the JVM expands '*' in directory order, so SLF4J binds to whichever
    comes first (on this machine slf4j-nop: ZooKeeper then logs nothing at
    all). zookeeper.jar's manifest Class-Path pulls in its own dependencies;
    we add exactly one binding (slf4j-log4j12 -> log4j 1.2), both hard
    dependencies of Debian's libzookeeper-java.
    """
    jars = ["zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar",
            "slf4j-log4j12.jar", "log4j-1.2.jar"]
    paths = [os.path.join(JAVA_DIR, j) for j in jars]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise ZkError("ZooKeeper jars missing (apt-get install zookeeper?): "
                      + ", ".join(missing))
    if conf_dir:
        paths.insert(0, conf_dir)
    return ":".join(paths)


def available():
    """Whether a server can be started here: java and Debian's jars."""
    if not shutil.which(JAVA):
        return False
    try:
        classpath()
    except ZkError:
        return False
    return True


_SETPRIV = shutil.which("setpriv")


def _pdeathsig_prefix():
    """Command prefix making the child get SIGKILL when the thread that
    started it dies (util-linux setpriv execs, so the pid stays the JVM's).
    Thread-safe, unlike a preexec_fn. Caveat of PR_SET_PDEATHSIG: it is the
    *thread* that spawned the child, so start servers from a thread that
    lives as long as they should (normally the main thread)."""
    if _SETPRIV and os.environ.get("ZKHARNESS_NO_PDEATHSIG") is None:
        return [_SETPRIV, "--pdeathsig", "KILL", "--"]
    return []


_spawned_pids = {}    # pid -> cfg path (or "cli"), for leftover_processes()


def leftover_processes():
    """[(pid, cmdline)] of JVMs this Python process started that still run
    (should be [] after cleanup). Checks /proc, so a recycled pid is not
    mistaken for ours."""
    out = []
    for pid, marker in list(_spawned_pids.items()):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmd:
            out.append((pid, cmd))
    return out


def _tail(path, lines=60):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as e:
        return "<cannot read %s: %s>" % (path, e)
    return "\n".join(data.splitlines()[-lines:])


def _read_from(path, offset):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# --------------------------------------------------------------------------
# four-letter words

def fourlw(port, cmd, host=HOST, timeout=5.0):
    """Send a four-letter word ('ruok', 'srvr', 'mntr', 'cons', 'dump',
    'wchc', 'stat', ...) to host:port and return the answer as text.

    Raises OSError (ConnectionRefusedError, socket.timeout) on failure.
    Note: while a server is still starting, ZooKeeper 3.8 can answer a 4lw
    and then fail to close the socket (NPE in ZooKeeperServer.removeCnxn
    because zkDb is null); the answer is then followed by a stall, so
    readiness probes below use a short timeout and do not wait for EOF.
    """
    if len(cmd) != 4:
        raise ValueError("four-letter word expected: %r" % (cmd,))
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(cmd.encode("ascii"))
        chunks = []
        while True:
            d = s.recv(65536)
            if not d:
                break
            chunks.append(d)
    return b"".join(chunks).decode("utf-8", "replace")


def _ruok(port, host=HOST, timeout=1.0):
    """True if the server answers imok (without waiting for EOF)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"ruok")
            got = b""
            while len(got) < 4:
                d = s.recv(16)
                if not d:
                    break
                got += d
            return got.startswith(b"imok")
    except OSError:
        return False


def parse_kv(text):
    """Parse 'Key: value' (srvr/stat), 'key<TAB>value' (mntr) or
    'key=value' (conf/envi) lines into a dict of strings. Lines without a
    separator are ignored."""
    out = {}
    for line in text.splitlines():
        if "\t" in line:
            k, v = line.split("\t", 1)
        elif ": " in line:
            k, v = line.split(": ", 1)
        elif "=" in line:
            k, v = line.split("=", 1)
        else:
            continue
        out[k.strip()] = v.strip()
    return out


def srvr(port, host=HOST, timeout=5.0):
    """`srvr` parsed: {'Zookeeper version': ..., 'Latency min/avg/max': ...,
    'Received': '12', 'Sent': ..., 'Connections': ..., 'Outstanding': ...,
    'Zxid': '0x...', 'Mode': 'standalone'|'leader'|'follower', 'Node count':
    ...}. An empty dict if the server is up but not serving."""
    return parse_kv(fourlw(port, "srvr", host, timeout))


def mntr(port, host=HOST, timeout=5.0):
    """`mntr` parsed into {key: value}; numeric values become int/float.
    Useful keys: zk_server_state, zk_num_alive_connections (includes the mntr
    connection itself), zk_global_sessions, zk_local_sessions,
    zk_ephemerals_count, zk_znode_count, zk_watch_count, zk_outstanding_requests.
    """
    out = {}
    for k, v in parse_kv(fourlw(port, "mntr", host, timeout)).items():
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def mode(port, host=HOST, timeout=2.0):
    """'standalone', 'leader', 'follower', 'observer', or None if the server
    is unreachable or not serving (e.g. looking for a leader)."""
    try:
        return srvr(port, host, timeout).get("Mode")
    except OSError:
        return None


def parse_zxid(text):
    """The zxid from `srvr`/`stat` text ('Zxid: 0x100000003') as an int."""
    m = re.search(r"^Zxid:\s*(0x[0-9a-fA-F]+)", text, re.M)
    if not m:
        raise ZkError("no Zxid line in %r" % (text[:200],))
    return int(m.group(1), 16)


def zxid(port, host=HOST):
    """Last processed zxid of the server (int). High 32 bits: epoch."""
    return parse_zxid(fourlw(port, "srvr", host))


_CONS_RE = re.compile(r"^\s*/?(?P<addr>[^\[\s]+)\[(?P<interest>\d+)\]\((?P<body>.*)\)\s*$")


def parse_cons(text):
    """Parse `cons` into a list of dicts, one per client connection:
    {'addr': '127.0.0.1:40118', 'sid': 0x10000... or None, 'to': 4000, ...}
    (all other k=v fields as strings; numeric ones parsed where obvious).

    The 4lw connection that asked also appears, without sid: it has not
    started a session. Count sessions with [c for c in ... if c['sid']]."""
    out = []
    for line in text.splitlines():
        m = _CONS_RE.match(line)
        if not m:
            continue
        d = {"addr": m.group("addr"), "sid": None}
        for item in m.group("body").split(","):
            if "=" not in item:
                continue
            k, v = item.split("=", 1)
            k = k.strip()
            v = v.strip()
            if k in ("sid", "lcxid", "lzxid"):
                try:
                    v = int(v, 16)
                except ValueError:
                    pass
            elif k in ("queued", "recved", "sent", "to", "llat", "minlat",
                       "avglat", "maxlat", "est", "lresp"):
                try:
                    v = int(v)
                except ValueError:
                    pass
            d[k] = v
        out.append(d)
    return out


def cons(port, host=HOST):
    """`cons` parsed (see parse_cons)."""
    return parse_cons(fourlw(port, "cons", host))


def sessions(ports, host=HOST):
    """Set of session ids with a live client connection on the given
    server(s) (a port or a list of ports: pass every ensemble member, a client
    is connected to only one). Excludes the 4lw connection itself."""
    if isinstance(ports, int):
        ports = [ports]
    sids = set()
    for p in ports:
        try:
            text = fourlw(p, "cons", host)
        except OSError:
            continue
        for c in parse_cons(text):
            if c.get("sid"):
                sids.add(c["sid"])
    return sids


def session_count(ports, host=HOST):
    """len(sessions(ports))."""
    return len(sessions(ports, host))


def global_session_count(port, host=HOST):
    """mntr zk_global_sessions: sessions the server (standalone or leader)
    tracks, including ones whose client is disconnected but not expired."""
    return int(mntr(port, host)["zk_global_sessions"])


def parse_dump(text):
    """Parse `dump` into {session_id: [ephemeral paths]} (sessions with
    ephemerals only). Works on standalone servers and leaders (and on 3.8
    followers too, which hold the same DataTree)."""
    out = {}
    cur = None
    in_eph = False
    for line in text.splitlines():
        if line.startswith("Sessions with Ephemerals"):
            in_eph = True
            continue
        if not in_eph:
            continue
        if line.startswith(("Connections dump", "Connection Sets",
                            "Connections Sets")):
            break
        m = re.match(r"^(0x[0-9a-fA-F]+):\s*$", line)
        if m:
            cur = int(m.group(1), 16)
            out.setdefault(cur, [])
            continue
        s = line.strip()
        if cur is not None and s.startswith("/"):
            out[cur].append(s)
    return out


def ephemerals(port, host=HOST):
    """{session_id: [ephemeral paths]} from `dump` on that server."""
    return parse_dump(fourlw(port, "dump", host))


# --------------------------------------------------------------------------
# process registry / cleanup

_registry = []           # every ZkServer ever created (weakly: they cleanup)
_registry_lock = threading.Lock()
_sigterm_installed = False


def _register(server):
    global _sigterm_installed
    with _registry_lock:
        _registry.append(server)
    if not _sigterm_installed and threading.current_thread() is threading.main_thread():
        _sigterm_installed = True
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def _on_sigterm(signum, frame):
    # typically a test-suite timeout killing a hung test: keep the logs
    with _registry_lock:
        things = list(_registry)
    for t in things:
        t.keep = True
    cleanup_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def cleanup_all():
    """SIGKILL every server this process started and remove temp dirs
    (unless LB_KEEP_LOGS or a failure marked them kept). Safe to call twice;
    runs at exit."""
    with _registry_lock:
        servers = list(_registry)
        del _registry[:]
    for s in servers:
        try:
            s.kill()
        except Exception:  # noqa: BLE001
            pass
    for s in servers:
        try:
            s.cleanup()
        except Exception:  # noqa: BLE001
            pass


atexit.register(cleanup_all)


# --------------------------------------------------------------------------
# servers

class ZkServer:
    """One ZooKeeper server process (standalone, or a member of a ZkEnsemble).

    Standalone use::

        with ZkServer(tick_ms=500) as zk:
            zk.connect_string        # '127.0.0.1:41234'
            zk.restart()             # same port, same data dir
            zk.kill(); zk.start()    # SIGKILL, then come back

    Arguments:
      tick_ms         tickTime (default 500 ms -> sessions 1 s .. 10 s)
      min_session_ms  minSessionTimeout (ZooKeeper default 2*tickTime)
      max_session_ms  maxSessionTimeout (ZooKeeper default 20*tickTime)
      port            client port (default: a free one, re-picked on a bind
                      failure at the first start)
      extra_cfg       dict of further zoo.cfg lines (overrides ours)
      jvm_flags       replaces DEFAULT_JVM_FLAGS (+ $ZKHARNESS_JVM_FLAGS)
      sys_props       dict of extra -Dkey=value
      container_check_ms  znode.container.checkIntervalMs (ZooKeeper default
                      60000; default here 1000 so empty CONTAINER parents
                      really disappear during a test). None = ZK default.
      force_sync      False (default) writes forceSync=no: no fsync per txn;
                      data still reaches the OS, so SIGKILL/restart of the
                      JVM loses nothing. True for ZK's default behaviour.
      base_dir        directory to use instead of a fresh temp dir
      name            label for logs/temp dir

    Attributes: port, pid (None when not running), dir, data_dir, cfg_path,
    log_path (ZooKeeper's log4j file), out_path (JVM stdout/stderr).
    """

    def __init__(self, tick_ms=500, min_session_ms=None, max_session_ms=None,
                 port=None, extra_cfg=None, jvm_flags=None, sys_props=None,
                 container_check_ms=1000, force_sync=False, base_dir=None,
                 name="zk", _ensemble=None, _myid=None):
        self.tick_ms = int(tick_ms)
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.extra_cfg = dict(extra_cfg or {})
        self.jvm_flags = list(DEFAULT_JVM_FLAGS if jvm_flags is None else jvm_flags)
        self.jvm_flags += os.environ.get("ZKHARNESS_JVM_FLAGS", "").split()
        self.sys_props = dict(sys_props or {})
        if container_check_ms is not None:
            self.sys_props.setdefault("znode.container.checkIntervalMs",
                                      str(int(container_check_ms)))
        self.force_sync = force_sync
        self.name = name
        self._auto_port = port is None
        self.port = port if port is not None else free_port()
        self._ensemble = _ensemble
        self.myid = _myid
        # the node name netcut.Net knows this member by
        self.node = "s%d" % _myid if _myid is not None else None
        self.quorum_port = None
        self.election_port = None
        self._own_dir = base_dir is None
        self.dir = base_dir or tempfile.mkdtemp(prefix="zkharness-%s-" % name)
        os.makedirs(self.dir, exist_ok=True)
        self.data_dir = os.path.join(self.dir, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.cfg_path = os.path.join(self.dir, "zoo.cfg")
        self.log4j_path = os.path.join(self.dir, "log4j.properties")
        self.log_path = os.path.join(self.dir, "zookeeper.log")
        self.out_path = os.path.join(self.dir, "zookeeper.out")
        self.proc = None
        self.keep = False          # set by mark_failed() / LB_KEEP_LOGS
        self.start_seconds = None  # duration of the last successful start
        self._cleaned = False
        self._expect_up = False
        self._log_offset = self._out_offset = 0
        with open(self.log4j_path, "w") as f:
            f.write(SERVER_LOG4J)
        _register(self)

    # ---- configuration ------------------------------------------------

    def config(self):
        """zoo.cfg contents as an ordered dict."""
        c = collections.OrderedDict()
        c["tickTime"] = self.tick_ms
        if self.min_session_ms is not None:
            c["minSessionTimeout"] = int(self.min_session_ms)
        if self.max_session_ms is not None:
            c["maxSessionTimeout"] = int(self.max_session_ms)
        c["dataDir"] = self.data_dir
        c["clientPort"] = self.port
        c["clientPortAddress"] = HOST
        c["admin.enableServer"] = "false"
        c["4lw.commands.whitelist"] = "*"
        c["maxClientCnxns"] = 0            # no per-IP limit: all tests are 127.0.0.1
        c["forceSync"] = "yes" if self.force_sync else "no"
        c["preAllocSize"] = 4096           # KB; default 64 MB txn log files
        c["autopurge.purgeInterval"] = 0
        if self._ensemble is not None:
            c["initLimit"] = self._ensemble.init_limit
            c["syncLimit"] = self._ensemble.sync_limit
            c["quorumListenOnAllIPs"] = "false"
            c["reconfigEnabled"] = "false"
            net = self._ensemble.net
            for m in self._ensemble.servers:
                if net is None or m is self:
                    c["server.%d" % m.myid] = "%s:%d:%d" % (
                        HOST, m.quorum_port, m.election_port)
                else:
                    # this server reaches m through proxies (ZkEnsemble)
                    c["server.%d" % m.myid] = "%s:%d:%d" % (
                        HOST, net.address(self.node, m.node, "quorum")[1],
                        net.address(self.node, m.node, "election")[1])
        c.update(self.extra_cfg)
        return c

    def _write_config(self):
        with open(self.cfg_path, "w") as f:
            f.write("# written by zkharness.py\n")
            for k, v in self.config().items():
                f.write("%s=%s\n" % (k, v))
        if self.myid is not None:
            with open(os.path.join(self.data_dir, "myid"), "w") as f:
                f.write("%d\n" % self.myid)

    def command(self):
        """The java command line used to run this server."""
        props = {
            "zookeeper.log.dir": self.dir,
            "zookeeper.log.file": "zookeeper.log",
            # in case something falls back to /etc/zookeeper/conf/log4j.properties
            "zookeeper.root.logger": "INFO,ROLLINGFILE",
            "log4j.configuration": "file:" + self.log4j_path,
            # no log4j MBeans (avoids a log4j:WARN on stderr)
            "zookeeper.jmx.log4j.disable": "true",
        }
        props.update(self.sys_props)
        cmd = [JAVA] + self.jvm_flags
        cmd += ["-D%s=%s" % kv for kv in props.items()]
        cmd += ["-cp", classpath(), QUORUM_PEER_MAIN, self.cfg_path]
        return cmd

    # ---- life cycle ---------------------------------------------------

    @property
    def pid(self):
        """PID of the running JVM, or None."""
        if self.proc is not None and self.proc.poll() is None:
            return self.proc.pid
        return None

    @property
    def connect_string(self):
        return "%s:%d" % (HOST, self.port)

    def alive(self):
        return self.pid is not None

    def spawn(self):
        """Start the JVM without waiting (ensembles start all, then wait)."""
        if self.alive():
            raise ZkError("%s already running (pid %d)" % (self.name, self.pid))
        if self.proc is not None:
            self.proc.wait()
        self._write_config()
        self._log_offset = _size(self.log_path)
        self._out_offset = _size(self.out_path)
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(
                _pdeathsig_prefix() + self.command(), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, cwd=self.dir,
                close_fds=True)
        finally:
            out.close()
        _spawned_pids[self.proc.pid] = self.cfg_path
        self._spawned_at = time.monotonic()

    def _new_output(self):
        return (_read_from(self.log_path, self._log_offset) + "\n"
                + _read_from(self.out_path, self._out_offset))

    def _check_died(self):
        if self.proc is not None and self.proc.poll() is not None:
            text = self._new_output()
            msg = "%s (pid %d) exited with %s during start-up\n%s" % (
                self.name, self.proc.pid, self.proc.returncode,
                "\n".join(text.splitlines()[-40:]))
            if ("Address already in use" in text or "BindException" in text
                    or self.proc.returncode == 14):
                raise ZkPortInUse(msg)
            raise ZkStartError(msg)

    def serving_mode(self):
        """Mode from srvr if the server is serving, else None (fast probe)."""
        if not _ruok(self.port):
            return None
        try:
            return srvr(self.port, timeout=1.0).get("Mode")
        except OSError:
            return None

    def wait_ready(self, timeout=30.0, modes=("standalone",)):
        """Wait until ruok -> imok and srvr says Mode in `modes`."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_died()
            m = self.serving_mode()
            if m in modes:
                return m
            if time.monotonic() >= deadline:
                raise ZkStartError(
                    "%s not ready after %.1fs (mode %r)\n%s" % (
                        self.name, timeout, m, self.log_tail(40)))
            time.sleep(0.05)

    def start(self, timeout=30.0, retries=3):
        """Start and wait until serving (standalone; or leader/follower for
        an ensemble member that is (re)started alone). Returns self.

        If the port was picked automatically and binding fails at the very
        first start, a new port is picked and the start retried."""
        if self._ensemble is not None:
            t0 = time.monotonic()
            self.spawn()
            try:
                self.wait_ready(timeout, modes=("leader", "follower"))
            except BaseException:
                self.kill()
                raise
            self.start_seconds = time.monotonic() - t0
            return self
        attempt = 0
        while True:
            attempt += 1
            t0 = time.monotonic()
            self.spawn()
            try:
                self.wait_ready(timeout)
            except ZkPortInUse:
                self.kill()
                if not (self._auto_port and attempt < retries):
                    raise
                self.port = free_port()
                continue
            except BaseException:
                self.kill()
                raise
            self.start_seconds = time.monotonic() - t0
            self._auto_port = False   # from now on the port is part of identity
            return self

    def restart(self, timeout=30.0, grace=10.0, hard=False):
        """Stop (SIGTERM, or SIGKILL if hard) and start again on the same
        port and data dir. Returns the seconds from the stop request until
        the server serves again (the outage clients see)."""
        t0 = time.monotonic()
        if hard:
            self.kill()
        else:
            self.stop(grace)
        self._auto_port = False
        self.start(timeout)
        return time.monotonic() - t0

    def stop(self, grace=10.0):
        """SIGTERM, wait up to `grace` s, then SIGKILL. Returns the exit code
        (None if it was not running)."""
        p = self.proc
        if p is None or p.poll() is not None:
            return p.returncode if p is not None else None
        try:
            os.kill(p.pid, signal.SIGCONT)   # a SIGSTOPped JVM cannot exit
            p.terminate()
        except ProcessLookupError:
            pass
        try:
            return p.wait(grace)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self):
        """SIGKILL now and reap. Returns the exit code (None if not running)."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            try:
                p.kill()
            except ProcessLookupError:
                pass
        return p.wait()

    def pause(self):
        """SIGSTOP the JVM (clients see a hung server, sessions stay).
        Returns once it is stopped: kill() only sends the signal."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED)

    def resume(self):
        """SIGCONT the JVM."""
        os.kill(self.proc.pid, signal.SIGCONT)

    # ---- diagnostics ---------------------------------------------------

    def log_tail(self, lines=60):
        """Last lines of zookeeper.log and zookeeper.out (for failures)."""
        return "==> %s <==\n%s\n==> %s <==\n%s" % (
            self.log_path, _tail(self.log_path, lines),
            self.out_path, _tail(self.out_path, 20))

    def mark_failed(self, stream=None, lines=60):
        """Keep this server's directory at cleanup and print its log tail."""
        self.keep = True
        stream = stream or sys.stderr
        stream.write("\n--- zkharness: %s kept in %s ---\n%s\n" % (
            self.name, self.dir, self.log_tail(lines)))
        stream.flush()

    def cleanup(self):
        """Kill the JVM and remove the temp dir (unless kept)."""
        self.kill()
        if self._cleaned:
            return
        self._cleaned = True
        if self._own_dir and not self.keep and not keep_logs():
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self._own_dir:
            sys.stderr.write("zkharness: kept %s\n" % self.dir)

    def __enter__(self):
        if not self.alive():
            self.start()
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None and not (etype is KeyboardInterrupt):
            self.mark_failed()
        self.stop(grace=5.0)
        self.cleanup()
        return False

    def __repr__(self):
        return "<ZkServer %s port=%s pid=%s dir=%s>" % (
            self.name, self.port, self.pid, self.dir)


def _netcut():
    """tests/e2e/netcut.py (beside this file), imported on first use."""
    try:
        import netcut
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import netcut
    return netcut


class ZkEnsemble:
    """An n-server (default 3) ZooKeeper quorum on loopback ports.

        with ZkEnsemble() as ens:
            ens.connect_string          # '127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3'
            old = ens.leader()
            old.kill()
            new = ens.wait_quorum()     # new leader among the two others
            old.restart()               # rejoins as a follower

    Each member uses 3 ports (client, quorum, election), all on 127.0.0.1,
    its own data dir with a myid file, and zoo.cfg with server.N lines.
    Keyword arguments not listed are passed to every ZkServer.

    Partitions (proxied=True, or net=<a netcut.Net>): every path between
    two members goes through a proxy of `self.net` (tests/e2e/netcut.py)
    that the test can cut and heal. Members are the net's nodes "s1".."sn"
    (ZkServer.node). Each member's zoo.cfg lists the proxies for the OTHER
    members (its own line stays its real address, which it binds): one
    listener per ordered pair and port, so member i's connections to j go
    through i->j listeners, and j's to i through j->i ones. Election
    connections have their first message's address rewritten (see
    netcut.election_rewriter). Clients get a hosts string of proxies of
    their own with hosts_for(client) (a node name, or a Daemon: its name);
    net.backend(client) then says which member its session is on. The test
    itself (4lw, ZkClient) still talks to the real ports. A net made here
    is closed at cleanup(); one passed in is left to its owner.

        ens = ZkEnsemble(proxied=True)
        leader = ens.start()
        hosts = ens.hosts_for("D0")
        ens.net.partition({"D0", "s2"}, {"s1", "s3", "D1"})
    """

    def __init__(self, n=3, tick_ms=500, init_limit=10, sync_limit=5,
                 base_dir=None, name="ens", proxied=False, net=None, **server_kwargs):
        self.n = n
        self.tick_ms = tick_ms
        self._own_net = False
        self.net = net
        if net is None and proxied:
            self.net = _netcut().Net(name=name)
            self._own_net = True
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.name = name
        self._own_dir = base_dir is None
        self.dir = base_dir or tempfile.mkdtemp(prefix="zkharness-%s-" % name)
        self.servers = []
        self.keep = False
        self.start_seconds = None
        self._kw = dict(server_kwargs, tick_ms=tick_ms)
        for i in range(1, n + 1):
            kw = dict(self._kw)
            props = dict(kw.pop("sys_props", None) or {})
            # fail fast (exit 14) instead of 3 bind retries 1 s apart when
            # the election port is taken, so start() can re-pick ports
            props.setdefault("zookeeper.electionPortBindRetry", "1")
            # FastLeaderElection doubles its notification timeout from 200 ms
            # up to 60 s while peers do not answer (e.g. still starting on a
            # loaded machine); cap it so elections never stall for long
            props.setdefault("zookeeper.fastleader.maxNotificationInterval", "1000")
            s = ZkServer(base_dir=os.path.join(self.dir, "s%d" % i),
                         name="%s-s%d" % (name, i), _ensemble=self, _myid=i,
                         sys_props=props, **kw)
            self.servers.append(s)
        if self.net is not None:
            # before the servers' ports are picked: the proxies hold theirs
            self._make_proxies()
        self._pick_ports()
        self._cleaned = False
        _register(self)

    def _make_proxies(self):
        netcut = _netcut()
        for a in self.servers:
            for b in self.servers:
                if a is b:
                    continue
                # retry_refused: a follower that connects a few ms before
                # the new leader listens must not see a reset (netcut.py)
                self.net.proxy(a.node, b.node, lambda b=b: (HOST, b.quorum_port),
                               kind="quorum", retry_refused=2.0)
        for a in self.servers:
            for b in self.servers:
                if a is b:
                    continue
                # a's election connections to b say "call me back through b->a"
                back = lambda a=a, b=b: self.net.addr_str(b.node, a.node, "election")
                self.net.proxy(a.node, b.node, lambda b=b: (HOST, b.election_port),
                               kind="election", rewrite=netcut.election_rewriter(back),
                               retry_refused=2.0)

    def hosts_for(self, client):
        """A hosts string for a client node (a name, or an object with
        .name such as lbharness.Daemon's name) that reaches each member
        through a proxy of its own: "127.0.0.1:p1,...", in myid order."""
        if self.net is None:
            raise ZkError("hosts_for() needs ZkEnsemble(proxied=True)")
        client = _netcut().node_name(client)
        out = []
        for s in self.servers:
            h, p = self.net.proxy(client, s.node, lambda s=s: (HOST, s.port), kind="client")
            out.append("%s:%d" % (h, p))
        return ",".join(out)

    def server(self, node):
        """The member whose node name (or myid) this is."""
        for s in self.servers:
            if s.node == node or s.myid == node:
                return s
        raise ZkError("no member %r" % (node,))

    def _pick_ports(self):
        ports = free_ports(3 * self.n)
        for i, s in enumerate(self.servers):
            s.port, s.quorum_port, s.election_port = ports[3 * i:3 * i + 3]

    @property
    def ports(self):
        """Client ports, in myid order."""
        return [s.port for s in self.servers]

    @property
    def connect_string(self):
        return ",".join(s.connect_string for s in self.servers)

    @property
    def pids(self):
        return [s.pid for s in self.servers]

    def modes(self):
        """{myid: mode or None}."""
        return {s.myid: (s.serving_mode() if s.alive() else None)
                for s in self.servers}

    def leader(self):
        """The member whose srvr says Mode: leader, or None."""
        for s in self.servers:
            if s.alive() and s.serving_mode() == "leader":
                return s
        return None

    def followers(self):
        return [s for s in self.servers
                if s.alive() and s.serving_mode() == "follower"]

    def wait_quorum(self, timeout=60.0):
        """Wait until every running member serves, exactly one as leader and
        the others as followers; return the leader."""
        deadline = time.monotonic() + timeout
        loops = 0
        while True:
            loops += 1
            running = [s for s in self.servers if s.alive()]
            for s in self.servers:
                if s._expect_up and s.proc is not None and not s.alive():
                    s._check_died()
                if s._expect_up and loops % 10 == 0 and \
                        "Address already in use" in s._new_output():
                    raise ZkPortInUse("%s logged a bind failure" % s.name)
            modes = [s.serving_mode() for s in running]
            if (modes.count("leader") == 1
                    and modes.count("follower") == len(running) - 1):
                return running[modes.index("leader")]
            if time.monotonic() >= deadline:
                raise ZkStartError("%s: no quorum after %.1fs: %r\n%s" % (
                    self.name, timeout, self.modes(),
                    "\n".join(s.log_tail(20) for s in self.servers)))
            time.sleep(0.05)

    def start(self, timeout=60.0, retries=3):
        """Start every member and wait for a leader and n-1 followers;
        returns the leader. On a port clash (a member exits because it
        could not bind, or logged BindException) all ports are re-picked and
        the whole ensemble restarted, up to `retries` attempts."""
        for attempt in range(1, retries + 1):
            t0 = time.monotonic()
            for s in self.servers:
                s._expect_up = True
                s.spawn()
            try:
                leader = self.wait_quorum(timeout)
                clash = [s.name for s in self.servers
                         if "Address already in use" in s._new_output()]
                if clash:
                    raise ZkPortInUse("bind failure logged by %s" % clash)
            except ZkPortInUse:
                for s in self.servers:
                    s.kill()
                if attempt == retries or self.start_seconds is not None:
                    raise     # ports are fixed once it has run (data dirs)
                for s in self.servers:
                    shutil.rmtree(s.data_dir, ignore_errors=True)
                    os.makedirs(s.data_dir)
                self._pick_ports()
                continue
            except BaseException:
                for s in self.servers:
                    s.kill()
                raise
            finally:
                for s in self.servers:
                    s._expect_up = False
            self.start_seconds = time.monotonic() - t0
            return leader

    def kill_leader(self, timeout=60.0):
        """SIGKILL the current leader; return (old_leader, new_leader)."""
        old = self.leader()
        if old is None:
            raise ZkError("no leader to kill: %r" % self.modes())
        old.kill()
        return old, self.wait_quorum(timeout)

    def stop(self, grace=10.0):
        """SIGTERM all members (then SIGKILL after grace)."""
        for s in self.servers:
            if s.alive():
                s.proc.terminate()
        for s in self.servers:
            s.stop(grace)

    def kill(self):
        for s in self.servers:
            s.kill()

    def mark_failed(self, stream=None, lines=40):
        """Keep the ensemble's directory and print every member's log tail."""
        self.keep = True
        for s in self.servers:
            s.mark_failed(stream, lines)

    def cleanup(self):
        self.kill()
        for s in self.servers:
            s.cleanup()
        if self._cleaned:
            return
        self._cleaned = True
        if self._own_net:
            self.net.close()
        if self._own_dir and not keep_logs() and not self.keep and \
                not any(s.keep for s in self.servers):
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self._own_dir:
            sys.stderr.write("zkharness: kept %s\n" % self.dir)

    def __enter__(self):
        if not any(s.alive() for s in self.servers):
            self.start()
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None and etype is not KeyboardInterrupt:
            self.mark_failed()
        self.stop(grace=5.0)
        self.cleanup()
        return False

    def __repr__(self):
        return "<ZkEnsemble %s %r>" % (self.name, self.servers)


def test_failed(testcase):
    """True if the running unittest test has failed so far (usable from
    tearDown and cleanups; relies on unittest internals of 3.9-3.12 and
    returns False if they change)."""
    outcome = getattr(testcase, "_outcome", None)
    if outcome is None:
        return False
    if getattr(outcome, "success", True) is False:
        return True
    result = getattr(outcome, "result", None)
    for kind in ("errors", "failures"):
        for t, _ in getattr(result, kind, None) or ():
            if t is testcase:
                return True
    return False


def register_cleanup(testcase, thing, grace=5.0):
    """unittest helper: testcase.addCleanup() that stops `thing` (ZkServer or
    ZkEnsemble) and removes its files; if the test failed, prints the log
    tails and keeps the directory instead. Returns `thing`.

        self.zk = register_cleanup(self, ZkServer().start())
    """
    def done():
        try:
            if test_failed(testcase):
                thing.mark_failed()
        finally:
            thing.stop(grace)
            thing.cleanup()
    testcase.addCleanup(done)
    return thing


# --------------------------------------------------------------------------
# a tiny synchronous ZooKeeper client (jute wire protocol)

# opcodes
OP_CREATE, OP_DELETE, OP_EXISTS, OP_GETDATA = 1, 2, 3, 4
OP_SYNC, OP_GETCHILDREN, OP_PING, OP_GETCHILDREN2 = 9, 8, 11, 12
OP_CREATECONTAINER, OP_CLOSE = 19, -11
OP_SETDATA, OP_GETACL, OP_SETAUTH = 5, 6, 100
AUTH_XID = -4
WATCH_XID, PING_XID = -1, -2
# watch event types (WatchedEvent.type)
EVENT_CREATED, EVENT_DELETED, EVENT_DATA_CHANGED, EVENT_CHILDREN_CHANGED = 1, 2, 3, 4
# permission bits of an ACL entry
PERM_READ, PERM_WRITE, PERM_CREATE, PERM_DELETE, PERM_ADMIN, PERM_ALL = 1, 2, 4, 8, 16, 31
# create flags
PERSISTENT, EPHEMERAL, PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL = 0, 1, 2, 3
CONTAINER = 4

Stat = collections.namedtuple("Stat", [
    "czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
    "ephemeralOwner", "dataLength", "numChildren", "pzxid"])
_STAT = struct.Struct(">qqqqiiiqiiq")
# A watch that fired: type EVENT_*, the session's state, the node's path.
WatchedEvent = collections.namedtuple("WatchedEvent", ["type", "state", "path"])
OPEN_ACL_UNSAFE = [(PERM_ALL, "world", "anyone")]


def digest_id(user_password):
    """The id ZooKeeper's digest scheme stores for "user:password":
    "user:base64(sha1(user:password))"."""
    import base64
    import hashlib
    user = user_password.split(":", 1)[0]
    sha = hashlib.sha1(user_password.encode("utf-8")).digest()
    return "%s:%s" % (user, base64.b64encode(sha).decode("ascii"))


def _s(text):
    if text is None:
        return struct.pack(">i", -1)
    b = text.encode("utf-8")
    return struct.pack(">i", len(b)) + b


def _buf(data):
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + data


def _acl(entries):
    return struct.pack(">i", len(entries)) + b"".join(
        struct.pack(">i", perms) + _s(scheme) + _s(ident) for perms, scheme, ident in entries)


class _Reader:
    def __init__(self, data):
        self.d = data
        self.i = 0

    def int(self):
        v = struct.unpack_from(">i", self.d, self.i)[0]
        self.i += 4
        return v

    def long(self):
        v = struct.unpack_from(">q", self.d, self.i)[0]
        self.i += 8
        return v

    def bool(self):
        v = self.d[self.i] != 0
        self.i += 1
        return v

    def buf(self):
        n = self.int()
        if n < 0:
            return None
        v = self.d[self.i:self.i + n]
        self.i += n
        return v

    def str(self):
        b = self.buf()
        return None if b is None else b.decode("utf-8")

    def stat(self):
        v = Stat(*_STAT.unpack_from(self.d, self.i))
        self.i += _STAT.size
        return v


class ZkClient:
    """Minimal synchronous ZooKeeper client for test assertions.

    Creates a real session (it shows in `cons`, so do not keep one open
    while counting a daemon's sessions). No automatic reconnect. Use as a
    context manager; close() ends the session at once. Call ping() (or
    start_keepalive()) if you hold it open longer than the session timeout/3;
    wait_event() pings by itself while it waits. exists() and
    get_children() take watch=True; wait_event() returns what fired.

        with ZkClient(zk.connect_string) as c:
            c.get_children('/')          # ['zookeeper']
    """

    def __init__(self, hosts, timeout_ms=10000, connect_timeout=5.0):
        self.hosts = hosts
        self.sock = None
        self.server = None
        self.session_id = 0
        self.passwd = b"\0" * 16
        self.last_zxid = 0
        self.timeout_ms = int(timeout_ms)
        self.connect_timeout = connect_timeout
        self.negotiated_timeout_ms = None
        self._xid = 0
        self._lock = threading.Lock()
        self._events = collections.deque()     # WatchedEvents not yet taken
        self._ka_stop = None
        self._open()

    def _open(self):
        addrs = []
        for h in self.hosts.split(","):
            host, _, port = h.strip().rpartition(":")
            addrs.append((host or HOST, int(port)))
        random.shuffle(addrs)
        last = None
        for a in addrs:
            try:
                self._connect(a)
                self.server = a
                return
            except ZkApiError as e:
                if self.sock:
                    self.sock.close()
                    self.sock = None
                if e.code == -112:
                    raise
                last = e
            except (OSError, ZkError, struct.error) as e:
                last = e
                if self.sock:
                    self.sock.close()
                    self.sock = None
        raise ZkConnectionLoss(-4, "connect to %s failed: %r" % (self.hosts, last))

    def _connect(self, addr):
        self.sock = socket.create_connection(addr, timeout=self.connect_timeout)
        req = struct.pack(">iqiq", 0, self.last_zxid, self.timeout_ms,
                          self.session_id) + _buf(self.passwd) + b"\0"
        self._send(req)
        r = _Reader(self._recv())
        r.int()  # protocol version
        timeout = r.int()
        sid = r.long()
        passwd = r.buf()
        if timeout <= 0:
            # the server says this session is gone (expired/closed)
            raise ZkApiError(-112, "session 0x%x" % self.session_id)
        self.negotiated_timeout_ms, self.session_id, self.passwd = timeout, sid, passwd

    def reconnect(self):
        """Re-attach to the SAME session (id + password), possibly on another
        server; raises ZkApiError(SESSIONEXPIRED) if the session is gone
        (only if every server answered, else ZkConnectionLoss)."""
        with self._lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            self._open()

    def _send(self, payload):
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def _recvn(self, n):
        out = b""
        while len(out) < n:
            d = self.sock.recv(n - len(out))
            if not d:
                raise ZkConnectionLoss(-4, "server closed the connection")
            out += d
        return out

    def _recv(self):
        n = struct.unpack(">i", self._recvn(4))[0]
        return self._recvn(n)

    def _next_frame(self):
        """Reads one reply frame: (xid, err, reader past the header). A
        watch event is queued for wait_event() on the way."""
        r = _Reader(self._recv())
        rxid, zxid_, err = r.int(), r.long(), r.int()
        if zxid_ > 0:
            self.last_zxid = max(self.last_zxid, zxid_)
        if rxid == WATCH_XID:
            self._events.append(WatchedEvent(r.int(), r.int(), r.str()))
        return rxid, err, r

    def _call(self, op, body, path=None, xid=None):
        with self._lock:
            if self.sock is None:
                raise ZkConnectionLoss(-4, "closed")
            if xid is None:
                self._xid += 1
                xid = self._xid
            self._send(struct.pack(">ii", xid, op) + body)
            while True:
                rxid, err, r = self._next_frame()
                if rxid in (WATCH_XID, PING_XID):
                    continue
                if rxid != xid:
                    raise ZkError("unexpected xid %d (want %d)" % (rxid, xid))
                if err:
                    raise _api_error(err, path)
                return r

    def get_children(self, path, watch=False):
        """Sorted child names; raises ZkNoNode. watch: the next change of
        the children (or the node's deletion) is an event for wait_event()."""
        r = self._call(OP_GETCHILDREN, _s(path) + (b"\1" if watch else b"\0"), path)
        return sorted(r.str() for _ in range(r.int()))

    def get_children2(self, path):
        """(sorted child names, Stat) -- Stat.pzxid is the fencing token
        source of the design."""
        r = self._call(OP_GETCHILDREN2, _s(path) + b"\0", path)
        kids = [r.str() for _ in range(r.int())]
        return sorted(kids), r.stat()

    def sync(self, path="/"):
        """Make the connected server catch up with the leader (so reads on
        a follower see every write committed before this call)."""
        self._call(OP_SYNC, _s(path), path)

    def exists(self, path, watch=False):
        """Stat or None. watch: the node's creation, deletion or a change of
        its data is an event for wait_event()."""
        try:
            return self._call(OP_EXISTS, _s(path) + (b"\1" if watch else b"\0"), path).stat()
        except ZkNoNode:
            return None

    def get_data(self, path):
        """(bytes or None, Stat); raises ZkNoNode."""
        r = self._call(OP_GETDATA, _s(path) + b"\0", path)
        return r.buf(), r.stat()

    def create(self, path, data=b"", flags=PERSISTENT, acl=None):
        """Create a node (flags: PERSISTENT, EPHEMERAL, *_SEQUENTIAL,
        CONTAINER) with acl, a list of (perms, scheme, id) (default
        OPEN_ACL_UNSAFE); returns the created path."""
        body = _s(path) + _buf(data) + _acl(OPEN_ACL_UNSAFE if acl is None else acl) + \
            struct.pack(">i", flags)
        r = self._call(OP_CREATECONTAINER if flags == CONTAINER else OP_CREATE,
                       body, path)
        return r.str()

    def delete(self, path, version=-1):
        self._call(OP_DELETE, _s(path) + struct.pack(">i", version), path)

    def set_data(self, path, data, version=-1):
        """Replaces the node's data; returns its new Stat."""
        return self._call(OP_SETDATA, _s(path) + _buf(data) + struct.pack(">i", version),
                          path).stat()

    def get_acl(self, path):
        """(sorted list of (perms, scheme, id), Stat); raises ZkNoNode."""
        r = self._call(OP_GETACL, _s(path), path)
        acl = [(r.int(), r.str(), r.str()) for _ in range(r.int())]
        return sorted(acl), r.stat()

    def add_auth(self, scheme, credentials):
        """Adds credentials to the session ("digest", "user:password");
        raises ZkApiError(AUTHFAILED) if the server refuses them."""
        self._call(OP_SETAUTH, struct.pack(">i", 0) + _s(scheme) +
                   _buf(credentials.encode("utf-8")), xid=AUTH_XID)

    def ping(self):
        with self._lock:
            self._send(struct.pack(">ii", PING_XID, OP_PING))
            while self._next_frame()[0] != PING_XID:
                pass

    def wait_event(self, timeout):
        """The next WatchedEvent of a watch this client set, waiting at most
        timeout seconds (None then). Pings while it waits, so that a long
        wait does not end the session."""
        deadline = time.monotonic() + timeout
        every = self.negotiated_timeout_ms / 3000.0
        with self._lock:
            while not self._events:
                if self.sock is None:
                    raise ZkConnectionLoss(-4, "closed")
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if select.select([self.sock], [], [], min(left, every))[0]:
                    self._next_frame()
                else:
                    self._send(struct.pack(">ii", PING_XID, OP_PING))
            return self._events.popleft()

    def start_keepalive(self):
        """Ping every timeout/3 from a daemon thread until close()."""
        self._ka_stop = threading.Event()

        def loop():
            while not self._ka_stop.wait(self.negotiated_timeout_ms / 3000.0):
                try:
                    self.ping()
                except Exception:  # noqa: BLE001
                    return
        threading.Thread(target=loop, daemon=True).start()

    def close(self):
        """Close the session (its ephemerals go away now) and the socket.
        Returns once the server has closed its end too: from then on `cons`
        and sessions() no longer list the session (the server answers the
        close before it drops the connection)."""
        if self._ka_stop:
            self._ka_stop.set()
        if self.sock is None:
            return
        try:
            self._call(OP_CLOSE, b"")
            self.sock.settimeout(self.connect_timeout)
            while self.sock.recv(4096):
                pass
        except (OSError, ZkError, struct.error):
            pass
        try:
            self.sock.close()
        finally:
            self.sock = None

    def drop(self):
        """Close the socket WITHOUT closing the session (the session and its
        ephemerals live on until the session timeout)."""
        if self._ka_stop:
            self._ka_stop.set()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False


def wait_children(hosts, path, predicate, timeout, what=None):
    """Waits until predicate(sorted child names of path) is true, [] standing
    for a path that does not exist; returns those children. One session,
    synced first (so nothing committed before the call is missed), and a
    watch: the children are read again only when it fires. A lost
    connection opens a new session. Raises ZkTimeout after timeout seconds,
    with the last children read."""
    deadline = time.monotonic() + timeout
    kids, last_exc, c = None, None, None
    try:
        while True:
            try:
                if c is None:
                    c = ZkClient(hosts)
                    c.sync("/")
                try:
                    kids = c.get_children(path, watch=True)
                except ZkNoNode:
                    # Watch for its creation; read again if it came meanwhile.
                    if c.exists(path, watch=True) is not None:
                        continue
                    kids = []
                if predicate(kids):
                    return kids
                left = deadline - time.monotonic()
                if left > 0:
                    c.wait_event(left)
            except (OSError, ZkConnectionLoss, struct.error) as e:
                last_exc = e
                if c is not None:
                    c.drop()
                    c = None
                time.sleep(0.05)          # before a new session: no busy loop
            if time.monotonic() >= deadline:
                raise ZkTimeout("timed out after %.1fs waiting for %s; children %r%s" % (
                    timeout, what or "the children of %s" % path, kids,
                    " (last error: %r)" % (last_exc,) if last_exc else ""))
    finally:
        if c is not None:
            c.close()


def ls_recursive(hosts, path="/"):
    """Every znode at and under `path` as a sorted list of absolute paths
    (`path` itself first, like zkCli's `ls -R`); [] if `path` does not exist.
    Uses ZkClient (one short session, closed at the end)."""
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    with ZkClient(hosts) as c:
        c.sync(path if path == "/" else path.rsplit("/", 1)[0] or "/")
        if c.exists(path) is None:
            return []
        out = []
        todo = [path]
        while todo:
            p = todo.pop()
            try:
                kids = c.get_children(p)
            except ZkNoNode:
                continue          # vanished meanwhile
            out.append(p)
            for k in kids:
                todo.append(("" if p == "/" else p) + "/" + k)
        return sorted(out)


_quiet_log4j_path = None


def _quiet_log4j():
    global _quiet_log4j_path
    if _quiet_log4j_path is None or not os.path.exists(_quiet_log4j_path):
        fd, p = tempfile.mkstemp(prefix="zkharness-quiet-", suffix=".properties")
        with os.fdopen(fd, "w") as f:
            f.write(QUIET_LOG4J)
        atexit.register(lambda: os.path.exists(p) and os.unlink(p))
        _quiet_log4j_path = p
    return _quiet_log4j_path


def zk_cli(hosts, *commands, timeout=60.0):
    """Run zkCli (org.apache.zookeeper.ZooKeeperMain -server hosts) with the
    given command lines fed on stdin, followed by `quit`; returns
    (returncode, stdout, stderr), client logging off.

    Commands go through stdin rather than the command line on purpose: with
    a command on the command line ZooKeeperMain exits WITHOUT closing its
    session, which then lingers until it expires (up to maxSessionTimeout)
    and shows in `dump`/mntr zk_global_sessions. `quit` closes it."""
    cmd = [JAVA] + CLI_JVM_FLAGS + [
        "-Dlog4j.configuration=file:" + _quiet_log4j(),
        "-Dzookeeper.jmx.log4j.disable=true",
        "-cp", classpath(), ZK_CLI_MAIN, "-server", hosts]
    script = "".join(c + "\n" for c in commands) + "quit\n"
    p = subprocess.Popen(_pdeathsig_prefix() + cmd, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    _spawned_pids[p.pid] = ZK_CLI_MAIN
    try:
        out, err = p.communicate(script, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise ZkError("zkCli timed out after %.0fs: %r" % (timeout, commands))
    return p.returncode, out, err


def ls_recursive_cli(hosts, path="/", timeout=60.0):
    """Like ls_recursive(), through the Java CLI (`ls -R`): slower (a JVM
    start, ~0.6-1 s) but independent of ZkClient. [] if the path does not
    exist; raises ZkError on other failures (e.g. ConnectionLoss)."""
    rc, out, err = zk_cli(hosts, "ls -R " + path, timeout=timeout)
    if "Node does not exist" in err:
        return []
    if "KeeperErrorCode" in err or "Exception" in err:
        raise ZkError("zkCli ls -R %s failed (rc=%d): %s" % (path, rc, err.strip()))
    # stdout also carries 'Connecting to ...', 'Welcome to ZooKeeper!',
    # 'WATCHER::', 'WatchedEvent ...' lines; znode paths start with '/'.
    return sorted(l for l in out.splitlines() if l.startswith("/"))
