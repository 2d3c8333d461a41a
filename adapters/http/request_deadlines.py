"""Deadlines for receiving a request, below the application: slow clients cannot hold
connections open (docs/adr/0013-slow-clients.md).

uvicorn has no timeout for reading a request: `timeout_keep_alive` covers only the quiet
time after a response, and is cancelled by the first byte of the next request. A client
that opens a connection and sends nothing, or a request head one byte at a time, or half
a body, holds its connection (and a file descriptor) for as long as it likes; ASGI
middleware cannot see it, because the application is called only once the head is in.

`RequestDeadlines` is an asyncio protocol that wraps uvicorn's own h11 protocol (passed
to uvicorn as `Config(http=...)`) and follows the bytes a connection receives with an h11
parser of its own. A request head must be complete `header_timeout` after the connection
opened or after its first byte arrived, and its body `body_timeout` after the head; else
the connection is closed. Time spent computing a response is never counted, and a quiet
keep-alive connection is uvicorn's to close. A file upload (a POST to a path that
`upload_paths` matches: an Apple Health export, hundreds of MB) has `upload_timeout` for
its body instead: a deadline still, but one a large file over a real link can meet.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("healthledger.server")

# What the parser says of the requests it has read: nothing (it only follows them).
_NO_CONTENT = h11.Response(status_code=204, headers=[])


class RequestDeadlines(asyncio.Protocol):
    """uvicorn's h11 protocol, with deadlines for receiving each request."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # POSTs to these paths upload a file: their body has `upload_timeout`.
    upload_paths: re.Pattern[str] | None = None
    upload_timeout: float = 900.0

    def __init__(self, **uvicorn_arguments: Any) -> None:
        # The arguments uvicorn builds every HTTP protocol with (its config and state).
        self.served = H11Protocol(**uvicorn_arguments)
        # The parser takes heads as large as uvicorn does (h11's default unless set).
        largest = uvicorn_arguments["config"].h11_max_incomplete_event_size
        self.parser = (
            h11.Connection(h11.SERVER)
            if largest is None
            else h11.Connection(h11.SERVER, max_incomplete_event_size=largest)
        )
        self.transport: asyncio.Transport | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.following = True

    # -- asyncio.Protocol, handed on to uvicorn -------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.served.connection_made(transport)
        # Nothing received yet: the first head is due from now.
        self._arm(self.header_timeout, "request head")

    def data_received(self, data: bytes) -> None:
        self.served.data_received(data)
        if self.following:
            self._follow(data)

    def eof_received(self) -> None:
        self.served.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.served.connection_lost(exc)

    def pause_writing(self) -> None:
        self.served.pause_writing()

    def resume_writing(self) -> None:
        self.served.resume_writing()

    # -- following the requests -----------------------------------------------------------

    def _follow(self, data: bytes) -> None:
        if self.parser.their_state is h11.IDLE and self.deadline is None and data:
            self._arm(self.header_timeout, "request head")  # a new request begins
        self.parser.receive_data(data)
        while True:
            try:
                event = self.parser.next_event()
            except h11.RemoteProtocolError:
                # uvicorn answers the malformed request and closes the connection.
                self._stop_following()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._disarm()
                if self._is_upload(event):
                    self._arm(self.upload_timeout, "upload body")
                else:
                    self._arm(self.body_timeout, "request body")
            elif isinstance(event, h11.EndOfMessage):
                self._disarm()
                if not self._next_request():
                    return
            elif isinstance(event, h11.ConnectionClosed):
                self._stop_following()
                return

    def _next_request(self) -> bool:
        """Ready the parser for the next request on this connection; whatever it already
        holds of that request starts its head deadline."""
        try:
            self.parser.send(_NO_CONTENT)
            self.parser.send(h11.EndOfMessage())
            self.parser.start_next_cycle()
        except h11.LocalProtocolError:
            # The connection ends after this request (Connection: close, HTTP/1.0).
            self._stop_following()
            return False
        pending, _ = self.parser.trailing_data
        if pending:
            self._arm(self.header_timeout, "request head")
        return True

    def _is_upload(self, request: h11.Request) -> bool:
        if self.upload_paths is None or request.method != b"POST":
            return False
        path = request.target.decode("latin-1").split("?", 1)[0]
        return self.upload_paths.match(path) is not None

    def _stop_following(self) -> None:
        self._disarm()
        self.following = False

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self.deadline = loop.call_later(seconds, self._expire, what)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expire(self, what: str) -> None:
        self.deadline = None
        self.following = False
        log.debug("closed a connection that did not send its %s in time", what)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


def request_deadlines(
    header_timeout: float,
    body_timeout: float,
    *,
    upload_paths: re.Pattern[str] | None = None,
    upload_timeout: float = 900.0,
) -> type[RequestDeadlines]:
    """The protocol class to give uvicorn (`Config(http=...)`), with these deadlines."""

    class Configured(RequestDeadlines):
        pass

    Configured.header_timeout = header_timeout
    Configured.body_timeout = body_timeout
    Configured.upload_paths = upload_paths
    Configured.upload_timeout = upload_timeout
    return Configured
