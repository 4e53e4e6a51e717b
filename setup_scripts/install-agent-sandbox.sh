#!/usr/bin/env bash
# Install the open-source Agent Sandbox controller and its CRDs (core + extensions) into the cluster
# of the current kubectl context. Used by harness-run-gcp-setup when the cluster has no Agent Sandbox
# (GKE's managed Agent Sandbox provides the same resources; then this script is not run).
# Usage: install-agent-sandbox.sh [VERSION]   (default v0.5.6; additive: `kubectl apply` only)
set -euo pipefail
version="${1:-v0.5.6}"
base="https://github.com/kubernetes-sigs/agent-sandbox/releases/download/${version}"
echo "installing Agent Sandbox ${version} into context $(kubectl config current-context)"
kubectl apply --server-side -f "${base}/manifest.yaml"
kubectl apply --server-side -f "${base}/extensions.yaml"
echo "waiting for the controller to be available"
kubectl -n agent-sandbox-system wait --for=condition=Available deployment --all --timeout=300s
kubectl wait --for=condition=Established --timeout=120s \
    crd/sandboxes.agents.x-k8s.io crd/sandboxtemplates.extensions.agents.x-k8s.io \
    crd/sandboxclaims.extensions.agents.x-k8s.io crd/sandboxwarmpools.extensions.agents.x-k8s.io
