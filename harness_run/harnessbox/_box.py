"""``HarnessBox``: HarnessBox's entry point over one harness-run engine.

The constructor's settings become one :class:`~harness_run.AgentSpec` (harness, model, system
prompt appended to the harness's own, setup script, turn timeout, the repo with its token as the
repo's ``auth`` secret, ``git`` options committing and pushing ``on_close``); the provider deploys
it once, on the first ``create_session``; every HarnessBox session is a session of that engine on
its own branch. Nothing here runs turns: the engine does, on any runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from harness_run.errors import RunError, UsageError
from harness_run.harnessbox._remote import ServerProvider
from harness_run.harnessbox._session import HarnessBoxSession, MessageStream
from harness_run.harnessbox.providers import NETWORK_ENFORCING, Provider, provider_for
from harness_run.harnessbox.workspace import WorkspaceConfig, WorkspaceMode
from harness_run.providers import SandboxSource
from harness_run.runtime import Engine, Run
from harness_run.spec import (
    AgentSpec,
    ApprovalPolicy,
    GitOptions,
    RepoSource,
    SecurityPolicy,
    SessionConfig,
    SystemPrompt,
)
from harness_run.vocab.models import DEFAULT_MODELS

__all__ = ["GIT_TOKEN", "HarnessBox", "HarnessBoxSecrets"]

GIT_TOKEN = "HARNESSBOX_GIT_TOKEN"
"""The secret name the repo's ``auth_token`` goes under (to git only)."""

COMMIT_MESSAGE = "HarnessBox: session {session_id} on {branch}"


