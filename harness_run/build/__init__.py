"""The compiler: ``AgentSpec`` -> image build context + Kubernetes manifests + content digest.

``compile(spec)`` is pure and fast apart from staging skills; ``build_image(plan)`` (docker SDK,
imported lazily) builds the context on a Docker engine.
"""

from harness_run.build._compile import compile
from harness_run.build._docker import build_image
from harness_run.build._pins import BUILDER_VERSION, DEFAULT_BASE_IMAGE
from harness_run.build._plan import BuildPlan
from harness_run.build._skills import PinnedSkill, StagedFile, stage_skills

__all__ = [
    # compile
    "BUILDER_VERSION",
    "DEFAULT_BASE_IMAGE",
    "BuildPlan",
    "PinnedSkill",
    "StagedFile",
    # build
    "build_image",
    "compile",
    "stage_skills",
]
