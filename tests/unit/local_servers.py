"""Local servers for client tests: one that answers too little (the faults a Kubernetes or cloud client must
turn into deadlines), and one that answers with a given handler."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def hanging_server(first_bytes: bytes = b"") -> Iterator[str]:
    """http://127.0.0.1:PORT of a server that accepts every connection and then hangs: silent, or (with
    `first_bytes`) after reading the request and sending those bytes of an answer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn = listener.accept()[0]
            except OSError:
                continue
            held.append(conn)
            if first_bytes:
                conn.recv(65536)
                conn.sendall(first_bytes)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


class _Server(ThreadingHTTPServer):
    # the listen backlog (5 by default): a client's concurrent queries (Prometheus.query_all) overflowed it, and a
    # dropped connection is retried by the kernel after 1 s
    request_queue_size = 64


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """http://127.0.0.1:PORT of a threaded HTTP server answering with `handler`, shut down on exit."""
    server = _Server(("127.0.0.1", 0), handler)
    # shutdown() waits for the loop's next poll: 0.5 s by default, paid at every exit
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def closed_port() -> str:
    """http://127.0.0.1:PORT where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"
