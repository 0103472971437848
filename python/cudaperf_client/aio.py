"""``asyncio`` client for ``cudaperf serve`` (aiohttp: ``pip install ./python[async]``).

The same calls as :class:`~cudaperf_client.CudaperfClient`, awaitable, over one pooled
session, so a trainer can overlap scoring with generation (TRL's async reward functions,
verl's async reward loop) and many requests share a few kept-alive connections.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
import weakref
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .client import (
    DEFAULT_URL,
    Completion,
    CudaperfError,
    error_message,
    retry_after_s,
    score_body,
    too_large,
)

try:  # an optional extra: the sync client stays standard-library only
    import aiohttp
except ImportError:  # pragma: no cover - exercised only without the extra
    aiohttp = None  # type: ignore[assignment]


class AsyncCudaperfClient:
    """Talks to one ``cudaperf serve`` from ``asyncio`` code.

    One ``aiohttp`` session per event loop (created on first use, at most ``connections``
    connections); ``429``/``503`` are retried after ``Retry-After`` up to ``retries`` times,
    and a request whose kept-alive connection the server had just closed (its idle
    timeout) is sent again once on a fresh one. Use ``async with`` or :meth:`close`.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        timeout: float = 900.0,
        retries: int = 8,
        connections: int = 64,
    ):
        if aiohttp is None:
            raise ImportError("AsyncCudaperfClient needs aiohttp: pip install './python[async]' (or aiohttp)")
        self.base_url = (base_url or os.environ.get("CUDAPERF_URL") or DEFAULT_URL).rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.connections = connections
        # Keyed by the loop itself (weakly): a session is bound to the loop it was made on.
        self._sessions: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession]" = (
            weakref.WeakKeyDictionary()
        )

    async def __aenter__(self) -> "AsyncCudaperfClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes this event loop's session (others close with their loops)."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()

    def _session(self) -> "aiohttp.ClientSession":
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                json_serialize=json.dumps,
            )
            self._sessions[loop] = session
        return session

    async def _request(
        self, method: str, path: str, body: Any = None, raw: bool = False, retry: bool = True
    ) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else None
        attempt = 0
        resent = False
        while True:
            try:
                async with self._session().request(method, self.base_url + path, data=data, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status >= 400:
                        if retry and resp.status in (429, 503) and attempt < self.retries:
                            attempt += 1
                            await asyncio.sleep(retry_after_s(resp.headers.get("Retry-After")))
                            continue
                        message = error_message(text)
                        if resp.status == 413 and data is not None:
                            message += f" (this request: {len(data)} bytes)"
                        raise CudaperfError(resp.status, message)
                    return text if raw else json.loads(text)
            except aiohttp.ServerDisconnectedError as e:
                if not resent:
                    resent = True  # a kept-alive connection closed under us: once more, fresh
                    continue
                raise await self._lost(data, e) from None
            except aiohttp.ClientOSError as e:
                raise await self._lost(data, e) from None
            except aiohttp.ClientError as e:
                raise CudaperfError(0, f"cannot reach {self.base_url}: {e}") from None
            except asyncio.TimeoutError:
                raise CudaperfError(0, f"{self.base_url}: no answer within {self.timeout} s") from None

    async def _lost(self, data: Optional[bytes], e: Exception) -> CudaperfError:
        """A connection that failed mid-request: a body the server refused (413 before
        reading it), or the server went away."""
        if data is None:
            return CudaperfError(0, f"cannot reach {self.base_url}: {e}")
        limit = None
        try:
            limit = (await self._request("GET", "/healthz", retry=False))["limits"]["max_body_bytes"]
        except (CudaperfError, KeyError, TypeError):
            return CudaperfError(0, f"cannot reach {self.base_url}: {e}")
        if limit is not None and len(data) <= limit:
            return CudaperfError(0, f"{self.base_url}: the connection was lost while sending the request: {e}")
        return too_large(self.base_url, len(data), limit)

    async def score(
        self,
        task: Union[str, Mapping[str, Any]],
        completions: Sequence[Completion],
        *,
        step: Optional[int] = None,
        reward: Optional[str] = None,
        weights: Optional[Mapping[str, float]] = None,
        deadline_ms: Optional[int] = None,
        report: bool = True,
    ) -> Dict[str, Any]:
        """Scores a group of completions for one task (see ``CudaperfClient.score``)."""
        body = score_body(
            task, completions, step=step, reward=reward, weights=weights, deadline_ms=deadline_ms, report=report
        )
        return await self._request("POST", "/v1/score", body)

    async def tasks(self) -> List[Dict[str, Any]]:
        """The tasks the server serves by id."""
        return (await self._request("GET", "/v1/tasks"))["tasks"]

    async def task(self, task_id: str) -> Dict[str, Any]:
        """One task, with its RL ``prompt``."""
        return await self._request("GET", "/v1/tasks/" + urllib.parse.quote(task_id, safe=""))

    async def health(self) -> Dict[str, Any]:
        """``/healthz``; raises ``CudaperfError`` (503) while the queue is unavailable."""
        return await self._request("GET", "/healthz", retry=False)

    async def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        return await self._request("GET", "/metrics", raw=True)
