"""``harness-run serve`` runs each session's agent as a uid of its own (``--agent-uids``), and its own
git in an agent's repo as that agent: a real ``serve`` subprocess as root, real Claude Code turns
against the scripted model, a real git smart-HTTP remote. The work of a turn is committed and
pushed; the agent, its tools and ``exec`` are not root; and a repo config the agent booby-trapped
(``core.fsmonitor``, ``core.hooksPath``, a clean filter) runs its payload as the agent, never as the
server. A server that cannot switch users refuses to serve a local engine unless told
``--agent-uids off``, and then says what that costs."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from testkit.git_http import GitHttpServer, make_bare_repo

import harness_run
from harness_run import AgentSpec, RepoSource
from harness_run.events import SetupEvent
from harness_run.runtime.local import DEFAULT_AGENT_UIDS, AgentUids, LocalEngine
from harness_run.runtime.local._git import deliver
from harness_run.server._hardening import can_switch_users
from harness_run.spec import GitOptions
from harness_run.testing import Rule, ScriptedModel, shell, text

from ._helpers import MODEL, cli

_ROOT_ONLY = pytest.mark.skipif(not can_switch_users(), reason="needs root (CI runs as root)")
_FIRST = 1_760_000_000 + os.getpid() % 10_000 * 100  # this run's own uids (no passwd entries)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _serve(
    store: Path, spec: Path, *extra: str, prefix: tuple[str, ...] = (), home: Path | None = None
) -> subprocess.Popen[str]:
    argv = [*prefix, sys.executable, "-m", "harness_run", "serve", "--store", str(store), "--port", "0"]
    return subprocess.Popen(
        [*argv, "--spec", str(spec), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **({"HOME": str(home)} if home else {})},
    )


def _listening(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None and server.stderr is not None
    line = server.stdout.readline()
    assert "listening on" in line, server.stderr.read()
    return line.split()[-1]


def _stop(server: subprocess.Popen[str]) -> str:
    server.send_signal(signal.SIGTERM)
    out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    return out + err


def _booby_trap(payload_log: Path, root_only: Path) -> str:
    """The agent's shell command: a payload that logs who ran it and tries to write where only
    root can, named as the repo's fsmonitor, hooks (post-commit, pre-push) and clean filter."""
    payload = f'#!/bin/sh\necho "$(id -u) $0" >> {payload_log}\ntouch {root_only}/pwned-$(id -u)\nexit 0\n'
    return "; ".join(
        [
            "set -e",
            f"printf %s {shlex.quote(payload)} > $PWD/payload.sh",
            "chmod 755 $PWD/payload.sh",
            "mkdir -p $PWD/hooks",
            "for h in post-commit pre-push pre-commit; do cp $PWD/payload.sh $PWD/hooks/$h; done",
            "git -C app config core.fsmonitor $PWD/payload.sh",
            "git -C app config core.hooksPath $PWD/hooks",
            'git -C app config filter.evil.clean "$PWD/payload.sh; cat"',
            "echo '* filter=evil' > app/.gitattributes",
            "echo trapped > app/trapped.txt",
        ]
    )


