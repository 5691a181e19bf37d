"""XProf (the `xprof` package of the test extra) as a user runs it: its converter of an
.xplane.pb to the trace viewer's JSON, and its web UI served on 127.0.0.1.

Both run in child processes: XProf's converter is a native library of its own, kept out of the
process that holds jaxlib. Every wait is bounded."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests._subprocess import run_python

CONVERT = """
import sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {})
if data is None:
    sys.exit("XProf could not convert the trace")
sys.stdout.write(data)
"""

# XProf's own server (xprof.server) bound to loopback; the `xprof` command would listen on
# every interface and start a gRPC worker service too.
SERVE = """
import sys
from xprof import profile_plugin_loader, server
from xprof.standalone import base_plugin, plugin_event_multiplexer
logdir, port = sys.argv[1], int(sys.argv[2])
context = base_plugin.TBContext(logdir, plugin_event_multiplexer.DataProvider(logdir),
                                base_plugin.TBContext.Flags(False))
context.hide_capture_profile_button = True
context.enable_tab_name_label = False
context.src_prefix = None
server.run_server(profile_plugin_loader.ProfilePluginLoader().load(context), "127.0.0.1", port)
"""


def trace_viewer_json(xplane: Path) -> dict[str, Any]:
    """The trace viewer's form of an .xplane.pb, as XProf converts it."""
    code = f"import sys; sys.argv[1:] = [{str(xplane)!r}]\n{CONVERT}"
    return json.loads(run_python(code, timeout=120).stdout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """XProf's web UI over `logdir` on 127.0.0.1, up once it lists `run` (context manager)."""

    def __init__(self, logdir: Path, run: str, startup_s: float = 60.0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.process = subprocess.Popen([sys.executable, "-c", SERVE, str(logdir),
                                         str(self.port)], env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)
        deadline = time.monotonic() + startup_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"XProf's server exited: {self.process.stderr.read()!r}")
            try:
                if run in self.get("/data/plugin/profile/runs"):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"XProf's server did not list {run} in {startup_s} s")
            time.sleep(0.25)

    def get(self, path: str) -> Any:
        # straight to loopback, whatever proxy the environment names
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.url + path, timeout=10) as response:
            body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return json.loads(body)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process.stderr.close()