class HarnessBoxSecrets(BaseModel):
    """Per-run secrets: ``harness_secrets`` go to the harness (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``, an endpoint such as ``ANTHROPIC_BASE_URL``, or any secret the agent may
    use); ``provider_api_key`` is a sandbox vendor's key (E2B's, Daytona's: given to the vendor's
    SDK only, never into a sandbox). Values are never shown in a repr, an error, an event or a
    stored record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_api_key: SecretStr | None = None
    harness_secrets: dict[str, SecretStr] = Field(default_factory=dict[str, SecretStr])

    def values(self) -> dict[str, str]:
        return {k: v.get_secret_value() for k, v in self.harness_secrets.items()}


def _secrets_of(secrets: HarnessBoxSecrets | Mapping[str, Any] | None) -> HarnessBoxSecrets:
    if secrets is None or isinstance(secrets, HarnessBoxSecrets):
        return secrets or HarnessBoxSecrets()
    try:
        return HarnessBoxSecrets.model_validate(dict(secrets))
    except ValidationError as exc:  # the message names fields only, never values
        fields = sorted({".".join(map(str, e["loc"])) for e in exc.errors()})
        raise UsageError(
            f"secrets: bad field(s) {fields}; give provider_api_key (a string or None) and "
            "harness_secrets (a dict of names to string values)"
        ) from None


def _prompt_text(system_prompt: str | Path | None) -> str | None:
    if system_prompt is None or isinstance(system_prompt, str):
        return system_prompt
    try:
        return system_prompt.read_text()
    except OSError as exc:
        raise UsageError(
            f"system_prompt: cannot read {system_prompt} ({exc.strerror}); pass an existing file or the text"
        ) from None


class HarnessBox:
    """Run agent sessions through harness-run with HarnessBox's API.

    ``provider``: ``"local"``, ``"docker"``, ``"agent-sandbox"``, a
    :class:`~harness_run.providers.SandboxSource` (your own sandboxes, see docs/providers.md) or a
    :class:`~harness_run.harnessbox.Provider`. ``harness``: ``"claude-code"``, ``"codex"`` or
    ``"opencode"``. ``system_prompt``: text, or a ``Path`` to read it from (appended to the
    harness's own prompt, as a ``CLAUDE.md``/``AGENTS.md`` would be). ``timeout``: seconds one turn
    may take (the spec's ``timeout``: the turn then ends with ``stop_reason="timeout"``; default
    none). The repository is cloned into the session's workspace itself: the agent and
    ``run_command`` work in the checkout. ``security_policy.deny_network``: the provider cuts the
    network (``"docker"``, ``"agent-sandbox"``: no network, the model through an egress proxy);
    other providers refuse it, except with ``harness="codex"``, whose own sandbox turns it off.
    ``base_url`` + ``api_key``: the sessions run on a ``harness-run serve`` team server instead
    (it picks the served engine matching this configuration, ``POST /v1/boxes``).
    """

    def __init__(
        self,
        provider: str | Provider | SandboxSource = "local",
        harness: str = "claude-code",
        *,
        model: str | None = None,
        secrets: HarnessBoxSecrets | Mapping[str, Any] | None = None,
        system_prompt: str | Path | None = None,
        workspace_config: WorkspaceConfig | None = None,
        security_policy: SecurityPolicy | None = None,
        approvals: ApprovalPolicy | None = None,
        setup_script: str | None = None,
        timeout: float | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "harnessbox",
    ) -> None:
        if api_key is not None and base_url is None:
            raise UsageError(
                "api_key= is a team server's API key: give base_url= too (the `harness-run serve` "
                "address), or leave both out to run the sessions from this process"
            )
        self.base_url = base_url
        self._api_key = api_key
        self.provider = provider_for(provider) if base_url is None else ServerProvider(base_url, api_key)
        self.secrets = _secrets_of(secrets)
        vendor_key = self.secrets.provider_api_key
        use_key = getattr(self.provider, "use_api_key", None)  # e2b, daytona: the SDK's key, only there
        if vendor_key is not None and callable(use_key):
            use_key(vendor_key.get_secret_value())
        self.workspace_config = workspace_config or WorkspaceConfig()
        self.security_policy = security_policy
        self.approvals = approvals
        self.spec = self._spec(harness, model, _prompt_text(system_prompt), setup_script, timeout, name)
        self.engine: Engine | None = None
        self.sessions: list[HarnessBoxSession] = []
        self._default: HarnessBoxSession | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return (
            f"<HarnessBox provider={self.provider.name!r} harness={self.spec.harness!r} "
            f"sessions={len(self.sessions)}>"
        )

    def _spec(
        self,
        harness: str,
        model: str | None,
        prompt: str | None,
        setup_script: str | None,
        timeout: float | None,
        name: str,
    ) -> AgentSpec:
        config = self.workspace_config
        fields: dict[str, Any] = {
            "name": name,
            "harness": harness,
            "model": model or DEFAULT_MODELS.get(harness, "claude-sonnet-4-6"),
            "checkpoint": True,
        }
        if prompt:
            fields["system_prompt"] = SystemPrompt.inherit(append=prompt)
        if setup_script is not None:
            fields["setup_script"] = setup_script
        if timeout is not None:
            fields["timeout"] = timeout
        repo = config.git_repo_config
        if repo is not None:
            auth = GIT_TOKEN if repo.auth_token is not None else None
            # the workspace is the checkout (path="."): the agent and run_command work in the repo
            fields["repos"] = [RepoSource.git(repo.remote, auth=auth, depth=repo.clone_depth, path=".")]
            if config.commit_on_exit:
                fields["git"] = GitOptions(
                    commit="on_close", push=True, author=config.author, message=COMMIT_MESSAGE
                )
        policy = self.security_policy
        if policy is not None and policy.deny_network:
            if getattr(self.provider, "enforces_network", False):
                fields["network"] = "none"  # enforced by the provider; the harness need not
                policy = policy.model_copy(update={"deny_network": False})
            elif harness != "codex":
                raise UsageError(
                    f"security_policy.deny_network: provider {self.provider.name!r} cannot cut the "
                    f"{harness} agent's network; use provider={' or '.join(map(repr, NETWORK_ENFORCING))} "
                    "(the sandbox gets no network), or harness='codex' (its own sandbox turns it off)"
                )
        if policy is not None:
            fields["security_policy"] = policy
        if self.approvals is not None:
            fields["approvals"] = self.approvals
        return AgentSpec.from_dict(fields)

    # --- sessions ---------------------------------------------------------------------------------

    def _turn_secrets(self) -> dict[str, str]:
        values = self.secrets.values()
        repo = self.workspace_config.git_repo_config
        if repo is not None and repo.auth_token is not None:
            values[GIT_TOKEN] = repo.auth_token.get_secret_value()
        return values

    def _session_config(self, branch: str | None) -> dict[str, Any]:
        config = self.workspace_config
        repo = config.git_repo_config
        fields: dict[str, Any] = {}
        if repo is None:
            if branch is not None:
                raise UsageError(
                    f"branch={branch!r} needs a repository: set workspace_config.git_repo_config"
                )
        else:
            fields["branch"] = branch or repo.branch
            base = repo.base_branch if fields["branch"] == repo.branch else repo.base_branch or repo.branch
            if base is not None:
                fields["base_branch"] = base
        shared = config.workspace_mode == WorkspaceMode.SHARED
        if shared or config.file_system_config is not None:
            if "workspace" not in SessionConfig.model_fields:
                raise UsageError(
                    "workspace_config: shared workspaces and host directories (file_system_config) are not "
                    "available in this harness-run yet; use WorkspaceMode.NEW without file_system_config"
                )
            host = config.file_system_config.host_dir if config.file_system_config else None
            fields["workspace"] = {"mode": "shared" if shared else "new", "host_dir": host}
        return fields

    async def _engine(self) -> Engine:
        async with self._lock:
            if self.engine is None:
                self.engine = await self.provider.deploy(self.spec)
            return self.engine

    async def create_session(self, branch: str | None = None) -> HarnessBoxSession:
        """A new session on ``branch`` (default: the repo config's ``branch``). A branch the remote
        does not have is created from the config's ``base_branch`` (else from its ``branch``)."""
        config = self._session_config(branch)
        engine = await self._engine()
        session = engine.start_session(config)
        made = HarnessBoxSession(session, branch=config.get("branch"), secrets=self._turn_secrets)
        self.sessions.append(made)
        return made

    async def get_session(self, session_id: str) -> HarnessBoxSession:
        """Re-attach to a session by ``session_id`` (``session.session_id``), made by this or any
        earlier ``HarnessBox`` with the same configuration and provider settings (its history is in
        the provider's store): ``send_message`` continues its conversation in its workspace."""
        for made in self.sessions:
            if made.session_id == session_id and not made.killed:
                return made
        engine = await self._engine()
        session = engine.get_session(session_id)
        branch = session.record.config.get("branch")
        made = HarnessBoxSession(
            session, branch=branch if isinstance(branch, str) else None, secrets=self._turn_secrets
        )
        self.sessions.append(made)
        return made

    def send_message(self, message: str, *, stream: bool = True) -> MessageStream:
        """A turn in this HarnessBox's default session (made on first use)."""
        del stream

        async def start() -> Run:
            if self._default is None or self._default.killed:
                self._default = await self.create_session()
            return await self._default.send_message(message).started()

        return MessageStream(start)

    async def kill(self) -> None:
        """Kill every session (each commits and pushes its work, see ``HarnessBoxSession.kill``),
        then close the engine. One RunError naming every failure, after all were tried."""
        errors: list[str] = []
        for session in self.sessions:
            try:
                await session.kill()
            except RunError as exc:
                errors.append(str(exc))
        self.sessions = [s for s in self.sessions if not s.killed]
        engine, self.engine = self.engine, None
        if engine is not None:
            try:
                await engine.aclose()
            except RunError as exc:
                errors.append(str(exc))
        if errors:
            raise RunError("; ".join(errors))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            await self.kill()
            return
        with contextlib.suppress(RunError):  # the body's error matters more
            await self.kill()
