"""Smoke test of the benchmarks: each runs briefly through the runner (``python -m benchmarks NAME``)
and prints its numbers.

Numbers are never asserted against targets here; they are recorded in benchmarks/results/ (the
current ones in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_benchmark(*argv: str, timeout: float = 300) -> str:
    """``python -m benchmarks ARGV`` from the checkout's root; its output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_the_runner_lists_every_benchmark_with_its_description() -> None:
    out = run_benchmark()
    names = sorted(
        path.stem if path.is_file() else path.name
        for path in (REPO / "benchmarks").iterdir()
        if not path.name.startswith(("_", ".")) and (path.suffix == ".py" or (path / "__main__.py").is_file())
    )
    assert "turn_cost" in names and "compile" in names, names
    for name in names:
        assert re.search(rf"^  {name} +\S", out, re.MULTILINE), out
    assert re.search(r"^  charts +draw ", out, re.MULTILINE), out


def test_the_runner_refuses_an_unknown_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "no_such_benchmark"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "no benchmark named 'no_such_benchmark'" in done.stderr
    assert "turn_cost" in done.stderr  # the list of what there is


def test_compile_benchmark_prints_timings() -> None:
    out = run_benchmark("compile", "--runs", "3")
    for label in ("compile_ms", "import_agentspec_ms", "import_build_ms"):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out


def test_git_workflow_benchmark_prints_timings() -> None:
    out = run_benchmark("git_workflow", "--files", "50", "--changed", "3", "--runs", "1")
    for label in ("clone_ms", "branch_from_base_ms", "commit_push_ms"):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_overview_prints_ratios() -> None:
    # OpenCode's same-flags turns (seconds each) go through the same function as the other two
    out = run_benchmark("turn_cost", "--rounds", "1", "--harness", "claude-code", "--harness", "codex")
    for label in ("ratio in-process / bare", "ratio fresh process / bare", "ratio two-turn / bare"):
        assert re.search(rf"{re.escape(label)}: [0-9.]+", out), out
    assert re.search(r"client peak RSS, in process: [0-9.]+ MB", out), out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_two_turn_variants_print_a_ratio_each() -> None:
    out = run_benchmark("turn_cost", "--variant", "two-turn", "--smoke")
    for variant in ("defaults", "no credential guards", "no guards, no model proxy"):
        assert re.search(rf"ratio two-turn / bare, {re.escape(variant)}: [0-9.]+", out), out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_phases_prints_each_phase_of_each_variant() -> None:
    out = run_benchmark("turn_cost", "--variant", "phases", "--smoke")
    for variant in ("bare", "defaults", "no credential guards", "no guards, no model proxy"):
        cells = r"  ".join(rf"{phase} [0-9]+ \([+-][0-9]+\)" for phase in ("start", "tool", "tail", "total"))
        assert re.search(rf"^phases \[{re.escape(variant)}\]: {cells}$", out, re.M), out


@pytest.mark.harness
@pytest.mark.slow
def test_concurrency_benchmark_reports_no_failures() -> None:
    out = run_benchmark("concurrency", "--sizes", "3")
    assert re.search(
        r"3 concurrent sessions: wall [0-9.]+ s, [0-9.]+ s/turn, failures 0, client peak RSS", out
    ), out