@_ROOT_ONLY
@pytest.mark.harness
@pytest.mark.timeout(300)
async def test_served_turns_run_as_their_own_uid_and_git_runs_as_the_agent_not_root(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    payload_log, root_only = tmp_path / "payload-log", tmp_path / "root-only"
    payload_log.mkdir(mode=0o1777)
    payload_log.chmod(0o1777)  # the agent may write here: the payload's trace
    root_only.mkdir(mode=0o700)  # only root may write here: the payload must not
    store, spec_file = tmp_path / "store", tmp_path / "agent.yaml"
    with GitHttpServer(tmp_path / "srv", token) as remote:
        spec = AgentSpec(
            name="uids",
            harness="claude-code",
            model=MODEL,
            env={"CLAUDE_CODE_MAX_RETRIES": "0"},
            repos=[RepoSource.git(f"{remote.url}/app.git", auth="GH_TOKEN")],
            git=GitOptions(commit="after_turn", push=True, author="Ada Bot <ada@example.com>"),
        )
        spec_file.write_text(spec.to_yaml())
        made = cli("serve", "keys", "create", "--name", "ops", "--scope", "exec", "--store", str(store))
        key = made.stdout.split()[-1]
        scripted_model.add(
            Rule(match="plain work", reply=shell("id -u > app/who.txt")),
            Rule(match="trap the repo", reply=shell(_booby_trap(payload_log / "log", root_only))),
            text("done"),
            text("done"),
        )
        secrets = {
            "ANTHROPIC_BASE_URL": scripted_model.url,
            "ANTHROPIC_API_KEY": "k",
            "GH_TOKEN": token,
        }
        server = _serve(store, spec_file, "--allow-exec", "--allow-endpoints")
        try:
            engine = harness_run.connect(_listening(server), api_key=key)
            plain = engine.start_session(branch="feat/plain", base_branch="main")
            done = await plain.send("plain work", secrets=secrets)
            assert not done.is_error and done.pushed_ref == "refs/heads/feat/plain", done.error
            ran_as = (await plain.exec("id -u")).stdout.strip()
            trapped = engine.start_session(branch="feat/trapped", base_branch="main")
            caught = await trapped.send("trap the repo", secrets=secrets)
            trapped_uid = (await trapped.exec("id -u")).stdout.strip()
            await engine.aclose()
        finally:
            logs = _stop(server)

    # the agent is not root: a uid of the default range, its own per session; the push landed
    assert DEFAULT_AGENT_UIDS.first <= int(ran_as) <= DEFAULT_AGENT_UIDS.last, ran_as
    assert _git(bare, "show", "feat/plain:who.txt") == ran_as  # its tool wrote it; git pushed it
    assert _git(bare, "rev-parse", "feat/plain") == done.commit_sha
    assert trapped_uid not in ("0", ran_as)
    assert f"of {DEFAULT_AGENT_UIDS}" in logs  # serve said so at start
    # the booby-trapped repo: git ran the payload (as the agent), never as root; the work landed
    ran = (payload_log / "log").read_text().splitlines()
    assert ran and {line.split()[0] for line in ran} == {trapped_uid}, ran
    assert {"post-commit", "pre-push"} <= {Path(line.split()[1]).name for line in ran}, ran  # serve's git
    assert list(root_only.iterdir()) == []
    assert not caught.is_error and caught.pushed_ref == "refs/heads/feat/trapped", caught.error
    assert _git(bare, "show", "feat/trapped:trapped.txt") == "trapped"
    assert token not in logs


@_ROOT_ONLY
@pytest.mark.harness
@pytest.mark.timeout(300)
async def test_an_idle_workspace_lent_to_a_new_session_becomes_its_agents_and_git_runs_as_each(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    """Branch pooling under per-session uids: the donor's checkout is checked as the donor's agent,
    handed over, and refreshed as the new session's agent (no clone); both push as themselves."""
    token = f"repo-canary-{uuid.uuid4().hex[:12]}"
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n", ".gitignore": ".cache/\n"})
    with GitHttpServer(tmp_path / "srv", token) as remote:
        spec = AgentSpec(
            name="pool-uids",
            harness="claude-code",
            model=MODEL,
            env={"CLAUDE_CODE_MAX_RETRIES": "0"},
            repos=[RepoSource.git(f"{remote.url}/app.git", auth="GH_TOKEN")],
            git=GitOptions(commit="after_turn", push=True),
        )
        engine = LocalEngine(
            spec, workdir=tmp_path / "wd", agent_user=AgentUids(_FIRST, _FIRST + 9), pool_after=0
        )
        secrets = {"ANTHROPIC_BASE_URL": scripted_model.url, "ANTHROPIC_API_KEY": "k", "GH_TOKEN": token}
        scripted_model.add(
            Rule(
                match="first", reply=shell("echo a > app/a.txt; mkdir app/.cache; echo warm > app/.cache/d")
            ),
            Rule(match="second", reply=shell("echo b >> app/a.txt; cat app/.cache/d")),
            Rule(match=None, reply=text("done"), tool_result=True),
        )
        try:
            first = engine.start_session(branch="feat/pool", base_branch="main")
            r1 = await first.run("first", secrets=secrets)
            assert r1.pushed_ref == "refs/heads/feat/pool", r1.error
            second = engine.start_session(branch="feat/pool")
            r2 = await second.run("second", secrets=secrets)
            assert r2.pushed_ref == "refs/heads/feat/pool", r2.error
            owners = await second.exec("id -u; stat -c %u app/.git/config app/.git/index app/.cache/d")
            steps = [e.step for e in second.events() if isinstance(e, SetupEvent)]
        finally:
            await engine.aclose()
    assert any(f"reusing the idle workspace of session {first.session_id}" in s for s in steps), steps
    assert not any(s.startswith("cloning") for s in steps), steps
    assert owners.stdout.split() == [str(_FIRST + 1)] * 4, owners  # all of it is the new agent's
    assert _git(bare, "show", "feat/pool:a.txt") == "a\nb"


def test_a_server_that_cannot_switch_users_refuses_local_engines_unless_told_off(tmp_path: Path) -> None:
    """Run as uid 0 with every capability dropped (the interpreter lives under /root here, out of
    another uid's reach): to the server that is the same as an ordinary user — it cannot switch."""
    spec_file, home = tmp_path / "agent.yaml", tmp_path / "home"
    spec_file.write_text(AgentSpec(name="solo", harness="claude-code", model=MODEL).to_yaml())
    home.mkdir()
    no_caps = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--") if os.geteuid() == 0 else ()
    store = tmp_path / "store"
    refused = _serve(store, spec_file, prefix=no_caps, home=home)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode == 2, out + err
    assert "--agent-uids off" in err and "as root" in err and "solo" in err, err
    assert "server-secret" in err and "Traceback" not in err
    wrong = _serve(store, spec_file, "--agent-uids", "2000000-2000099", prefix=no_caps, home=home)
    _, err = wrong.communicate(timeout=60)
    assert wrong.returncode == 2 and "cannot run processes as other users" in err, err

    server = _serve(store, spec_file, "--agent-uids", "off", prefix=no_caps, home=home)
    try:
        _listening(server)
    finally:
        logs = _stop(server)
    assert "--agent-uids off: the agents of solo run as this server's user" in logs
    assert "only for a server you alone use" in logs


@pytest.mark.timeout(60)
def test_the_secret_scan_before_a_commit_follows_no_link_and_opens_no_device(tmp_path: Path) -> None:
    """The agent stages a link to /dev/zero and to a file of the server's: the scan before the
    commit reads neither (it would never end, or read what the agent may not), and still holds
    back a file and a link target that carry a secret value."""
    bare = make_bare_repo(tmp_path / "srv", "app", {"README.md": "app\n"})
    work = tmp_path / "work"
    _git(tmp_path, "clone", "-q", str(bare), str(work))
    server_file = tmp_path / "server-only"
    server_file.write_text("value-of-the-secret\n")
    (work / "zero").symlink_to("/dev/zero")
    (work / "peek").symlink_to(server_file)
    (work / "named").symlink_to("/tmp/value-of-the-secret")  # fresh-machine ok: never followed
    (work / "leak.txt").write_text("value-of-the-secret\n")
    (work / "fine.txt").write_text("fine\n")
    options = GitOptions(commit="after_turn", push=False)
    done = deliver(
        work,
        RepoSource.git(str(bare)),
        options,
        message="m",
        branch=None,
        secrets={},
        forms=["value-of-the-secret"],
    )
    assert done.commit_sha is not None and done.error is not None
    assert "leak.txt" in done.error and "named" in done.error and "peek" not in done.error
    committed = _git(work, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(committed) == ["fine.txt", "peek", "zero"]
