"""A real headless Chromium driven over the DevTools protocol (its websocket, through aiohttp).

Used by the report tests to open a page, run its script, read the DOM, click and type, list the
network requests the page made, and take screenshots. `find_chromium()` is None when no Chromium
is installed (Debian: `apt-get install chromium`).

    python tests/headless_browser.py screenshot report.html#groups docs/report_groups.png [WIDTH HEIGHT]
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


class Browser:
    """`async with Browser() as browser: await browser.open(url); await browser.evaluate("...")`."""

    def __init__(self, executable: str | None = None, width: int = 1280, height: int = 900) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise RuntimeError("no Chromium found; install it (Debian: apt-get install chromium) or set $CHROMIUM")
        self.width, self.height = width, height
        self.requests: list[str] = []  # every URL the page asked for (Network.requestWillBeSent)
        self.console_errors: list[str] = []
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}

    async def __aenter__(self) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        self._process = subprocess.Popen(
            [
                self.executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the helpers it forks end with it
        )
        port_file = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.executable} did not open its DevTools port (exit {self._process.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        self._socket = await self._http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        for domain in ("Page", "Runtime", "Network"):
            await self.send(f"{domain}.enable")
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        await self._socket.close()
        await self._http.close()
        await asyncio.to_thread(self._stop_process_group)
        await self._remove_profile()

    def _stop_process_group(self) -> None:
        group = self._process.pid  # start_new_session: the group id is the leader's pid
        for signal_number in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, signal_number)
            except ProcessLookupError:
                break
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue
            if signal_number == signal.SIGTERM:
                try:  # helpers (crashpad, utility processes) may outlive the browser by a moment
                    os.killpg(group, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break

    async def _remove_profile(self) -> None:
        # A helper still exiting can write into the profile while it is removed ("Directory not
        # empty"); try again briefly, and leave a stray temp directory rather than fail the test.
        for _ in range(20):
            try:
                self._profile.cleanup()
                return
            except OSError:
                await asyncio.sleep(0.25)
        shutil.rmtree(self._profile.name, ignore_errors=True)

    async def _read(self) -> None:
        async for message in self._socket:
            data = json.loads(message.data)
            if "id" in data:
                future = self._pending.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Network.requestWillBeSent":
                self.requests.append(data["params"]["request"]["url"])
            elif data.get("method") == "Runtime.exceptionThrown":
                self.console_errors.append(json.dumps(data["params"]["exceptionDetails"])[:500])

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[number] = future
        await self._socket.send_str(json.dumps({"id": number, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, 60)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able values only)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while await self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not finish loading")
            await asyncio.sleep(0.05)

    async def screenshot(self, path: str | os.PathLike[str], *, full_height: bool = False) -> None:
        height = self.height
        if full_height:
            height = min(4000, int(await self.evaluate("document.documentElement.scrollHeight")))
            await self.send(
                "Emulation.setDeviceMetricsOverride", width=self.width, height=height, deviceScaleFactor=1, mobile=False
            )
        shot = await self.send("Page.captureScreenshot", format="png")
        Path(path).write_bytes(base64.b64decode(shot["data"]))


async def _screenshot(url: str, out: str, width: int, height: int) -> None:
    async with Browser(width=width, height=height) as browser:
        await browser.open(url)
        await browser.screenshot(out)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "screenshot":
        raise SystemExit(__doc__)
    target = sys.argv[2]
    page, _, fragment = target.partition("#")
    url = Path(page).resolve().as_uri() + (f"#{fragment}" if fragment else "")
    size = [int(v) for v in sys.argv[4:6]] or [1280, 900]
    asyncio.run(_screenshot(url, sys.argv[3], *size))
