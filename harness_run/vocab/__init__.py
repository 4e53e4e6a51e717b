"""The ground floor: names and numbers every layer shares, importing nothing above ``errors`` and
``events``.

- :mod:`~harness_run.vocab.k8s` — Kubernetes API groups, kinds, labels, annotations, ports, paths.
- :mod:`~harness_run.vocab.pins` — pinned harness CLIs, image requirements, the builder version.
- :mod:`~harness_run.vocab.pricing` — per-model token prices for harnesses that report no cost.
- :mod:`~harness_run.vocab.models` — the default model of each harness.
- :mod:`~harness_run.vocab.envrules` — which environment variables belong to the model providers.
- :mod:`~harness_run.vocab.net` — loopback port helper.
- :mod:`~harness_run.vocab.gcp` — Google Cloud names (the team server's service account, the default
  region, cluster, repository and Cloud Run service).
- :mod:`~harness_run.vocab.version` — the library version.

The modules are public (other packages import them by name); this ``__init__`` imports nothing.
"""

__all__: list[str] = []
