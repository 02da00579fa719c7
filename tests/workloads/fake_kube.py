"""A fake Kubernetes API server on 127.0.0.1: real HTTP, the API's URL paths and JSON shapes, serving the
objects a test puts in it. The `kubernetes` client talks to it through a plain kubeconfig, so `status`
and `logs` run unchanged down to the sockets.

Paths follow the API conventions (kubernetes/kubernetes api/openapi-spec): /api/v1/namespaces/{ns}/pods,
/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}, /api/v1/namespaces/{ns}/pods/{name}/log
(`follow=true` streams chunked), /api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path}.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import yaml


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # collection path -> {name: object}
        self.logs: dict[str, list[str]] = {}  # "ns/pod" -> lines
        self.proxied: dict[str, str] = {}  # "ns/pod:port/path" -> body
        self.requests: list[str] = []
        self.streamed: list[str] = []  # pods whose log was streamed (follow)
        self.follow_delay = 0.0
        self.answer_all: int | None = None  # e.g. 401: every request refused, as with expired credentials
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked log streams need it

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.requests.append(self.path)
                fake.handle(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # shutdown() waits for the serving loop's next look at its flag: every 0.5 s by default
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, collection: str, obj: dict[str, Any]) -> None:
        """collection: e.g. /api/v1/namespaces/zimdb/pods or /apis/karpenter.sh/v1/nodeclaims."""
        self.objects.setdefault(collection, {})[obj["metadata"]["name"]] = obj

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        if self.answer_all is not None:
            return self._status(req, self.answer_all)
        url = urlparse(req.path)
        path, query = unquote(url.path), parse_qs(url.query)
        if "/proxy/" in path:
            key = path.split("/namespaces/", 1)[1].replace("/pods/", "/").replace("/proxy", "")
            return self._send(req, 200 if key in self.proxied else 503, self.proxied.get(key, "no endpoint"))
        if path.endswith("/log"):
            ns_pod = path.split("/namespaces/", 1)[1].replace("/pods/", "/").removesuffix("/log")
            if ns_pod not in self.logs:
                return self._status(req, 404)
            lines = self.logs[ns_pod]
            if "tailLines" in query:
                lines = lines[-int(query["tailLines"][0]) :]
            if query.get("follow", [""])[0].lower() in ("true", "1"):  # the server's strconv.ParseBool
                self.streamed.append(ns_pod)
                return self._stream(req, lines)
            return self._send(req, 200, "".join(line + "\n" for line in lines))
        if path in self.objects:
            items = list(self.objects[path].values())
            selector = query.get("labelSelector", [""])[0]
            if selector:
                key, _, value = selector.partition("=")
                items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
            field = query.get("fieldSelector", [""])[0]
            if field.startswith("involvedObject.name="):
                items = [o for o in items if o["involvedObject"]["name"] == field.split("=", 1)[1]]
            return self._send(req, 200, json.dumps({"kind": "List", "apiVersion": "v1", "items": items}))
        collection, _, name = path.rpartition("/")
        if name in self.objects.get(collection, {}):
            return self._send(req, 200, json.dumps(self.objects[collection][name]))
        return self._status(req, 404)

    def _status(self, req: BaseHTTPRequestHandler, code: int) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": code}
        self._send(req, code, json.dumps(body))

    def _send(self, req: BaseHTTPRequestHandler, code: int, body: str) -> None:
        data = body.encode()
        req.send_response(code)
        req.send_header("Content-Type", "application/json" if body.startswith("{") else "text/plain")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _stream(self, req: BaseHTTPRequestHandler, lines: list[str]) -> None:
        """What the kubelet does for `follow`: chunked transfer, a line at a time, as it is written."""
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        for line in lines:
            data = (line + "\n").encode()
            req.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            req.wfile.flush()
            time.sleep(self.follow_delay)
        req.wfile.write(b"0\r\n\r\n")
