"""Optional per-key rate limit (``--rate-limit N`` requests a second) for the API origin.

A token bucket per ``Authorization`` value: bursts up to N pass, then requests get ``429
RESOURCE_EXHAUSTED`` with ``Retry-After`` saying when the next one would pass, which is what a client's
backoff must honour. Admin calls are never limited.
"""

from __future__ import annotations

import math
import time

from abm_emulator.asgi import ASGIApp, Receive, Scope, Send, send_error


class RateLimiter:
    def __init__(self, per_second: float) -> None:
        if per_second <= 0:
            raise ValueError(f"--rate-limit must be > 0, got {per_second}")
        self.rate = per_second
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, monotonic time)

    def clear(self) -> None:
        self._buckets.clear()

    def take(self, key: str) -> float:
        """0 when the request may pass, else the seconds until it would."""
        now = time.monotonic()
        tokens, last = self._buckets.get(key, (self.rate, now))
        tokens = min(self.rate, tokens + (now - last) * self.rate)
        if tokens >= 1:
            self._buckets[key] = (tokens - 1, now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1 - tokens) / self.rate


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/_admin"):
            await self.app(scope, receive, send)
            return
        key = next(
            (v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"authorization"), ""
        )
        wait = self.limiter.take(key)
        if wait > 0:
            await send_error(
                send,
                429,
                f"Rate limit of {self.limiter.rate:g} requests per second exceeded for this key",
                "RESOURCE_EXHAUSTED",
                {"retry-after": str(max(1, math.ceil(wait)))},
            )
            return
        await self.app(scope, receive, send)
