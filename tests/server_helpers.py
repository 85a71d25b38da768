"""A real ``lexguide serve`` subprocess on 127.0.0.1 for the server tests (not a test module)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 120.0
PERSON = {  # a small schema the server tests constrain chat answers to
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12},
                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


TEMPLATES = Path(__file__).parent / "data" / "chat_templates"  # real ones, see its README


def with_chat_template(model: Path, tmp: Path, template: str) -> Path:
    """A copy of the GGUF ``model`` whose ``tokenizer.chat_template`` is the file ``template``
    of tests/data/chat_templates (written with lexguide's GGUF writer)."""
    from lexguide.gguf import open_gguf, write_gguf

    out = tmp / template.replace(".jinja", ".gguf")
    if out.exists():
        return out
    with open_gguf(model) as f:
        metadata = dict(f.metadata)
        metadata["tokenizer.chat_template"] = (TEMPLATES / template).read_text()
        tensors = {t.name: (f.raw(t.name), t.ggml_type, t.shape) for t in f.tensors}
        return write_gguf(out, metadata, tensors, metadata_types=f.metadata_types)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 10.0,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get_json(self, path: str) -> dict:
        status, body = self.get(path)
        assert status == 200, body
        return json.loads(body)

    def post(self, path: str, body: bytes, timeout: float = 60.0,
             headers: dict[str, str] | None = None) -> tuple[int, dict]:
        # http.client rather than urllib: a server refusing an oversized body (413) may answer
        # and close before the body is sent; the answer is still read after the broken pipe
        import http.client
        from urllib.parse import urlsplit

        u = urlsplit(self.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        try:
            conn.putrequest("POST", path)
            for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)),
                         **(headers or {})}.items():
                conn.putheader(k, v)
            conn.endheaders()
            try:
                conn.send(body)
            except (BrokenPipeError, ConnectionResetError):
                pass
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start_server(model: Path, tmp: Path, *extra: str,
                 env: dict[str, str] | None = None) -> Server:
    """Start ``lexguide serve -m model`` on a free loopback port; wait until /health answers.
    ``env`` adds environment variables."""
    port = free_port()
    log = tmp / f"server-{port}.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lexguide.cli", "serve", "-m", str(model), "--host",
             "127.0.0.1", "--port", str(port), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"lexguide serve exited: {log.read_text()}")
        try:
            if server.get("/health", timeout=2)[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"lexguide serve did not answer in {START_TIMEOUT_S} s: {log.read_text()}")
