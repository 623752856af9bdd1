"""A local HTTP server that speaks the Kubernetes REST paths the agent's backend uses.

No API server can run on this machine, so the Kubernetes backend is tested against this: it
keeps Nodes, HyperNodes and Pods, records every request (to check the order of calls), serves
watches from an event log by resourceVersion, and can be told to fail a given pod's binding.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse


class FakeKube:
    def __init__(self, nodes: list[dict[str, Any]], hypernodes: list[dict[str, Any]] | None,
                 pods: list[dict[str, Any]] | None = None) -> None:
        self.nodes = {n["metadata"]["name"]: self._ready(n) for n in nodes}
        self.hypernodes = hypernodes  # None: the CRD is not installed
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, resource, type, object
        self.requests: list[tuple[str, str]] = []
        self.fail_binding: set[str] = set()
        self.stuck: set[str] = set()  # pods whose kubelet never starts them: Pending after binding
        self.lock = threading.Lock()
        self.rv = 1
        for pod in pods or []:
            self.pods[(pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])] = pod
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
        return path

    def close(self) -> None:
        self.server.shutdown()

    @staticmethod
    def _ready(node: dict[str, Any], ready: bool = True) -> dict[str, Any]:
        node.setdefault("status", {})["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        return node

    def _event(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, resource, kind, json.loads(json.dumps(obj))))

    def set_pod_phase(self, name: str, phase: str, namespace: str = "default") -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod.setdefault("status", {})["phase"] = phase
            self._event("pods", "MODIFIED", pod)

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            self._event("nodes", "MODIFIED", self._ready(self.nodes[name], ready))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                                  "reason": reason, "code": code})

            def _body(self) -> dict[str, Any]:
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

            def _watch(self, resource: str, query: dict[str, list[str]], match: Any) -> None:
                since = int(query.get("resourceVersion", ["0"])[0] or 0)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                deadline = time.monotonic() + 1.0  # short streams; the client resumes from its resourceVersion
                while time.monotonic() < deadline:
                    with fake.lock:
                        new = [e for e in fake.events if e[0] > since and e[1] == resource and match(e[3])]
                    for rv, _, kind, obj in new:
                        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                        self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                        self.wfile.flush()
                        since = rv
                    time.sleep(0.05)
                self.wfile.write(b"0\r\n\r\n")

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                fake.requests.append(("WATCH" if query.get("watch") else "GET", url.path))
                parts = url.path.strip("/").split("/")
                labels = dict(kv.split("=", 1) for kv in query.get("labelSelector", [""])[0].split(",") if kv)

                def match(obj: dict[str, Any]) -> bool:
                    have = obj.get("metadata", {}).get("labels") or {}
                    return all(have.get(k) == v for k, v in labels.items())

                if url.path == "/api/v1/nodes":
                    if query.get("watch"):
                        return self._watch("nodes", query, lambda o: True)
                    return self._send(200, {"kind": "NodeList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(fake.rv)},
                                            "items": list(fake.nodes.values())})
                if url.path == "/apis/topology.volcano.sh/v1alpha1/hypernodes":
                    if fake.hypernodes is None:
                        return self._status(404, "NotFound", "the server could not find the requested resource")
                    return self._send(200, {"kind": "HyperNodeList", "items": fake.hypernodes})
                if url.path == "/api/v1/pods":
                    items = [p for p in fake.pods.values() if p.get("spec", {}).get("nodeName")]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
                if len(parts) == 5 and parts[4] == "pods":
                    if query.get("watch"):
                        return self._watch("pods", query, match)
                    items = [p for (ns, _), p in fake.pods.items() if ns == parts[3] and match(p)]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
                return self._status(404, "NotFound", url.path)

            def do_POST(self) -> None:
                parts = urlparse(self.path).path.strip("/").split("/")
                fake.requests.append(("POST", "/" + "/".join(parts)))
                body = self._body()
                with fake.lock:
                    if len(parts) == 5 and parts[4] == "pods":
                        key = (parts[3], body["metadata"]["name"])
                        if key in fake.pods:
                            return self._status(409, "AlreadyExists", f"pods {key[1]!r} already exists")
                        body["status"] = {"phase": "Pending"}
                        fake.pods[key] = body
                        fake._event("pods", "ADDED", body)
                        return self._send(201, body)
                    if len(parts) == 7 and parts[6] == "binding":
                        pod = fake.pods.get((parts[3], parts[5]))
                        if pod is None or parts[5] in fake.fail_binding:
                            return self._status(409, "Conflict", f"cannot bind {parts[5]}")
                        pod["spec"]["nodeName"] = body["target"]["name"]
                        pod["status"]["phase"] = "Pending" if parts[5] in fake.stuck else "Running"
                        fake._event("pods", "MODIFIED", pod)
                        return self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
                return self._status(404, "NotFound", self.path)

            def do_DELETE(self) -> None:
                parts = urlparse(self.path).path.strip("/").split("/")
                fake.requests.append(("DELETE", "/" + "/".join(parts)))
                self._body()
                with fake.lock:
                    pod = fake.pods.pop((parts[3], parts[5]), None)
                    if pod is None:
                        return self._status(404, "NotFound", parts[5])
                    fake._event("pods", "DELETED", pod)
                return self._send(200, pod)

        return Handler
