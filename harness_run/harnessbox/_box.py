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
from harness_run.harnessbox._session import HarnessBoxSession, MessageStream
from harness_run.harnessbox.providers import Provider, provider_for
from harness_run.harnessbox.workspace import WorkspaceConfig, WorkspaceMode
from harness_run.runtime import Engine, Run
from harness_run.spec import AgentSpec, GitOptions, RepoSource, SecurityPolicy, SessionConfig, SystemPrompt

__all__ = ["GIT_TOKEN", "HarnessBox", "HarnessBoxSecrets"]

GIT_TOKEN = "HARNESSBOX_GIT_TOKEN"
"""The secret name the repo's ``auth_token`` goes under (to git only)."""

DEFAULT_MODELS = {
    "claude-code": "claude-sonnet-4-6",
    "codex": "gpt-5-codex",
    "opencode": "anthropic/claude-sonnet-4-6",
}
COMMIT_MESSAGE = "HarnessBox: session {session_id} on {branch}"


class HarnessBoxSecrets(BaseModel):
    """Per-run secrets: ``harness_secrets`` go to the harness (``ANTHROPIC_API_KEY``,
    ``OPENAI_API_KEY``, an endpoint such as ``ANTHROPIC_BASE_URL``, or any secret the agent may
    use); ``provider_api_key`` is a sandbox vendor's key (none of harness-run's providers needs
    one). Values are never shown in a repr, an error, an event or a stored record."""

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

    ``provider``: ``"local"``, ``"docker"``, ``"agent-sandbox"`` or a
    :class:`~harness_run.harnessbox.Provider`. ``harness``: ``"claude-code"``, ``"codex"`` or
    ``"opencode"``. ``system_prompt``: text, or a ``Path`` to read it from (appended to the
    harness's own prompt, as a ``CLAUDE.md``/``AGENTS.md`` would be). ``timeout``: seconds one turn
    may take. ``api_key``/``base_url`` (HarnessBox's hosted platform) are not offered.
    """

    def __init__(
        self,
        provider: str | Provider = "local",
        harness: str = "claude-code",
        *,
        model: str | None = None,
        secrets: HarnessBoxSecrets | Mapping[str, Any] | None = None,
        system_prompt: str | Path | None = None,
        workspace_config: WorkspaceConfig | None = None,
        security_policy: SecurityPolicy | None = None,
        setup_script: str | None = None,
        timeout: float | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        name: str = "harnessbox",
    ) -> None:
        if api_key is not None or base_url is not None:
            raise UsageError(
                "api_key/base_url (HarnessBox's hosted platform) are not offered by harness-run; run "
                "the engine yourself (provider='local' | 'docker' | 'agent-sandbox') or use "
                "`harness-run serve` and harness_run.runtime.http.connect()"
            )
        self.provider = provider_for(provider)
        self.secrets = _secrets_of(secrets)
        self.workspace_config = workspace_config or WorkspaceConfig()
        self.security_policy = security_policy
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
            fields["repos"] = [
                RepoSource.git(repo.remote, auth=auth, depth=repo.clone_depth, path=repo.clone_dir_name)
            ]
            if config.commit_on_exit:
                fields["git"] = GitOptions(
                    commit="on_close", push=True, author=config.author, message=COMMIT_MESSAGE
                )
        if self.security_policy is not None:
            fields["security_policy"] = self.security_policy
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
