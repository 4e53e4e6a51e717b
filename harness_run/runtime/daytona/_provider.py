"""``DaytonaProvider``: HarnessBox's ``provider="daytona"`` (see :func:`deploy_daytona`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_run.errors import UsageError
from harness_run.runtime import Engine
from harness_run.spec import AgentSpec

__all__ = ["DaytonaProvider"]


class DaytonaProvider:
    """Each session in its own Daytona sandbox of the spec's snapshot, stopped after ``idle_ttl``
    seconds without a turn and started again (workspace intact) by the next message; ``kill``
    deletes it.

    - ``api_key``/``api_url``/``target``: the Daytona SDK's (default: HarnessBox's
      ``secrets["provider_api_key"]``, else the SDK's ``DAYTONA_API_KEY``/``DAYTONA_API_URL``/
      ``DAYTONA_TARGET``). The key stays in this process: no sandbox gets it.
    - ``store``: the history store this process and the sandboxes share (default
      ``$HARNESS_RUN_STORE``): ``gs://bucket[/prefix]``, or a directory the sandboxes see through the
      Daytona volume ``store_volume`` (default ``$HARNESS_RUN_DAYTONA_STORE_VOLUME``).
    - ``registry``: push the image built here and snapshot it from there (default
      ``$HARNESS_RUN_REGISTRY``); without, Daytona builds the compiled context itself.
    - ``docker_client``, ``base_image``, ``ca_files``: the image build; ``env``: more sandbox
      environment (non-secret); ``labels``: on every sandbox.
    """

    name = "daytona"
    enforces_network = False
    """``SecurityPolicy(deny_network=True)`` is refused: the sandboxes keep Daytona's network."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        api_url: str | None = None,
        target: str | None = None,
        store: str | None = None,
        store_volume: str | None = None,
        registry: str | None = None,
        docker_client: Any = None,
        base_image: str | None = None,
        ca_files: Sequence[str | Path] = (),
        idle_ttl: float = 300.0,
        claim_timeout: float = 300.0,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        agent_netns: str = "own",
    ) -> None:
        self.api_key = api_key
        self.api_url = api_url
        self.target = target
        self.store = store or os.environ.get("HARNESS_RUN_STORE") or None
        self.store_volume = store_volume or os.environ.get("HARNESS_RUN_DAYTONA_STORE_VOLUME") or None
        self.registry = registry or os.environ.get("HARNESS_RUN_REGISTRY") or None
        self.docker_client = docker_client
        self.base_image = base_image
        self.ca_files = tuple(ca_files)
        self.idle_ttl = idle_ttl
        self.claim_timeout = claim_timeout
        self.env = dict(env or {})
        self.labels = dict(labels or {})
        self.agent_netns = agent_netns

    def __repr__(self) -> str:  # never the key
        return f"<DaytonaProvider api_url={self.api_url!r} store={self.store!r}>"

    def use_api_key(self, key: str | None) -> None:
        """HarnessBox's ``secrets["provider_api_key"]``: the key for the SDK, unless one was given."""
        if key and not self.api_key:
            self.api_key = key

    async def deploy(self, spec: AgentSpec) -> Engine:
        if not self.store:
            raise UsageError(
                "provider 'daytona' needs a history store that this process and the sandboxes share: "
                "DaytonaProvider(store='gs://<bucket>') or HARNESS_RUN_STORE"
            )
        from harness_run.runtime.daytona._deploy import deploy_daytona
        from harness_run.vocab.pins import DEFAULT_BASE_IMAGE

        return await asyncio.to_thread(
            deploy_daytona,
            spec,
            store=self.store,
            store_volume=self.store_volume,
            api_key=self.api_key,
            api_url=self.api_url,
            target=self.target,
            registry=self.registry,
            docker_client=self.docker_client,
            base_image=self.base_image or DEFAULT_BASE_IMAGE,
            ca_files=self.ca_files,
            idle_ttl=self.idle_ttl,
            claim_timeout=self.claim_timeout,
            env=self.env,
            labels=self.labels,
            agent_netns=self.agent_netns,
        )
