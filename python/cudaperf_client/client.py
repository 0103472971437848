"""HTTP client for ``cudaperf serve`` (standard library only)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

DEFAULT_URL = "http://127.0.0.1:8000"

Completion = Union[str, Sequence[Mapping[str, Any]]]

#: Statuses worth asking again: no answer (0), read timeout, queue full, server errors,
#: queue unavailable or shutting down.
TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})


class CudaperfError(Exception):
    """The server answered with an error status (or could not be reached).

    ``status`` is the HTTP status (0 when no answer came) and ``message`` the server's
    one-line reason, which names the field that was wrong.
    """

    def __init__(self, status: int, message: str):
        super().__init__(f"cudaperf serve: {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """Whether asking again later may succeed (server away, busy or restarting)."""
        return self.status in TRANSIENT_STATUSES


class CudaperfUnavailable(CudaperfError):
    """Completions could not be scored (e.g. no GPU for the GPU stages, or the server
    stayed away) within the time allowed; ``results`` holds the server's last answer for
    each of them (``index``, ``verdict``, ``reason``)."""

    def __init__(self, message: str, results: Sequence[Mapping[str, Any]] = ()):
        super().__init__(0, message)
        self.results = [dict(r) for r in results]


def completion_text(completion: Completion) -> str:
    """The text of a completion: a string as is, or the assistant content of a
    conversational completion (TRL's ``[{"role": "assistant", "content": ...}]``; content
    given as a list of parts contributes its ``text`` parts)."""
    if isinstance(completion, str):
        return completion
    parts: List[str] = []
    for message in completion:
        if not isinstance(message, Mapping):
            raise TypeError(f"conversational completion: expected messages (dicts), got {type(message).__name__}")
        if message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content", "")
        if isinstance(content, str):
            parts.append(content)
        else:
            for part in content or []:
                if isinstance(part, Mapping) and part.get("type", "text") == "text":
                    parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def score_body(
    task: Union[str, Mapping[str, Any]],
    completions: Sequence[Completion],
    *,
    step: Optional[int] = None,
    reward: Optional[str] = None,
    weights: Optional[Mapping[str, float]] = None,
    deadline_ms: Optional[int] = None,
    report: bool = True,
) -> Dict[str, Any]:
    """The JSON body of ``POST /v1/score`` (shared by the sync and async clients)."""
    body: Dict[str, Any] = {
        "task": task,
        "completions": [completion_text(c) for c in completions],
        "report": report,
    }
    if step is not None:
        body["step"] = int(step)
    if reward is not None or weights is not None:
        spec: Dict[str, Any] = {"preset": reward or "cudaperf"}
        if weights is not None:
            spec["weights"] = dict(weights)
        body["reward"] = spec
    if deadline_ms is not None:
        body["deadline_ms"] = int(deadline_ms)
    return body


def error_message(text: str) -> str:
    """The one-line ``error`` of an error body, or the body itself."""
    try:
        return str(json.loads(text).get("error", text))
    except (ValueError, AttributeError):
        return text


def retry_after_s(value: Optional[str]) -> float:
    """Seconds to wait from a ``Retry-After`` header (0.1 … 60; 1 when absent or odd)."""
    try:
        return min(max(float(value or "1"), 0.1), 60.0)
    except ValueError:
        return 1.0


def too_large(base_url: str, size: int, limit: Optional[int]) -> CudaperfError:
    """The error for a body the server refused while it was being sent. The server answers
    ``413`` before reading such a body and closes the connection, which a client still
    writing sees as a broken pipe; this says what really happened."""
    said = f"this server's limit of {limit} bytes" if limit else "the server's --max-body-bytes"
    return CudaperfError(
        413,
        f"request body: {size} bytes, larger than {said} ({base_url}); "
        "send fewer or shorter completions per request",
    )


class CudaperfClient:
    """Talks to one ``cudaperf serve``.

    Requests refused with ``429`` (queue full) or ``503`` (queue unavailable) are retried
    after the server's ``Retry-After``, up to ``retries`` times. A request body over the
    server's limit raises :class:`CudaperfError` with status ``413`` and both sizes.
    """

    def __init__(self, base_url: Optional[str] = None, timeout: float = 900.0, retries: int = 8):
        self.base_url = (base_url or os.environ.get("CUDAPERF_URL") or DEFAULT_URL).rstrip("/")
        self.timeout = timeout
        self.retries = retries

    def _request(self, method: str, path: str, body: Any = None, raw: bool = False, retry: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        attempt = 0
        while True:
            req = urllib.request.Request(self.base_url + path, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    payload = resp.read()
                    return payload.decode("utf-8") if raw else json.loads(payload)
            except urllib.error.HTTPError as e:
                message = error_message(e.read().decode("utf-8", "replace"))
                if e.code == 413 and data is not None:
                    message += f" (this request: {len(data)} bytes)"
                if retry and e.code in (429, 503) and attempt < self.retries:
                    attempt += 1
                    time.sleep(retry_after_s(e.headers.get("Retry-After")))
                    continue
                raise CudaperfError(e.code, message) from None
            except urllib.error.URLError as e:
                if data is not None and isinstance(e.reason, (BrokenPipeError, ConnectionResetError)):
                    raise self._refused_body(len(data)) from None
                raise CudaperfError(0, f"cannot reach {self.base_url}: {e.reason}") from None
            except (BrokenPipeError, ConnectionResetError) as e:
                if data is not None:
                    raise self._refused_body(len(data)) from None
                raise CudaperfError(0, f"{self.base_url}: connection lost: {e}") from None
            except OSError as e:  # a timeout or a connection dropped mid-answer
                raise CudaperfError(0, f"{self.base_url}: {e}") from None

    def _refused_body(self, size: int) -> CudaperfError:
        limit = None
        try:
            limit = self._request("GET", "/healthz", retry=False)["limits"]["max_body_bytes"]
        except (CudaperfError, KeyError, TypeError):
            pass
        if limit is not None and size <= limit:
            return CudaperfError(0, f"{self.base_url}: the connection was closed while sending {size} bytes")
        return too_large(self.base_url, size, limit)

    def score(
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
        """Scores a group of completions for one task.

        ``task`` is a task id of the server or an inline task
        ``{"toml": ..., "reference": ..., "original": ...}``. Returns the server's answer:
        ``{"task", "reward", "step", "results": [{"index", "verdict", "value", "reason",
        "report", "feedback"}, ...], "timing", "scored_by"}`` with one result per
        completion, in order; ``value`` is ``None`` when the completion could not be scored.
        """
        body = score_body(
            task, completions, step=step, reward=reward, weights=weights, deadline_ms=deadline_ms, report=report
        )
        return self._request("POST", "/v1/score", body)

    def tasks(self) -> List[Dict[str, Any]]:
        """The tasks the server serves by id."""
        return self._request("GET", "/v1/tasks")["tasks"]

    def task(self, task_id: str) -> Dict[str, Any]:
        """One task, with its RL ``prompt``."""
        return self._request("GET", "/v1/tasks/" + urllib.parse.quote(task_id, safe=""))

    def health(self) -> Dict[str, Any]:
        """``/healthz``; raises ``CudaperfError`` (503) while the queue is unavailable."""
        return self._request("GET", "/healthz", retry=False)

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        return self._request("GET", "/metrics", raw=True)
