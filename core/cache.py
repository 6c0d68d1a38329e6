"""Django's Redis cache backend, reusing one `redis.Redis` per connection pool, and the
counters the API's rate limits keep in whichever cache is configured.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` for every cache operation,
and redis-py's constructor fills a ~170-entry response-callback table each time: measured at
about 0.4 ms of CPU per operation on the 2-core development VM, more than the round trip
itself, and the agent path paid it on every cache operation of every heartbeat. A `redis.Redis` is safe to
share: it holds no connection of its own, only the (thread-safe) pool.
"""

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class ReusingRedisCacheClient(RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._client(connection_pool=self._get_connection_pool(write))
        return client


class ReusingRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = ReusingRedisCacheClient

    def count_hit(self, key: str, previous_key: str, ttl: int, read_key: str | None = None) -> tuple[int, int, object]:
        """INCR `key` (setting its expiry) and read `previous_key` and, if given, the cached
        value at `read_key` (None when absent), in one round trip."""
        current = self.make_and_validate_key(key)
        pipe = self._cache.get_client(write=True).pipeline(transaction=False)
        pipe.incr(current)
        pipe.expire(current, ttl)
        pipe.get(self.make_and_validate_key(previous_key))
        if read_key is not None:
            pipe.get(self.make_and_validate_key(read_key))
        count, _, previous, *read = pipe.execute()
        value = self._cache._serializer.loads(read[0]) if read and read[0] is not None else None
        return count, int(previous or 0), value


def count_hit(key: str, previous_key: str, ttl: int, read_key: str | None = None) -> tuple[int, int, object]:
    """One more hit on counter `key` (kept `ttl` seconds), and the count at `previous_key`:
    (this one's count including the hit, the previous one's, and the cached value at
    `read_key` or None). One round trip on Redis, `read_key` included: the agent path reads its
    node's revocation entry this way (core.api.authentication). The cache API elsewhere (the
    embedded default's per-process memory cache)."""
    cache = caches["default"]
    if isinstance(cache, ReusingRedisCache):
        return cache.count_hit(key, previous_key, ttl, read_key)
    cache.add(key, 0, ttl)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between the two calls
        cache.set(key, 1, ttl)
        count = 1
    return count, cache.get(previous_key, 0), None if read_key is None else cache.get(read_key)


def read_counts(key: str, previous_key: str) -> tuple[int, int]:
    """The two counters, without a hit (one MGET on Redis)."""
    found = caches["default"].get_many([key, previous_key])
    return found.get(key, 0), found.get(previous_key, 0)


def uncount_hit(key: str) -> None:
    """Take back one hit on `key` (a refused request is not spent)."""
    try:
        caches["default"].decr(key)
    except ValueError:  # expired meanwhile: nothing to take back
        pass
