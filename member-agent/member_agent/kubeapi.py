"""The agent's HTTP to the Kubernetes API: JSON in and out, errors as `KubeError`, watches as line streams.

Built on kubernetes_asyncio's configuration and connection pool (kubeconfig, in-cluster tokens that
rotate, client certificates), but requests and responses stay plain JSON: the agent reads a handful
of fields from thousands of Nodes and Pods, and building the client's model objects for each would
cost more than everything else it does with them (orjson parses them: a watch of every pod is most of
the agent's work while gangs are bound). Requests the API server turned away for load (429)
or while starting (503) are retried with backoff, as client-go does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import orjson
from kubernetes_asyncio import client, config
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

Obj = dict[str, Any]
RETRIED = (429, 503)
CONNECTIONS = 64


class KubeError(Exception):
    """A call the API server refused: its status code, reason and message."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.method, self.path = method, path


def _retried(err: BaseException) -> bool:
    return isinstance(err, KubeError) and err.status in RETRIED


async def _refusal(response: Any, method: str, path: str) -> KubeError:
    """The API server's refusal, from its Status body when it sent one."""
    data = await response.read()
    try:
        status = orjson.loads(data)
    except orjson.JSONDecodeError:
        status = {"message": data.decode(errors="replace")[:300]}
    return KubeError(response.status, str(status.get("reason") or response.reason), str(status.get("message", "")),
                     method, path)


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.host = api.configuration.host.rstrip("/")

    @classmethod
    async def connect(cls, kubeconfig: str | None, connections: int = CONNECTIONS) -> Kube:
        """From a kubeconfig file, or the pod's service account when None; with up to `connections` requests
        on the wire at once (HTTP/1.1: one per connection)."""
        configuration = client.Configuration()
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        configuration.connection_pool_maxsize = connections
        return cls(client.ApiClient(configuration))

    async def close(self) -> None:
        await self.api.close()

    async def _headers(self, content_type: str) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        await self.api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    async def _once(self, method: str, path: str, body: Any, query: Sequence[tuple[str, str]],
                    content_type: str, timeout: float) -> Obj:
        response = await self.api.rest_client.request(
            method, self.host + path, query_params=list(query), headers=await self._headers(content_type),
            body=body, _preload_content=False, _request_timeout=timeout)
        async with response:
            if 200 <= response.status < 300:
                data = await response.read()
                return orjson.loads(data) if data else {}
            raise await _refusal(response, method, path)

    async def call(self, method: str, path: str, body: Any = None, query: Sequence[tuple[str, str]] = (),
                   content_type: str = "application/json", timeout: float = 60) -> Obj:
        async for attempt in AsyncRetrying(retry=retry_if_exception(_retried), stop=stop_after_attempt(6),
                                           wait=wait_exponential(multiplier=0.2, max=5), reraise=True):
            with attempt:
                return await self._once(method, path, body, query, content_type, timeout)
        raise AssertionError("unreachable")  # AsyncRetrying either returns or re-raises

    async def get(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Obj:
        return await self.call("GET", path, query=query)

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.call("POST", path, body)

    async def delete(self, path: str, query: Sequence[tuple[str, str]] = (), body: Obj | None = None) -> Obj:
        return await self.call("DELETE", path, body, query)

    async def patch(self, path: str, body: Obj, kind: str = "merge") -> Obj:
        return await self.call("PATCH", path, body, content_type=f"application/{kind}-patch+json")

    async def raw(self, path: str, query: Mapping[str, str]) -> AsyncIterator[bytes]:
        """A GET whose body is read as it comes (a pod's log, followed): its bytes, chunk by chunk."""
        response = await self.api.rest_client.request(
            "GET", self.host + path, query_params=list(query.items()), headers=await self._headers("application/json"),
            _preload_content=False, _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        async with response:
            if response.status != 200:
                raise await _refusal(response, "GET", path)
            async for chunk in response.content.iter_any():
                yield chunk

    async def stream(self, path: str, query: Mapping[str, str], timeout: float) -> AsyncIterator[Obj]:
        """A watch: one event per line until the server ends it (`timeoutSeconds`) or the connection drops."""
        response = await self.api.rest_client.request(
            "GET", self.host + path, query_params=list(query.items()), headers=await self._headers("application/json"),
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout))
        async with response:
            if response.status != 200:
                raise await _refusal(response, "WATCH", path)
            buffer = b""  # objects may be longer than aiohttp's line limit, so lines are split here
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield orjson.loads(line)
