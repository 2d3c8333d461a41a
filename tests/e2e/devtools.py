"""Debian's headless Chromium driven over the DevTools protocol, for the tests that click.

`--dump-dom` (test_official_client_portal.py) loads one URL and prints its DOM: enough to
read a page and follow its links, not to submit a form (the link page's sign-in is a POST
from a button). This drives the same browser through `--remote-debugging-pipe`: the
protocol's JSON messages, NUL-separated, on file descriptors 3 (to Chromium) and 4 (from
it), so no WebSocket client is needed. One page, its commands answered in order; the
page's events are read only to wait for its loads."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from healthledger.adapters.printing import DEBIAN_CHROMIUM, HEADLESS_CHROMIUM_FLAGS

CHROMIUM = DEBIAN_CHROMIUM


class DevToolsError(AssertionError):
    pass


class Browser:
    """One headless Chromium with one page (a tab) attached."""

    def __init__(
        self,
        profile: Path,
        chromium: Path = CHROMIUM,
        timeout: float = 60.0,
        flags: Sequence[str] = (),
    ) -> None:
        self.timeout = timeout
        to_chromium, self._to = os.pipe()
        self._from, from_chromium = os.pipe()

        def descriptors() -> None:  # in the child: the pipe ends where Chromium wants them
            os.dup2(to_chromium, 3)
            os.dup2(from_chromium, 4)

        self.process = subprocess.Popen(
            [
                str(chromium),
                *HEADLESS_CHROMIUM_FLAGS,
                *flags,
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=descriptors,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chromium)
        os.close(from_chromium)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self.session: str | None = None  # the browser's, until a page is attached
        targets = self.command("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        attached = self.command("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self.session = attached["sessionId"]
        self.command("Page.enable")
        self.command("Runtime.enable")

    # -- the protocol ---------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise DevToolsError("Chromium did not answer in time")
            chunk = os.read(self._from, 1 << 16)
            if not chunk:
                raise DevToolsError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        found: dict[str, Any] = json.loads(message)
        return found

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        """Send a command to the page (the browser, before one is attached); its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            if "method" in answer:
                self._events.append(answer)

    def _wait_for_load(self) -> None:
        """Until the page's main frame fired `load` (events seen since the last wait)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for event in self._events:
                if event.get("method") == "Page.loadEventFired":
                    self._events.clear()
                    return
            self._events.clear()
            message = self._receive(deadline)
            if "method" in message:
                self._events.append(message)

    # -- what a person does ---------------------------------------------------------------

    def open(self, url: str) -> None:
        self._events.clear()
        self.command("Page.navigate", url=url)
        self._wait_for_load()

    def evaluate(self, expression: str) -> Any:
        found = self.command("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in found:
            raise DevToolsError(f"the page's script failed: {found['exceptionDetails']}")
        return found["result"].get("value")

    def click(self, selector: str) -> None:
        """Click the element `selector` finds, as a person does (the page's own handlers
        and form submission run), and wait for the page it leads to to load; redirects on
        the way are the browser's."""
        self._events.clear()
        clicked = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return false; e.click(); return true; })()"
        )
        if not clicked:
            raise DevToolsError(f"nothing to click at {selector}")
        self._wait_for_load()

    @property
    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        os.close(self._to)
        os.close(self._from)
