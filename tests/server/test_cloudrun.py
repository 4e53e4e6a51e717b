"""The Cloud Run service of ``harness-run serve deploy``: the real ``google-cloud-run`` client (REST
transport) against the stand-in Cloud Run API of ``tests/testkit/cloudrun.py``, which checks every
request body (a strict ``run.v2.Service``: image, service account, port, store, no secret values).

Create, then a no-op, then an update; the API's errors as one line naming what to do; bad input
refused before anything is built or sent. The image build and push are tested with Docker in
``test_deploy_image.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testkit.cloudrun import CloudRunStandIn

from harness_run.errors import InfrastructureError, UsageError
from harness_run.server import ServiceSettings, deploy_server, run_client
from harness_run.server._cloudrun import CONFIG_ANNOTATION, apply_service
from harness_run.vocab.gcp import parse_secret

CANARY = "canary-cloudrun-5d2e8f1a9b"
IMAGE = "127.0.0.1:5000/hr-test/harness-run-server:0123456789ab"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudRunStandIn]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)  # in the deployer's environment: must go nowhere
    with CloudRunStandIn(forbidden=(CANARY,)) as stand_in:
        yield stand_in


def _settings(**changes: Any) -> ServiceSettings:
    values: dict[str, Any] = {
        "project": "test-project",
        "region": "us-central1",
        "service": "team",
        "image": IMAGE,
        "store": "gs://test-bucket/hr",
        "service_account": "harness-run-server@test-project.iam.gserviceaccount.com",
    }
    return ServiceSettings(**{**values, **changes})


def _apply(api: CloudRunStandIn, settings: ServiceSettings) -> tuple[str, str, list[str]]:
    steps: list[str] = []
    action, url = apply_service(
        run_client(api.url), settings, step=lambda name, detail: steps.append(f"{name}: {detail}")
    )
    return action, url, steps


def test_first_deploy_creates_the_service_the_client_sends_what_we_expect(api: CloudRunStandIn) -> None:
    action, url, steps = _apply(api, _settings())
    assert action == "created" and url.startswith("https://team-") and url.endswith(".a.run.app")
    assert any("creating service team in us-central1" in s for s in steps)
    assert api.refusals == []
    calls = [(r.method, r.path) for r in api.requests]
    parent = "/v2/projects/test-project/locations/us-central1"
    assert calls[0] == ("GET", f"{parent}/services/team")
    assert calls[1] == ("POST", f"{parent}/services")
    assert calls[2][0] == "GET" and calls[2][1].startswith(f"{parent}/operations/"), (
        "the operation was polled"
    )
    assert calls[3] == ("GET", f"{parent}/services/team:getIamPolicy"), "no public binding is left"
    create = api.requests[1]
    assert create.query["serviceId"] == "team"
    body = create.body
    assert body is not None
    container = body["template"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["env"] == [{"name": "HARNESS_RUN_STORE", "value": "gs://test-bucket/hr"}]
    assert container["ports"] == [{"name": "http1", "containerPort": 8080}]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert body["template"]["serviceAccount"] == "harness-run-server@test-project.iam.gserviceaccount.com"
    assert body["template"]["scaling"] == {"minInstanceCount": 1, "maxInstanceCount": 1}
    assert body["template"]["sessionAffinity"] is True
    assert "invokerIamDisabled" not in body, "private: Cloud Run's IAM invoker check stays on"
    assert body["ingress"] == 1, "INGRESS_TRAFFIC_ALL (enums travel as numbers): IAM decides who calls"
    assert body["template"]["timeout"] == "3600s", "an explicit timeout: SSE streams are long"
    assert body["template"]["maxInstanceRequestConcurrency"] == 250
    assert len(body["annotations"][CONFIG_ANNOTATION]) == 64
    assert CANARY not in str(api.requests)


def test_unchanged_settings_send_nothing_and_a_change_updates(api: CloudRunStandIn) -> None:
    assert _apply(api, _settings())[0] == "created"
    before = len(api.requests)
    action, url, steps = _apply(api, _settings())
    assert action == "unchanged" and url.startswith("https://team-")
    assert [r.method for r in api.requests[before:]] == ["GET", "GET"], "only read: no update sent"
    assert any("up to date: nothing sent" in s for s in steps)

    before = len(api.requests)
    new_image = IMAGE.replace("0123456789ab", "ba9876543210")
    assert _apply(api, _settings(image=new_image, max_instances=3))[0] == "updated"
    update = api.requests[before + 1]
    assert update.method == "PATCH" and update.path.endswith("/services/team")
    assert update.body is not None
    assert update.body["template"]["containers"][0]["image"] == new_image
    assert update.body["template"]["scaling"]["maxInstanceCount"] == 3
    stored = api.services["projects/test-project/locations/us-central1/services/team"]
    assert stored["generation"] == "2"
    assert _apply(api, _settings(image=new_image, max_instances=3))[0] == "unchanged"
    assert _apply(api, _settings(image=new_image, max_instances=3, public=True))[0] == "updated"
    assert api.writes()[-1].body["invokerIamDisabled"] is True  # type: ignore[index]
    assert api.refusals == []


def test_an_image_changed_behind_our_back_is_put_back(api: CloudRunStandIn) -> None:
    _apply(api, _settings())
    stored = api.services["projects/test-project/locations/us-central1/services/team"]
    stored["template"]["containers"][0]["image"] = "example/other:1"
    assert _apply(api, _settings())[0] == "updated"


def test_api_errors_say_what_to_do(api: CloudRunStandIn) -> None:
    api.fail_next(
        403,
        "SERVICE_DISABLED",
        "Cloud Run Admin API has not been used in project test-project before or it is disabled.",
    )
    with pytest.raises(UsageError) as disabled:
        _apply(api, _settings())
    text = str(disabled.value)
    assert "Cloud Run Admin API is not enabled in project test-project" in text
    assert "harness-run-gcp-setup --project test-project --location us-central1" in text
    assert "gcloud services enable run.googleapis.com" in text

    api.fail_next(403, "IAM_PERMISSION_DENIED", "Permission 'run.services.get' denied on resource")
    with pytest.raises(UsageError, match=r"permission denied .*roles/run.admin in project test-project"):
        _apply(api, _settings())

    api.fail_next(403, "", "Permission 'iam.serviceaccounts.actAs' denied on service account")
    with pytest.raises(UsageError, match=r"roles/iam.serviceAccountUser"):
        _apply(api, _settings())

    api.fail_revision("Revision 'team-00001' is not ready: the container failed to start and listen on PORT")
    with pytest.raises(InfrastructureError) as failed:
        _apply(api, _settings())
    text = str(failed.value)
    assert "could not start the server's new revision" in text and "failed to start and listen" in text
    assert "gcloud run services logs read team --region us-central1 --project test-project" in text

    assert _apply(api, _settings())[0] == "created", "after the errors, a deploy goes through"
    assert api.refusals == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"project": "", "region": "us-central1"}, "needs --project and --region"),
        ({"project": "test-project", "region": ""}, "needs --project and --region"),
        ({"project": "Bad_Project", "region": "us-central1"}, "--project 'Bad_Project' is not a GCP project"),
        ({"project": "test-project", "region": "mars"}, "--region 'mars' is not a Cloud Run region"),
        ({"project": "test-project", "region": "us-central1", "store": "/srv/history"}, "not a gs://bucket"),
        ({"project": "test-project", "region": "us-central1", "store": "gs://"}, "not a gs://bucket"),
        (
            {"project": "test-project", "region": "us-central1", "store": "gs://b", "service": "Team_1"},
            "--service 'Team_1' is not a Cloud Run service name",
        ),
        (
            {"project": "test-project", "region": "us-central1", "store": "gs://b", "service_account": "me"},
            "--service-account 'me' is not a service account email",
        ),
        (
            {"project": "test-project", "region": "us-central1", "store": "gs://b", "max_instances": 0},
            "--max-instances 0",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_is_built_or_sent(
    api: CloudRunStandIn, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        deploy_server(**kwargs, client=run_client(api.url), docker_client=object(), progress=False)
    assert api.requests == []


def test_an_empty_store_has_nothing_to_serve(api: CloudRunStandIn, gcs_store_url: str) -> None:
    with pytest.raises(
        UsageError,
        match=r"nothing to serve: .* records no sandbox engine; deploy one first with "
        r"harness_run.sandbox.deploy\(spec, project='test-project'",
    ):
        deploy_server(
            project="test-project",
            region="us-central1",
            store=gcs_store_url,
            client=run_client(api.url),
            docker_client=object(),
            progress=False,
        )
    assert api.requests == []


def test_an_unreachable_api_and_missing_credentials_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_run.vocab.net import free_port

    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(
        InfrastructureError, match=r"the Cloud Run API \(http://127.0.0.1:\d+\) did not answer"
    ):
        apply_service(run_client(closed), _settings(), step=lambda _n, _d: None)

    monkeypatch.delenv("HARNESS_RUN_CLOUD_RUN_ENDPOINT", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/credentials.json")
    with pytest.raises(UsageError, match="gcloud auth application-default login"):
        run_client()


def test_the_cli_says_what_is_wrong_in_one_line() -> None:
    from ._helpers import cli

    bad_store = cli(
        "serve", "deploy", "--project", "test-project", "--region", "us-central1", "--store", "/srv/x"
    )
    assert bad_store.returncode == 2
    assert bad_store.stderr.strip().splitlines() == [
        "error: --store '/srv/x' is not a gs://bucket/prefix URL: a Cloud Run instance keeps no files, so the "
        "deployed server's history, sessions and API keys live in a bucket"
    ]
    missing = cli("serve", "deploy", "--region", "us-central1")
    assert missing.returncode == 2 and "the following arguments are required: --project" in missing.stderr
    assert "Traceback" not in bad_store.stderr + missing.stderr


def test_public_secrets_and_limits_are_in_the_body(api: CloudRunStandIn) -> None:
    secrets = (
        parse_secret("ANTHROPIC_API_KEY=projects/test-project/secrets/anthropic:latest"),
        parse_secret("OPENAI_API_KEY=projects/other-project/secrets/openai/versions/3"),
    )
    settings = _settings(public=True, secrets=secrets, concurrency=40, timeout_seconds=900)
    assert _apply(api, settings)[0] == "created"
    assert api.refusals == []
    body = api.writes()[0].body
    assert body is not None
    assert body["invokerIamDisabled"] is True
    assert body["template"]["maxInstanceRequestConcurrency"] == 40
    assert body["template"]["timeout"] == "900s"
    assert body["template"]["containers"][0]["env"] == [
        {"name": "HARNESS_RUN_STORE", "value": "gs://test-bucket/hr"},
        {
            "name": "ANTHROPIC_API_KEY",
            "valueSource": {"secretKeyRef": {"secret": "anthropic", "version": "latest"}},
        },
        {
            "name": "OPENAI_API_KEY",
            "valueSource": {
                "secretKeyRef": {"secret": "projects/other-project/secrets/openai", "version": "3"}
            },
        },
    ]
    assert not any(r.path.endswith(":getIamPolicy") for r in api.requests), "public: IAM left alone"


def test_a_private_deploy_removes_a_public_invoker_binding(api: CloudRunStandIn) -> None:
    _apply(api, _settings())
    name = "projects/test-project/locations/us-central1/services/team"
    api.iam[name] = {  # made by hand after the deploy
        "bindings": [{"role": "roles/run.invoker", "members": ["allUsers", "user:ana@example.com"]}],
        "etag": "BwY=",
    }
    action, _url, steps = _apply(api, _settings())
    assert action == "unchanged"
    assert any("removed roles/run.invoker from allUsers: team is private" in s for s in steps)
    assert api.iam[name]["bindings"] == [{"role": "roles/run.invoker", "members": ["user:ana@example.com"]}]
    before = len(api.requests)
    _apply(api, _settings())
    assert not any(r.path.endswith(":setIamPolicy") for r in api.requests[before:]), "nothing left to remove"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"concurrency": 0}, "--concurrency 0: Cloud Run takes 1 to 1000"),
        ({"timeout_seconds": 7200}, "--timeout 7200: a Cloud Run request timeout is 1 to 3600"),
        ({"env": {"PORT": "1"}}, "environment variable PORT: set by Cloud Run"),
        (
            {
                "env": {"A_KEY": "x"},
                "secrets": (parse_secret("A_KEY=projects/test-project/secrets/a:latest"),),
            },
            "A_KEY given twice",
        ),
    ],
)
def test_bad_limits_and_variables_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        _settings(**changes)


@pytest.mark.parametrize(
    "value",
    ["ANTHROPIC_API_KEY=sk-ant-" + CANARY, "ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY=projects/p/secrets/"],
)
def test_a_malformed_secret_reference_is_refused_without_echoing_a_value(value: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_secret(value)
    text = str(refused.value)
    assert "--secret NAME=projects/PROJECT/secrets/SECRET:latest" in text
    assert CANARY not in text


def test_local_engines_are_refused_at_deploy_and_on_cloud_run(
    api: CloudRunStandIn, gcs_store_url: str, tmp_path: Path
) -> None:
    from harness_run import AgentSpec
    from harness_run.server import ServerState
    from harness_run.store import EngineRecord, open_store

    spec = AgentSpec(name="helper", harness="claude-code", model="claude-sonnet-4-5")
    history = open_store(gcs_store_url)
    history.put_engine(EngineRecord(name="helper", version="a" * 64, spec=spec.to_dict(), runtime="local"))
    history.close()
    for specs in ((), (spec.model_copy(update={"name": "baked"}),)):
        with pytest.raises(UsageError) as refused:
            deploy_server(
                project="test-project",
                region="us-central1",
                store=gcs_store_url,
                specs=specs,
                client=run_client(api.url),
                docker_client=object(),
                progress=False,
            )
        text = str(refused.value)
        assert "engine helper is a local engine: on Cloud Run its agent would run inside the service" in text
        assert "as the service's own identity" in text
        assert (
            "deploy it with harness_run.sandbox.deploy(spec, ...) so its turns run in Agent Sandbox" in text
        )
        assert ("engine baked (--spec) is a local engine" in text) == bool(specs)
    assert api.requests == [], "refused before anything is built or sent"

    # the deployed server itself ($K_SERVICE set by Cloud Run) serves no local engine either
    local = open_store(str(tmp_path / "store"))
    local.put_engine(EngineRecord(name="helper", version="a" * 64, spec=spec.to_dict(), runtime="local"))
    assert set(ServerState(local, tmp_path, [spec.model_copy(update={"name": "baked"})]).engines) == {
        "helper",
        "baked",
    }, "off Cloud Run both are served"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("K_SERVICE", "team")
        state = ServerState(local, tmp_path, [spec.model_copy(update={"name": "baked"})])
    assert state.engines == {}
    assert set(state.skipped) == {"helper", "baked"}
    assert "its agent would run inside the service" in state.skipped["helper"]
    local.close()


def test_the_cli_deploy_flags(api: CloudRunStandIn) -> None:
    from ._helpers import cli

    bad = cli(
        "serve", "deploy", "--project", "test-project", "--region", "us-central1", "--store", "gs://b",
        "--secret", "ANTHROPIC_API_KEY=" + CANARY,
    )  # fmt: skip
    assert bad.returncode == 2 and CANARY not in bad.stdout + bad.stderr
    assert "not a Secret Manager secret version" in bad.stderr and "Traceback" not in bad.stderr
    both = cli(
        "serve", "deploy", "--project", "test-project", "--region", "us-central1", "--public", "--private"
    )  # fmt: skip
    assert both.returncode == 2 and "--public and --private contradict" in both.stderr
    assert api.requests == []
