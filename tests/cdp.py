"""A headless Chromium driven over the DevTools protocol, for page tests that type and download.

``--dump-dom`` (tests/test_viewer.py) shows a page as loaded; a page that is used with the
keyboard needs key presses, script evaluation and a download folder. The DevTools protocol
speaks JSON over a WebSocket; the standard library has no WebSocket client, so the few lines
of RFC 6455 this needs (client handshake, masked text frames out, unmasked frames in) are here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


class Socket:
    """One WebSocket connection to a DevTools endpoint (``ws://host:port/path``)."""

    def __init__(self, url: str, timeout: float = 60.0) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the DevTools endpoint closed the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(head.decode(errors="replace"))
        self.next_id = 0

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the DevTools endpoint closed the connection")
            data += chunk
        return data

    def _send_text(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _receive_text(self) -> str:
        message = b""
        while True:
            first, second = self._exactly(2)
            n = second & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exactly(8))[0]
            payload = self._exactly(n)
            if first & 0x0F in (0x1, 0x0):
                message += payload
                if first & 0x80:
                    return message.decode()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events in between are dropped)."""
        self.next_id += 1
        self._send_text(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._receive_text())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})


class Browser:
    """A headless Chromium with one page, its downloads going to ``downloads``."""

    def __init__(self, chromium: Path, downloads: Path) -> None:
        # Chromium's helper processes can still be writing to the profile when the main one has
        # exited: the browser runs in its own process group, closed as one, and a file written
        # after that does not fail the test at cleanup.
        self.profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)
        self.process = subprocess.Popen(
            [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                raise RuntimeError("chromium exited before listening")
            found = re.search(r"DevTools listening on (ws://\S+)", line)
            url = found.group(1) if found else None
        if url is None:
            raise RuntimeError("chromium did not start its DevTools endpoint")
        # keep reading its log, so that a chatty browser never blocks on a full pipe
        threading.Thread(target=self.process.stderr.read, daemon=True).start()
        port = urlparse(url).port
        self.browser = Socket(url)
        self.browser.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            pages = [t for t in json.load(answer) if t.get("type") == "page"]
        self.page = Socket(pages[0]["webSocketDebuggerUrl"])

    def open(self, url: str, ready: str, timeout: float = 60.0) -> None:
        """Load ``url`` and wait until the JavaScript expression ``ready`` is true."""
        self.page.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not self.evaluate(ready):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: {ready} never became true")
            time.sleep(0.1)

    def evaluate(self, expression: str) -> Any:
        result = self.page.call("Runtime.evaluate", expression=expression, returnByValue=True, userGesture=True)
        return result.get("result", {}).get("value")

    def press(self, key: str) -> None:
        """One key press (down and up) as the keyboard sends it."""
        code = {"ArrowLeft": 37, "ArrowRight": 39}.get(key, ord(key.upper()[0]))
        text = key if len(key) == 1 else ""
        for kind in ("keyDown", "keyUp"):
            self.page.call("Input.dispatchKeyEvent", type=kind if text or kind == "keyUp" else "rawKeyDown",
                           key=key, text=text if kind == "keyDown" else "", windowsVirtualKeyCode=code)

    def screenshot(self, path: Path, width: int = 1280, height: int = 1000) -> None:
        """The page as a PNG of ``width`` x ``height`` CSS pixels."""
        self.page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                       mobile=False)
        shot = self.page.call("Page.captureScreenshot", format="png")
        Path(path).write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.process.wait()
        self._signal_group(signal.SIGKILL)  # any helper left behind
        self.profile.cleanup()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
