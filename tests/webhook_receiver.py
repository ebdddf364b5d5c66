"""A real HTTP receiver for the webhook tests: a thread server on 127.0.0.1 that keeps every request it
got and answers each with the next scripted :class:`Reply` (200 when none is left). A reply may ``hold``
its answer until an event is set — a slow receiver, a POST still on the wire."""

from __future__ import annotations

import http.server
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Received:
    """One request as the receiver read it (header names lower-cased)."""

    path: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hold: threading.Event | None = None


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.default = Reply()
        self.arrived = threading.Event()  # set when a request has been read (before its reply)
        self.answered = threading.Event()  # set when a reply has been written in full
        self.holds: list[threading.Event] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._lock:
                    receiver.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    reply = receiver.replies.popleft() if receiver.replies else receiver.default
                receiver.arrived.set()
                if reply.hold is not None:
                    reply.hold.wait(30)
                try:
                    self.send_response_only(reply.status)
                    if "date" not in {k.lower() for k in reply.headers}:  # a scripted Date stands alone
                        self.send_header("date", self.date_time_string())
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    self.wfile.flush()
                except OSError:
                    return  # the sender tore the connection down
                receiver.answered.set()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        # shutdown() waits for serve_forever's next poll: every 20 ms, not the default 0.5 s each test pays
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hooks/orders"

    def reply(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)
            self.holds.extend(r.hold for r in replies if r.hold is not None)

    def count(self) -> int:
        with self._lock:
            return len(self.requests)


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        for hold in receiver.holds:
            hold.set()
        receiver.server.shutdown()
        receiver.server.server_close()
        receiver.thread.join(5)
