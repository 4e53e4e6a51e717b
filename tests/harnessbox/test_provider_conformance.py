"""The sandbox provider conformance suite (``harness_run.testing.PROVIDER_CHECKS``) on every built-in
provider, on real parts: the container provider (real containers of a compiled image on the test
Docker engine), E2B (the real ``e2b`` SDK against the E2B API double, each sandbox a real container of
the built template, history in fake GCS) and Daytona (the real ``daytona`` SDK against the Daytona
API double, the snapshot's image pushed to the local registry, history on a shared volume). Each
claim's worker answers through its bearer token (and the vendor's routing). A new provider joins
with one entry in ``PROVIDERS`` (a fixture name whose value is ``make(idle_ttl) -> SandboxProvider``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from providers_e2b.conftest import E2B_KEY
from providers_e2b.conftest import e2b_double as e2b_double  # the E2B API double (a fixture)

from harness_run import AgentSpec, local
from harness_run.providers import SandboxProvider
from harness_run.testing import PROVIDER_CHECKS

pytestmark = [pytest.mark.docker, pytest.mark.integration, pytest.mark.timeout(600)]

Factory = Callable[[float], SandboxProvider]

PROVIDERS = ["container_provider", "e2b_provider", "daytona_provider"]
"""Fixtures returning ``make(idle_ttl)`` (E2B and Daytona: on their API doubles)."""
SPEC = AgentSpec(name="conformance", harness="claude-code", model="claude-sonnet-4-6")


@pytest.fixture(scope="module")
def container_provider(
    container_options: dict[str, Any], container_opts: Any, tmp_path_factory: pytest.TempPathFactory
) -> Factory:
    from harness_run.runtime.container import ContainerEngine, ContainerPool, share_store

    spec = SPEC
    workdir = tmp_path_factory.mktemp("conformance")
    engine = local.deploy(spec, workdir=workdir, isolation="container", container=container_opts)
    assert isinstance(engine, ContainerEngine)
    image = engine.image
    engine.close()
    store_dir: Path = share_store(workdir).root

    def make(idle_ttl: float) -> SandboxProvider:
        return ContainerPool(
            container_options["docker_client"],
            image=image,
            engine="conformance",
            store_dir=store_dir,
            idle_ttl=idle_ttl,
            labels=container_options.get("labels"),
        )

    return make


@pytest.fixture(scope="module")
def e2b_provider(e2b_double: Any, fake_gcs: Any) -> Factory:
    from harness_run.runtime.e2b import E2BSandboxes, deploy_e2b

    store = f"gs://{fake_gcs.create_bucket(f'hr-conf-{uuid.uuid4().hex[:12]}')}/hr"
    connection = {"api_url": e2b_double.url, "sandbox_url": e2b_double.url, "api_key": E2B_KEY}

    async def template() -> str:
        engine = await deploy_e2b(SPEC, store=store, connection=connection)  # builds the template
        await engine.aclose()
        return engine.claims.template

    with ThreadPoolExecutor(1) as pool:  # the tests' loop runs this fixture
        built = pool.submit(asyncio.run, template()).result()

    def make(idle_ttl: float) -> SandboxProvider:
        return E2BSandboxes(
            template=built, engine=SPEC.name, store_url=store, connection=connection, pause_after=idle_ttl
        )

    return make


@pytest.fixture(scope="module")
def daytona_provider(
    container_options: dict[str, Any], registry: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Factory]:
    from testkit.daytona_double import DaytonaDouble

    from harness_run.runtime.container import share_store
    from harness_run.runtime.daytona import DaytonaSandboxes, deploy_daytona
    from harness_run.runtime.daytona._sandboxes import daytona_client

    store = tmp_path_factory.mktemp("daytona-conformance")
    share_store(store)
    key = f"dtn-conf-{uuid.uuid4().hex}"
    client = container_options["docker_client"]
    labels = container_options["labels"]
    with DaytonaDouble(client, api_key=key, volume_dirs={"hr-store": store}, labels=labels) as api:
        engine = deploy_daytona(
            SPEC,
            store=str(store),
            store_volume="hr-store",
            api_key=key,
            api_url=api.url,
            registry=f"{registry}/daytona",
            docker_client=client,
            base_image=container_options["base_image"],
            ca_files=container_options["ca_files"],
        )
        snapshot = engine.snapshot
        engine.close()

        def make(idle_ttl: float) -> SandboxProvider:
            return DaytonaSandboxes(
                daytona_client(key, api.url, None),
                snapshot=snapshot,
                engine=SPEC.name,
                api_key=key,
                idle_ttl=idle_ttl,
                store_url=str(store),
                store_volume="hr-store",
                labels=labels,
                agent_netns="shared",  # the double's containers share the host's network namespace
            )

        yield make


@pytest.fixture(params=PROVIDERS)
def make(request: pytest.FixtureRequest) -> Factory:
    """Each provider's ``make``, set up before the test runs (its doubles and services too)."""
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("check", sorted(PROVIDER_CHECKS))
async def test_provider_keeps_the_port_contract(make: Factory, check: str) -> None:
    await PROVIDER_CHECKS[check](make)
