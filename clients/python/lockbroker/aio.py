"""lockbroker.aio - the same API for asyncio.

    import lockbroker.aio

    client = await lockbroker.aio.connect("127.0.0.1:7411")
    async with client.lock("deploy", wait=30) as hold:   # or: hold = await client.lock(...)
        await step(hold.token)
        if hold.lost:
            raise RuntimeError("lock lost")
    await client.close()

The blocking calls run in threads (asyncio.to_thread); holds and leases
are the blocking API's objects, with awaitable variants of their waits and
releases. Cancelling a task that waits for a lock closes that request's
connection, which cancels the request on the daemon.

A hold outlives a dropped connection for the client's grace (connect(...,
grace=seconds), default 5 s) as the blocking API's does: its library
thread takes it back on a new connection, and .lost turns true only when
that fails; .resumes counts the times it succeeded.
"""

import asyncio

from . import (Busy, Client, ConnectionLost, DEFAULT_ADDRESS, DEFAULT_GRACE, Error,  # noqa: F401
               Hold, Lease, NotHeld, Timeout)

__all__ = ["connect", "AsyncClient", "AsyncHold", "AsyncLease"]


class AsyncHold:
    """A Hold for asyncio: .token, .lost, .lost_reason, .min_hold, .kept,
    .session, .resumes, await release(keep), await wait_lost(timeout),
    on_lost(fn); `async with` (released as the Hold's `with` releases it,
    release_on_failure included)."""

    def __init__(self, hold):
        self._hold = hold

    token = property(lambda self: self._hold.token)
    name = property(lambda self: self._hold.name)
    names = property(lambda self: self._hold.names)
    tokens = property(lambda self: self._hold.tokens)
    lost = property(lambda self: self._hold.lost)
    lost_reason = property(lambda self: self._hold.lost_reason)
    min_hold = property(lambda self: self._hold.min_hold)
    release_on_failure = property(lambda self: self._hold.release_on_failure)
    kept = property(lambda self: self._hold.kept)
    session = property(lambda self: self._hold.session)
    resumes = property(lambda self: self._hold.resumes)

    def on_lost(self, fn):
        """fn(hold, reason), called from a library thread: use
        loop.call_soon_threadsafe inside it to reach the event loop."""
        self._hold.on_lost(fn)

    def safe_remaining(self):
        return self._hold.safe_remaining()

    async def wait_lost(self, timeout=None):
        return await asyncio.to_thread(self._hold.wait_lost, timeout)

    def min_hold_left(self):
        return self._hold.min_hold_left()

    async def release(self, keep=None):
        """Hold.release(keep): keep=0 releases at once despite min_hold."""
        await asyncio.to_thread(self._hold.release, keep)

    async def __aenter__(self):
        return self

    async def __aexit__(self, exc_type, exc, tb):
        # The blocking object's __exit__: the same release_on_failure and NotHeld rules.
        await asyncio.to_thread(self._hold.__exit__, exc_type, exc, tb)


class AsyncLease(AsyncHold):
    """A Lease for asyncio: also await renew(ttl), remaining(); release()
    takes no keep (a lease is not kept after its release)."""

    async def release(self):
        await asyncio.to_thread(self._hold.release)

    async def renew(self, ttl=None):
        await asyncio.to_thread(self._hold.renew, ttl)

    def remaining(self):
        return self._hold.remaining()


class _Taking:
    """What lock(), trylock() and lease() return: await it for the hold, or
    use it with `async with` (released on exit)."""

    def __init__(self, coro):
        self._coro = coro
        self._hold = None

    def __await__(self):
        return self._coro.__await__()

    async def __aenter__(self):
        self._hold = await self._coro
        return self._hold

    async def __aexit__(self, exc_type, exc, tb):
        return await self._hold.__aexit__(exc_type, exc, tb)


class AsyncClient:
    """The Client's methods as coroutines."""

    def __init__(self, client):
        self._client = client

    async def _acquire(self, fn, *args, **kwargs):
        pending, cancelled = [], []

        def on_pending(conn):           # in the thread, before the request is sent
            pending.append(conn)
            if cancelled:
                conn.close("the wait was cancelled")

        future = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs,
                                                         on_pending=on_pending))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled.append(True)
            for conn in list(pending):
                conn.close("the wait was cancelled")   # the daemon drops the request
            try:
                hold = await future
            except Error:
                raise asyncio.CancelledError()
            hold.release(keep=0)     # granted just before the close: let it go at once
            raise

    def lock(self, name, wait=None, shared=False, limit=None, delay=None, min_hold=None,
             release_on_failure=False):
        """`await client.lock(...)` -> AsyncHold, or `async with client.lock(...)
        as hold`; raises Timeout, Conflict, ... as Client.lock(), whose
        min_hold and release_on_failure it takes too."""
        async def take():
            return AsyncHold(await self._acquire(self._client._acquire, "LOCK", name, wait,
                                                 shared, limit, delay, min_hold,
                                                 release_on_failure))
        return _Taking(take())

    def trylock(self, name, shared=False, limit=None, delay=None, min_hold=None,
                release_on_failure=False):
        async def take():
            return AsyncHold(await self._acquire(self._client._acquire, "TRYLOCK", name, None,
                                                 shared, limit, delay, min_hold,
                                                 release_on_failure))
        return _Taking(take())

    def lease(self, name, ttl, wait=None, shared=False, limit=None, renew=True):
        async def take():
            return AsyncLease(await asyncio.to_thread(self._client.lease, name, ttl, wait,
                                                      shared, limit, renew))
        return _Taking(take())

    async def status(self, name):
        return await asyncio.to_thread(self._client.status, name)

    async def locks(self, glob=None):
        return await asyncio.to_thread(self._client.locks, glob)

    async def holders(self, glob=None):
        return await asyncio.to_thread(self._client.holders, glob)

    async def stats(self):
        return await asyncio.to_thread(self._client.stats)

    async def ping(self):
        await asyncio.to_thread(self._client.ping)

    async def close(self):
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


async def connect(address=DEFAULT_ADDRESS, timeout=10.0, user=None, password=None, label=None,
                  check=True, ssl=None, server_hostname=None, grace=DEFAULT_GRACE):
    """An AsyncClient; arguments as lockbroker.connect(), ssl (an
    ssl.SSLContext), server_hostname and grace included."""
    return AsyncClient(await asyncio.to_thread(Client, address, timeout, user, password,
                                               label, check, ssl, server_hostname, grace))
