"""The agent of a local engine under ``harness-run serve`` as the adversary: each session's agent
runs as a uid of its own (``AgentUids``) and the server is hardened as ``serve`` hardens it
(non-dumpable, a private store). With the credential guards off, so the kernel is the only barrier,
the scripted model has a real Claude Code agent go for the store, the server's environment and
memory, the server secret, another session's files, and forge a key record. The oracle: every attack
is refused, no canary reaches the model or the stored events, nothing is written into the store, and
the agent's own work lands, survives a second turn and a checkpoint, and ``exec`` runs as it too."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness_run import AgentSpec, SessionConfig, WorkspaceOptions
from harness_run.errors import RunError, UsageError
from harness_run.runtime.local import AgentUids, LocalEngine
from harness_run.server._hardening import agent_uids_for_serve, can_switch_users, private_store
from harness_run.store import SqliteStore
from harness_run.testing import ScriptedModel, shell, text

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="needs root (CI runs as root)")

PROC = Path(__file__).with_name("agent_isolation_proc.py")
_DENIED = ("permission denied", "operation not permitted", "unable to open database")
_FIRST = 1_750_000_000 + os.getpid() % 10_000 * 100  # this run's own uids (no passwd entries)


def _attacks(workdir: Path, server: int, secret: Path, other: str, forged: str) -> list[tuple[str, str]]:
    database, theirs = workdir / "history.sqlite3", workdir / "sessions" / other
    forge = f"import sqlite3; sqlite3.connect('{database}').execute('CREATE TABLE evil(k TEXT)')"
    return [
        ("store-database", f"head -c 200 {database} | base64"),
        ("store-listing", f"ls {workdir}"),
        ("store-blobs", f"ls {workdir}/blobs"),
        ("server-environ", f"tr '\\0' '\\n' < /proc/{server}/environ"),
        ("server-memory", f"head -c 64 /proc/{server}/mem | base64"),
        ("signal-server", f"kill -CONT {server}"),
        ("server-secret", f"cat {secret}"),
        ("other-workspace", f"cat {theirs}/workspace/other.txt"),
        ("other-home", f"ls -a {theirs}/home"),
        ("forge-key-append", f"echo '{forged}' >> {database}"),
        ("forge-key-sqlite", f"python3 -c {shlex.quote(forge)}"),
        ("forge-key-file", f"echo '{forged}' > {workdir}/keys.json"),
    ]


@pytest.mark.harness
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_session_agent_cannot_reach_the_server_or_another_session(tmp_path: Path) -> None:
    canary = {
        name: f"{name}-canary-{uuid.uuid4().hex[:12]}" for name in ("env", "key", "secret", "other", "forged")
    }
    workdir = tmp_path / "store"
    secret = tmp_path / "operator" / ".config" / "harness-run" / "server-secret"
    secret.parent.mkdir(parents=True)  # 0755 directories: only the file's own mode guards it
    secret.write_text(canary["secret"])
    secret.chmod(0o600)
    with ScriptedModel() as model:
        env = {
            **os.environ,
            "MODEL_URL": model.url,
            "ANTHROPIC_API_KEY": canary["key"],  # the operator's model key, in the server's env
            "HARNESS_RUN_TEST_CANARY": canary["env"],
            "OTHER_CANARY": canary["other"],
        }
        server = subprocess.Popen(
            [sys.executable, str(PROC), str(workdir), str(_FIRST)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdin is not None and server.stdout is not None
        try:
            ready = json.loads(server.stdout.readline())
            attacks = _attacks(workdir, server.pid, secret, ready["other"], canary["forged"])
            model.add(
                shell("id -u; echo made by the agent > made.txt"),
                *(shell(command) for _, command in attacks),
                text("done"),
            )
            model.add(shell("cat made.txt"), text("still here"))
            server.stdin.write("go\n")
            server.stdin.flush()
            outcome = json.loads(server.stdout.readline())
        finally:
            server.stdin.close()
            assert server.wait(timeout=60) == 0
        bodies = "\n".join(json.dumps(r.body) for r in model.requests)
        results = [r.tool_results for r in model.requests]

    # the store the operator left open to others is the server's only again
    assert set(ready["tightened"]) >= {"history.sqlite3", "blobs"}, ready
    assert outcome["undumpable"] and outcome["attacked"] is None and outcome["again"] is None, outcome
    attack_turn = next(r for r in results if len(r) == 1 + len(attacks))
    who, *outputs = attack_turn
    agent_uid = who.split()[0]
    assert agent_uid == str(_FIRST + 1) and ready["other_uid"] == str(_FIRST), (who, ready)
    for (name, _), output in zip(attacks, outputs, strict=True):
        assert any(marker in output.lower() for marker in _DENIED), (name, output)
    # its own work: read back in a second turn, checkpointed, and exec runs as it
    assert "made by the agent" in results[-1][-1]
    assert outcome["turns"] == 2 and outcome["snapshot"], outcome
    assert outcome["exec"][:4] == [agent_uid, agent_uid, agent_uid, "made by the agent"], outcome
    # nothing of the server reached the model or the stored events; nothing was written to the store
    store = SqliteStore(workdir)
    try:
        events = json.dumps([e.model_dump(mode="json") for e in store.read_events(outcome["session"])])
        assert store.get_session(outcome["session"]) is not None
    finally:
        store.close()
    for name in ("env", "key", "secret", "other"):
        assert canary[name] not in bodies, name
        assert canary[name] not in events, name
    assert not (workdir / "keys.json").exists()
    with sqlite3.connect(workdir / "history.sqlite3") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)
        pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    assert "evil" not in tables and (workdir / "history.sqlite3").stat().st_size == pages  # nothing appended


async def test_per_session_uids_are_never_reused_and_host_dirs_are_refused(tmp_path: Path) -> None:
    spec = AgentSpec(name="iso-uids", harness="claude-code", model="claude-sonnet-4-6")
    first_uid = _FIRST + 50
    engine = LocalEngine(spec, workdir=tmp_path / "wd", agent_user=AgentUids(first_uid, first_uid + 1))
    try:
        with pytest.raises(UsageError, match=r"workspace\.host_dir"):
            engine.start_session(config=SessionConfig(workspace=WorkspaceOptions(host_dir=str(tmp_path))))
        seen: list[str] = []
        for _ in range(2):
            session = engine.start_session()
            seen.append((await session.exec("id -u; touch mine; stat -c %u mine")).stdout.split()[0])
            engine.delete_session(session.session_id)
        assert seen == [str(first_uid), str(first_uid + 1)]
        third = engine.start_session()  # the range is used up: a uid is never handed out twice
        with pytest.raises(RunError, match="--agent-uids"):
            await third.exec("id -u")
    finally:
        await engine.aclose()


def test_serve_chooses_per_session_uids_when_it_may_switch_users() -> None:
    assert agent_uids_for_serve(None) is not None  # root: on by default
    assert agent_uids_for_serve("off") is None
    assert str(agent_uids_for_serve("2000000-2000099")) == "2000000-2000099"
    with pytest.raises(UsageError, match="FIRST-LAST"):
        agent_uids_for_serve("0-5")


def test_private_store_takes_group_and_other_permissions_off_the_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s")
    store.put_blob(b"transcript")
    store.close()
    for path in (tmp_path / "s", *(tmp_path / "s").rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    changed = private_store(tmp_path / "s")
    assert (tmp_path / "s" / "history.sqlite3") in changed
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o711  # searchable (the sessions are below)
    for path in (tmp_path / "s" / "blobs", *(tmp_path / "s" / "blobs").rglob("*")):
        assert path.stat().st_mode & 0o077 == 0, path
    assert private_store(tmp_path / "s") == []


_SERVER = (  # starts as root (the venv's interpreter is under /root), then runs as the given uid
    "import ctypes, os, sys, time\n"
    "from harness_run.server._hardening import make_undumpable\n"
    "uid = int(sys.argv[2]); os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)\n"
    "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, as an ordinary process of that uid is\n"
    "print(make_undumpable() if sys.argv[1] == 'hardened' else 'plain', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("mode", ["plain", "hardened"])
def test_a_non_dumpable_servers_environment_is_closed_even_to_its_own_uid(mode: str) -> None:
    """``exec`` or a host-directory turn may share the server's uid: /proc/<server>/environ is still
    closed to them once the server is non-dumpable (a non-root uid here, without CAP_SYS_PTRACE)."""
    canary, uid = f"dump-canary-{uuid.uuid4().hex[:12]}", _FIRST + 90
    env = {**os.environ, "HARNESS_RUN_TEST_CANARY": canary}
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, mode, str(uid)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == ("True" if mode == "hardened" else "plain")
        read = subprocess.run(
            ["cat", f"/proc/{server.pid}/environ"],
            capture_output=True,
            check=False,
            user=uid,
            group=uid,
            extra_groups=[],
        )
    finally:
        server.kill()
        server.wait()
    if mode == "plain":  # the control: the same uid reads a dumpable process's environment
        assert canary.encode() in read.stdout
    else:
        assert canary.encode() not in read.stdout and b"Permission denied" in read.stderr, read
