"""Pick the web framework of `harness-run serve` and the in-image worker by measurement.

For each candidate: the import time of a minimal app (median of N fresh interpreters) and the cold
start of a process serving ``GET /healthz`` until its first 200 (median of N). SSE, pydantic and
OpenAPI support are facts about each framework, printed alongside.

The candidates are measured in a throwaway virtualenv, not the project's::

    uv venv /tmp/fwbench && VIRTUAL_ENV=/tmp/fwbench uv pip install aiohttp starlette fastapi uvicorn
    python -m benchmarks server_frameworks --python /tmp/fwbench/bin/python [--runs 7]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

APPS = {
    "aiohttp": (
        "from aiohttp import web",
        "from aiohttp import web\n"
        "async def h(r): return web.json_response({'ok': True})\n"
        "app = web.Application(); app.router.add_get('/healthz', h)\n"
        "web.run_app(app, host='127.0.0.1', port=PORT, print=None)\n",
    ),
    "starlette+uvicorn": (
        "import starlette.applications, starlette.responses, uvicorn",
        "import uvicorn\n"
        "from starlette.applications import Starlette\n"
        "from starlette.responses import JSONResponse\n"
        "from starlette.routing import Route\n"
        "async def h(r): return JSONResponse({'ok': True})\n"
        "app = Starlette(routes=[Route('/healthz', h)])\n"
        "uvicorn.run(app, host='127.0.0.1', port=PORT, log_level='error')\n",
    ),
    "fastapi+uvicorn": (
        "import fastapi, uvicorn",
        "import uvicorn\n"
        "from fastapi import FastAPI\n"
        "app = FastAPI()\n"
        "@app.get('/healthz')\n"
        "async def h(): return {'ok': True}\n"
        "uvicorn.run(app, host='127.0.0.1', port=PORT, log_level='error')\n",
    ),
}

FACTS = {
    "aiohttp": "SSE: StreamResponse (hand-written frames); pydantic: by hand; OpenAPI: none built in",
    "starlette+uvicorn": "SSE: StreamingResponse (hand-written frames); pydantic: by hand; OpenAPI: none",
    "fastapi+uvicorn": "SSE: StreamingResponse; pydantic: native (bodies, 422s); OpenAPI: generated",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def import_time(python: str, statement: str) -> float:
    started = time.perf_counter()
    subprocess.run([python, "-c", statement], check=True)
    return time.perf_counter() - started


def cold_start(python: str, source: str) -> float:
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([python, "-c", source.replace("PORT", str(port))])
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                    if answer.status == 200:
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the throwaway venv")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"{'framework':20} {'import s (median)':>18} {'cold start s (median)':>22}  facts")
    for name, (statement, source) in APPS.items():
        try:
            imports = [import_time(args.python, statement) for _ in range(args.runs)]
        except subprocess.CalledProcessError:
            print(f"{name:20} not installed in {args.python}")
            continue
        starts = [cold_start(args.python, source) for _ in range(args.runs)]
        print(
            f"{name:20} {statistics.median(imports):18.3f} {statistics.median(starts):22.3f}  {FACTS[name]}"
        )


if __name__ == "__main__":
    main()
