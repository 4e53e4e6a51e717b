"""The E2B provider's test parts: the E2B API double (real containers on our dockerd, the real
``e2b`` SDK pointed at it through ``E2B_API_URL``/``E2B_SANDBOX_URL``), a fake-GCS history store
both sides reach, and an E2B key that is a canary: it must reach the double and nothing else."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

E2B_KEY = f"e2b_canary_{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def e2b_double(
    docker_client: Any, docker_labels: dict[str, str], base_image: str, fake_gcs: Any
) -> Iterator[Any]:
    """The double for the whole run: the public base image is mirrored to the local one, its builds
    trust the registry proxy's CA, its sandboxes reach the fake GCS (their "network")."""
    pytest.importorskip(
        "e2b", reason="the e2b SDK is not installed (scripts/bootstrap installs the e2b extra)"
    )
    from testkit.e2b_double import E2BDouble

    ca = os.environ.get("PIP_CERT")
    if not ca:
        pytest.skip(
            "PIP_CERT does not name the registry proxy's CA file; the template build cannot reach PyPI"
        )
    with E2BDouble(
        docker_client,
        extra_env=dict(fake_gcs.env),
        labels=docker_labels,
        image_aliases={DEFAULT_BASE_IMAGE: base_image},
        build_ca_files=[ca],
    ) as double:
        yield double


@pytest.fixture
def e2b_env(e2b_double: Any, gcs_store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The SDK's endpoint settings pointed at the double, the canary key and the store; the store's URL."""
    for name, value in e2b_double.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("E2B_API_KEY", E2B_KEY)
    monkeypatch.setenv("HARNESS_RUN_STORE", gcs_store_url)
    return gcs_store_url