@pytest.mark.harness
@pytest.mark.slow
def test_failing_model_benchmark_ends_the_turn_with_the_error() -> None:
    out = run_benchmark("failing_model", "--harness", "claude-code", "--failure", "drop")
    assert re.search(r"\[claude-code\] drop, harness-run defaults: [0-9.]+ s, [0-9]+ model requests", out), (
        out
    )
    assert "Connection dropped" in out, out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_fresh_phases_prints_both_phases() -> None:
    out = run_benchmark("turn_cost", "--variant", "fresh-phases", "--smoke")
    assert re.search(
        r"^current: start -> claude exec [0-9]+ ms, claude exit -> process exit [0-9]+ ms", out, re.M
    ), out


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_warm_pool_benchmark_prints_latencies(docker_client: object, base_image: str, registry: str) -> None:
    del docker_client, base_image, registry  # the services the script uses (DOCKER_HOST, the registry)
    out = run_benchmark("warm_pool", "--turns", "2", "--cold-turns", "1", "--pool", "1", timeout=900)
    assert re.search(r"^no-op redeploy wall time: p50 [0-9]+ ms", out, re.MULTILINE), out
    for section in ("warm (pool of 1), 2 turns:", "cold (no pool), 1 turns:"):
        assert section in out, out
    assert len(re.findall(r"claim -> first event: p50 [0-9]+ ms", out)) == 2, out


def test_redaction_benchmark_prints_timings() -> None:
    out = run_benchmark("redaction", "--runs", "20")
    labels = (
        "redact_message_us",
        "redact_tool_use_us",
        "redact_clean_us",
        "json_text_message_us",
        "home_dirty_ms",
    )
    for label in labels:
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out


def test_turn_lease_benchmark_prints_costs() -> None:
    out = run_benchmark("turn_lease", "--rounds", "1")
    for label in ("reserve_turn", "renew_turn", "reaper start", "reaper release", "tag scan (/proc)"):
        assert re.search(rf"^{re.escape(label)} +median [0-9.]+ ms", out, re.MULTILINE), out
    assert re.search(r"SIGKILL of the client -> its turn's processes gone: median [0-9.]+ ms", out), out


@pytest.mark.harness
@pytest.mark.slow
def test_harnessbox_benchmark_prints_the_layer_cost() -> None:
    out = run_benchmark("harnessbox", "--rounds", "1", "--files", "10")
    for label in ("engine_session_ms", "harnessbox_session_ms", "ratio", "kill_ms"):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
@pytest.mark.slow
def test_server_load_benchmark_reports_no_failures() -> None:
    out = run_benchmark("server_load", "--smoke")
    assert re.search(r"harness's first event -> client, through SSE: p50 [0-9.]+ ms, p95 [0-9.]+ ms", out), (
        out
    )
    for label in ("5 SSE subscribers on one session", "2 concurrent sessions"):
        assert re.search(
            rf"{label}: wall [0-9.]+ s, failures 0, lost 0, duplicated 0, server CPU [0-9.]+ s, "
            r"server RSS [0-9.]+ MB",
            out,
        ), out


@pytest.mark.harness
@pytest.mark.slow
def test_dashboard_benchmark_prints_page_timings() -> None:
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("no /usr/bin/chromium: install Debian's chromium (scripts/test does, with apt-get)")
    out = run_benchmark("dashboard", "--rounds", "1", "--opens", "1", "--history", "2")
    for label in ("open: navigation to the sessions list drawn", "click -> the prompt drawn from the stream"):
        assert re.search(rf"^{re.escape(label)}: median [0-9.]+ ms", out, re.MULTILINE), out
    assert re.search(r"^ratio page / API: [0-9.]+$", out, re.MULTILINE), out
    assert re.search(r"^history: navigation to 2 turns drawn: median [0-9.]+ ms", out, re.MULTILINE), out


def test_server_deploy_benchmark_prints_timings() -> None:
    out = run_benchmark("server_deploy", "--smoke")
    for label in ("compile_server_ms", "cloudrun_noop_ms", "key_check_gcs_ms", "key_check_gcs_cached_ms"):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
