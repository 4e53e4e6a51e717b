"""The ``phases`` variant's relay, a process of its own between the CLI and the scripted model:
``python -m benchmarks.turn_cost._relay PORT`` forwards each request to 127.0.0.1:PORT and prints
``port P`` once, then ``start T`` when a request arrives and ``end T`` when its answer is sent
(``time.monotonic``: one clock for every process)."""

from __future__ import annotations

import http.client
import http.server
import sys
import time
from typing import Any

_HOP = ("host", "content-length", "connection", "transfer-encoding")


def serve(upstream: int) -> None:
    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            print(f"start {time.monotonic()}", flush=True)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            conn.request("POST", self.path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            print(f"end {time.monotonic()}", flush=True)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
