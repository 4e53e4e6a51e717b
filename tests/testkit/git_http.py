"""A git smart-HTTP server on 127.0.0.1 (``git http-backend`` behind a token check) for clone/push
tests and benchmarks (test infrastructure: not part of the library)."""

from __future__ import annotations

import base64
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class GitHttpServer:
    """Serves the bare repositories under ``root``; every request needs ``x-access-token:<token>``
    as Basic auth (else 401). ``authorized`` / ``refused`` count the requests, ``upload_pack_bytes``
    the bytes of the ``git-upload-pack`` answers (what clones and fetches download)."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.authorized = 0
        self.refused = 0
        self.upload_pack_bytes = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.handle(self)

            def do_POST(self) -> None:
                server.handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> GitHttpServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.headers.get("Authorization") != self.expected:
            self.refused += 1
            request.send_response(401)
            request.send_header("WWW-Authenticate", 'Basic realm="git"')
            request.send_header("Content-Length", "0")
            request.end_headers()
            return
        self.authorized += 1
        parts = urlsplit(request.path)
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        env = {
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",
            "REQUEST_METHOD": request.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": request.headers.get("Content-Encoding", ""),
            "GIT_HTTP_MAX_REQUEST_BUFFER": "100M",
            "PATH": "/usr/bin:/bin",
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        request.send_response(status)
        for key, value in headers:
            request.send_header(key, value)
        if parts.path.endswith("/git-upload-pack"):
            self.upload_pack_bytes += len(payload)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)


def make_bare_repo(root: Path, name: str, files: dict[str, str]) -> Path:
    """``root/<name>.git``: a bare repository whose ``main`` has ``files``."""

    def git(cwd: Path, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout

    work = root / f"{name}-work"
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    for rel, content in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(content)
    git(work, "add", "-A")
    git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    bare = root / f"{name}.git"
    git(root, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "config", "http.receivepack", "true")
    return bare


def log(bare: Path) -> list[str]:
    out = subprocess.run(
        ["git", "log", "--format=%s", "main"], cwd=bare, check=True, capture_output=True, text=True
    ).stdout
    return out.split()
