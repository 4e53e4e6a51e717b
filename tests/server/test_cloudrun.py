"""The Cloud Run service of ``harness-run serve deploy``: the real ``google-cloud-run`` client (REST
transport) against the stand-in Cloud Run API of ``tests/testkit/cloudrun.py``, which checks every
request body (a strict ``run.v2.Service``: image, service account, port, store, no secret values).

Create, then a no-op, then an update; the API's errors as one line naming what to do; bad input
refused before anything is built or sent. The image build and push are tested with Docker in
``test_deploy_image.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from testkit.cloudrun import CloudRunStandIn

from harness_run.errors import InfrastructureError, UsageError
from harness_run.server import ServiceSettings, deploy_server, run_client
from harness_run.server._cloudrun import CONFIG_ANNOTATION, apply_service

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
    assert body["invokerIamDisabled"] is True
    assert len(body["annotations"][CONFIG_ANNOTATION]) == 64
    assert CANARY not in str(api.requests)


def test_unchanged_settings_send_nothing_and_a_change_updates(api: CloudRunStandIn) -> None:
    assert _apply(api, _settings())[0] == "created"
    before = len(api.requests)
    action, url, steps = _apply(api, _settings())
    assert action == "unchanged" and url.startswith("https://team-")
    assert [r.method for r in api.requests[before:]] == ["GET"], "only read: no update sent"
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
    assert _apply(api, _settings(image=new_image, max_instances=3, public=False))[0] == "updated"
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
        UsageError, match=r"nothing to serve: .* records no local or sandbox engine; pass --spec FILE"
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
