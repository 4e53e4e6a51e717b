"""The compiler: ``AgentSpec`` -> image build context + Kubernetes manifests + content digest.

``compile(spec, image=ImageOptions(...), pods=PodOptions(...))`` is pure and fast apart from staging
skills; ``build_image(plan)`` (docker SDK, imported lazily) builds the context on a Docker engine.
"""

from harness_run.compiler._compile import compile
from harness_run.compiler._docker import build_image, docker_client
from harness_run.compiler._manifests import engine_labels, versioned_name
from harness_run.compiler._options import ImageOptions, PodOptions
from harness_run.compiler._plan import SHORT_DIGEST_LEN, BuildPlan
from harness_run.compiler._server import SERVER_IMAGE_NAME, SERVER_PORT, compile_server
from harness_run.compiler._skills import PinnedSkill, StagedFile, stage_skills
from harness_run.vocab.pins import BUILDER_VERSION, DEFAULT_BASE_IMAGE

__all__ = [
    # compile
    "BUILDER_VERSION",
    "DEFAULT_BASE_IMAGE",
    "SERVER_IMAGE_NAME",
    "SERVER_PORT",
    "SHORT_DIGEST_LEN",
    "BuildPlan",
    "ImageOptions",
    "PinnedSkill",
    "PodOptions",
    "StagedFile",
    # build
    "build_image",
    "compile",
    "compile_server",
    "docker_client",
    "engine_labels",
    "stage_skills",
    "versioned_name",
]
