"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe).

Messages are JSON, one per NUL-terminated frame: requests go to the browser's fd 3, answers and
events come back on its fd 4. Every wait is bounded by a deadline."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         # Only this machine's loopback: every other host name fails to resolve, unasked.
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


_WRAPPER = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.dup2(int(sys.argv[2]), 4)
os.close(int(sys.argv[1]))
os.close(int(sys.argv[2]))
os.execv(sys.argv[3], sys.argv[3:])
"""


def _above_4(pipe: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved above fd 4, so that putting one at 3 or 4 cannot clobber the
    other."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in pipe)
    for fd in pipe:
        os.close(fd)
    return moved


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, profile_dir: Path, width: int = 1600, height: int = 1000,
                 timeout: float = 60.0) -> None:
        assert CHROMIUM is not None, "chromium missing: run tools/install_test_deps.sh"
        self.timeout = timeout
        to_browser, self._send_fd = _above_4(os.pipe())
        self._recv_fd, from_browser = _above_4(os.pipe())
        # The browser reads requests on fd 3 and writes answers on fd 4: a small exec wrapper
        # puts the pipe's ends there (a shell cannot name fds above 9).
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WRAPPER, str(to_browser), str(from_browser), CHROMIUM, *FLAGS,
             f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_browser, from_browser), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.session = ""
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        # Pages may ask for resources on the internet (XProf's for Google Charts): none leaves.
        self.call("Network.enable")
        self.call("Network.setBlockedURLs", urls=["https://*"])

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        os.close(self._send_fd)
        os.close(self._recv_fd)
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._recv_fd], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._recv_fd, 1 << 20)
            if not chunk:
                raise ConnectionError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        frame, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(frame)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one request (to the page's session once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        os.write(self._send_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, poll: float = 0.25) -> Any:
        """Poll a JavaScript expression until it is truthy (at most `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(poll)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