def test_workspace_pool_benchmark_prints_clone_and_pooled_times() -> None:
    out = run_benchmark("workspace_pool", "--smoke")
    for label in (
        "clone_ms",
        "pooled_ms",
        "fresh_start_ms",
        "pooled_start_ms",
        "fresh_turn_ms",
        "pooled_turn_ms",
    ):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out
    assert re.search(r"^ratio clone / pooled: [0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
@pytest.mark.slow
def test_telemetry_benchmark_prints_its_costs() -> None:
    out = run_benchmark("telemetry", "--smoke")
    assert "opentelemetry modules after import harness_run, harness_run.local: 0" in out, out
    for label in (
        "one turn's instrumentation, no provider",
        "one turn's instrumentation, SDK + in-memory exporter",
    ):
        assert re.search(rf"{re.escape(label)}: [0-9.]+ us", out), out
    assert re.search(r"ratio on / off: [0-9.]+", out), out


@pytest.mark.harness
@pytest.mark.slow
def test_model_proxy_benchmark_prints_latencies() -> None:
    out = run_benchmark("model_proxy", "--smoke")
    for label in (
        "proxy_added_p50_ms",
        "proxy_added_p95_ms",
        "proxy_turn_ratio",
        "guard_hook_p50_ms",
        "guard_script_p50_ms",
        "guard_http_p50_ms",
    ):
        assert re.search(rf"^{label} -?[0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_attribution_prints_the_breakdown() -> None:
    out = run_benchmark("turn_cost", "--variant", "attribution", "--smoke")
    for label in ("ratio_hr", "added_guard_defaults_ms", "added_proxy_ms", "guard_hook_p50_ms"):
        assert re.search(rf"^{label} -?[0-9.]+", out, re.MULTILINE), out
    assert re.search(r"^guard_served_ms p50 [0-9.]+", out, re.MULTILINE), out  # the turns used the server


@pytest.mark.harness
def test_deltas_benchmark_prints_timings() -> None:
    out = run_benchmark("deltas", "--smoke")
    for label in ("delta_redact_us", "turn_partial_s", "turn_whole_s", "deltas_per_turn"):
        assert re.search(rf"^{label} [0-9.]+$", out, re.MULTILINE), out
    assert int(re.findall(r"^deltas_per_turn (\d+)", out, re.MULTILINE)[0]) >= 80  # 4 KB in 48-char chunks


def test_egress_benchmark_prints_latencies() -> None:
    out = run_benchmark("egress", "--smoke")
    for label in ("egress_direct_p50_ms", "egress_proxy_added_p50_ms", "egress_relay_added_p95_ms"):
        assert re.search(rf"^{label} -?[0-9.]+$", out, re.MULTILINE), out


@pytest.mark.integration
def test_history_layout_benchmark_prints_requests_and_times() -> None:
    out = run_benchmark("history_layout", "--smoke")
    for label in ("find_new", "find_old", "first_touch_view", "first_touch_worker", "list_all", "move"):
        assert re.search(rf"^{label}_ms [0-9.]+$", out, re.MULTILINE), out
        assert re.search(rf"^{label}_requests [0-9]+$", out, re.MULTILINE), out


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_agent_netrules_benchmark_prints_costs(container_options: object) -> None:
    del container_options  # what the script uses too (DOCKER_HOST, the base image, PIP_CERT)
    out = run_benchmark("agent_netrules", "--smoke", timeout=900)
    for label in ("netrules_install_ms", "netrules_connect_agent_added_us", "netrules_connect_worker_on_us"):
        assert re.search(rf"^{label} -?[0-9.]+$", out, re.MULTILINE), out


@pytest.mark.harness
@pytest.mark.slow
def test_turn_cost_hook_kinds_prints_a_ratio_per_kind() -> None:
    out = run_benchmark("turn_cost", "--variant", "hook-kinds", "--smoke")
    for kind in ("none", "http", "http_other_tool", "command_true", "command_client"):
        assert re.search(
            rf"^hook_{kind}_ms [0-9]+ .* ratio [0-9.]+  cpu ratio [0-9.]+$", out, re.MULTILINE
        ), out


@pytest.mark.harness
@pytest.mark.slow
def test_server_load_gcs_benchmark_reports_its_targets() -> None:
    out = run_benchmark("server_load_gcs", "--smoke")
    assert re.search(
        r"^idle subscribers: 10, server RSS [0-9.]+ -> [0-9.]+ MB, -?[0-9.]+ KB each$", out, re.M
    ), out
    assert re.search(r"^busy: 2 turns \(2 sessions x 1\) in [0-9.]+ s, failed turns 0$", out, re.M), out
    assert re.search(r"^/healthz during load: p50 [0-9.]+ ms, p99 [0-9.]+ ms", out, re.M), out
    assert re.search(r"^ratio server / in process: [0-9.]+ \(1 turns each\)$", out, re.M), out


@pytest.mark.harness
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1000)
def test_provider_hops_benchmark_prints_each_hop(
    container_options: object, fake_gcs: object, registry: str
) -> None:
    del container_options, fake_gcs, registry  # the services the script uses (DOCKER_HOST, PIP_CERT, …)
    out = run_benchmark("provider_hops", "--rounds", "1", timeout=900)
    names = ("e2b-double", "daytona-double", "agent-sandbox", "docker")
    for name in names:
        assert f"{name}, 1 rounds:" in out, out
    for label in ("claim -> first event", "idle -> back -> first event", "no-op redeploy"):
        assert len(re.findall(rf"^  {re.escape(label)}: p50 [0-9]+ ms", out, re.MULTILINE)) == 4, out
        assert re.search(rf"^\| {re.escape(label)} (\| [0-9]+ / [0-9]+ ){{4}}\|$", out, re.MULTILINE), out
    assert "| hop | " + " | ".join(names) + " |" in out, out


@pytest.mark.harness
@pytest.mark.slow
def test_approvals_benchmark_prints_the_round_trip() -> None:
    out = run_benchmark("approvals", "--rounds", "1")
    for where in ("local", "server"):
        for label in (r"unmatched - none: [-+][0-9.]+ ms", r"request -> decided: [0-9.]+ ms"):
            assert re.search(rf"^{where} {label}$", out, re.MULTILINE), out
        assert re.search(rf"^{where} approval round trip \(approve - none\): [-+][0-9.]+ ms", out, re.M), out


SVG = "{http://www.w3.org/2000/svg}"


def test_charts_are_valid_svg_drawn_from_the_recorded_runs(tmp_path: Path) -> None:
    out = run_benchmark("charts", "--out", str(tmp_path))
    drawn = sorted(tmp_path.glob("*.svg"))
    assert len(drawn) >= 6, out
    for path in drawn:
        root = ElementTree.parse(path).getroot()  # well-formed XML
        assert root.tag == f"{SVG}svg", path.name
        assert (root.findtext(f"{SVG}title") or "").strip(), path.name
        marks = root.findall(f".//{SVG}circle") + root.findall(f".//{SVG}rect")[1:]  # [0]: the background
        assert marks, f"{path.name} draws nothing"
        # the documentation shows these very charts (regenerated whenever a run is recorded)
        assert (REPO / "docs" / "benchmarks" / path.name).read_text() == path.read_text(), (
            f"docs/benchmarks/{path.name} is stale: run `python -m benchmarks charts`"
        )
    # a point's value is the recorded one: the latest same-flags ratio of a Claude Code turn
    recorded = json.loads((REPO / "benchmarks" / "results" / "turn_cost.json").read_text())
    latest = [run["values"]["same_flags"] for run in recorded["runs"] if "same_flags" in run["values"]][-1]
    titles = [t.text for t in ElementTree.parse(tmp_path / "turn-cost-ratios.svg").iter(f"{SVG}title")]
    assert f"{latest:g}" in titles, titles


def test_results_md_shows_the_latest_recorded_figures() -> None:
    run_benchmark("results", "--check")  # RESULTS.md is what benchmarks/results/*.json say
    text = (REPO / "benchmarks" / "RESULTS.md").read_text()
    for path in sorted((REPO / "benchmarks" / "results").glob("*.json")):
        if path.stem != "probes":
            assert f"\n## {path.stem}\n" in text, path.stem
