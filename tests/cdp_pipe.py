"""A minimal Chrome DevTools Protocol client over ``--remote-debugging-pipe`` (no websocket
library needed): headless Chromium reads commands on fd 3 and answers on fd 4, messages
separated by NUL bytes. Used by the playground test only."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from typing import Any


class Browser:
    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # the child must see them as fds 3 and 4 (moved there by _remap before exec)
        self.process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", "--user-data-dir=" + os.environ.get("TMPDIR", "/tmp")
             + f"/lexguide-chromium-{os.getpid()}", "about:blank"],
            pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # the child only dup()s descriptors before exec: safe with threads around
            preexec_fn=_remap(to_chrome_r, from_chrome_w))  # noqa: PLW1509
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.timeout = timeout

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError(f"no answer to {method}")
            data = os.read(self._from_chrome, 1 << 16)
            if not data:
                raise RuntimeError("chromium closed the pipe")
            self._buffer += data

    def open_page(self, url: str) -> str:
        """A new tab at ``url``; returns its session id."""
        target = self.call("Target.createTarget", url=url)["targetId"]
        return self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, session: str, expression: str) -> Any:
        r = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page error: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def _remap(read_end: int, write_end: int):
    def child() -> None:  # runs in the child before exec: put the pipe ends at fds 3 and 4
        r, w = os.dup(read_end), os.dup(write_end)
        os.dup2(r, 3)
        os.dup2(w, 4)
    return child
