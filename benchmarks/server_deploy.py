"""``harness-run serve deploy`` and the server on a GCS store: one labelled number per line.

    python -m benchmarks server_deploy [--runs N] [--smoke]

- compile_server_ms: median ``compile_server(specs=[spec])`` (the server image's context + digest).
- import_run_v2_ms: ``from google.cloud import run_v2`` in a fresh interpreter (paid by ``serve deploy``).
- cloudrun_create_ms: ``apply_service`` creating a service against the Cloud Run stand-in
  (tests/testkit/cloudrun.py), with the real client: GET (404) + POST + operation polling.
- cloudrun_noop_ms: median no-op ``apply_service`` (settings unchanged: one GET, nothing sent).
- key_check_gcs_ms / key_check_gcs_cached_ms: median ``check_key`` of a valid key on a GCS store
  (fake-gcs-server on 127.0.0.1): one object read, and through ``CachedKeys`` (what ``serve`` uses).
- key_check_sqlite_ms: the same on the SQLite store.

The Docker build/push part of a deploy is measured by tests/server/test_deploy_image.py (``-s``).
"""

from __future__ import annotations

import argparse
import time

from benchmarks._common import claude_spec, import_ms, median_call, scratch, testkit
from benchmarks._services import fake_gcs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20, help="repetitions per number (default: %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="3 repetitions: check the script runs")
    args = parser.parse_args()
    runs = 3 if args.smoke else args.runs

    CloudRunStandIn = testkit("cloudrun").CloudRunStandIn

    from harness_run.compiler import compile_server
    from harness_run.server import CachedKeys, ServiceSettings, check_key, create_key, key_store, run_client
    from harness_run.server._cloudrun import apply_service
    from harness_run.store import SqliteStore, open_store

    spec = claude_spec()
    compile_server(specs=[spec])  # templates and library files read once
    print(f"compile_server_ms {median_call(lambda: compile_server(specs=[spec]), runs):.1f}")
    print(f"import_run_v2_ms {import_ms('from google.cloud import run_v2', min(runs, 5)):.1f}")

    settings = ServiceSettings(
        project="bench-project",
        region="us-central1",
        service="bench",
        image="127.0.0.1:5000/bench/harness-run-server:0123456789ab",
        store="gs://bench/hr",
        service_account="harness-run-server@bench-project.iam.gserviceaccount.com",
    )
    with CloudRunStandIn() as api:
        client = run_client(api.url)
        start = time.perf_counter()
        apply_service(client, settings, step=lambda _n, _d: None)
        print(f"cloudrun_create_ms {(time.perf_counter() - start) * 1000:.1f}")
        noop = median_call(lambda: apply_service(client, settings, step=lambda _n, _d: None), runs)
        print(f"cloudrun_noop_ms {noop:.1f}")

    with fake_gcs() as gcs:
        bucket = gcs.create_bucket("bench-keys")
        store = open_store(f"gs://{bucket}/hr")
        keys = key_store(store)
        _, key = create_key(keys, "bench")
        header = f"Bearer {key}"
        print(f"key_check_gcs_ms {median_call(lambda: check_key(keys, header), runs):.2f}")
        cached = CachedKeys(keys, ttl=5.0)
        check_key(cached, header)
        print(f"key_check_gcs_cached_ms {median_call(lambda: check_key(cached, header), runs):.3f}")
        store.close()
    local = SqliteStore(scratch("keys-"))
    _, key = create_key(key_store(local), "bench")
    header = f"Bearer {key}"
    print(f"key_check_sqlite_ms {median_call(lambda: check_key(key_store(local), header), runs):.3f}")
    local.close()


if __name__ == "__main__":
    main()
