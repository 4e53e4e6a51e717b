#!/usr/bin/env python3
"""A stand-in for ``gcloud`` and ``kubectl`` (no cloud is reachable from the test machines).

It keeps a project's state in the JSON file named by ``HR_CLOUD_STATE``: which resources exist and
which IAM members are bound. Audits answer from it; creates add to it. Every call is logged to
``<state>.log`` so tests can see exactly what the setup ran. ``HR_CLOUD_FAIL`` makes commands that
contain it fail (exit 1), to test error handling.
"""

import json
import os
import sys
from pathlib import Path

state_path = Path(os.environ["HR_CLOUD_STATE"])
state = json.loads(state_path.read_text()) if state_path.exists() else {}
tool = Path(sys.argv[0]).name
args = sys.argv[1:]
line = " ".join([tool, *args])
with open(f"{state_path}.log", "a") as log:
    log.write(line + "\n")
fail = os.environ.get("HR_CLOUD_FAIL")
if fail and fail in line:
    print(f"ERROR: (gcloud) simulated failure of {fail}", file=sys.stderr)
    sys.exit(1)
have: set[str] = set(state.get("have", []))
members: list[str] = state.get("members", [])


def save() -> None:
    state["have"], state["members"] = sorted(have), members
    state_path.write_text(json.dumps(state))


def need(key: str, out: str = "") -> None:
    if key not in have:
        print(f"ERROR: NOT_FOUND: {key}", file=sys.stderr)
        sys.exit(1)
    print(out)
    sys.exit(0)


def flag(name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


CSV = "--format=csv[no-heading](bindings.role,bindings.members)"


if tool == "kubectl":
    if args[:2] == ["config", "current-context"]:
        need("credentials", state.get("context", ""))
    if args[:2] == ["get", "crd"]:
        need("agent-sandbox")
    if args[:2] == ["get", "namespace"]:
        need(f"namespace/{args[2]}")
    if args[:2] == ["create", "namespace"]:
        have.add(f"namespace/{args[2]}")
        save()
        sys.exit(0)
    if args[:3] == ["apply", "-f", "-"]:  # a List from stdin: kept by kind/namespace/name
        objects: dict[str, object] = state.setdefault("k8s", {})
        for item in json.loads(sys.stdin.read())["items"]:
            meta = item["metadata"]
            objects[f"{item['kind']}/{meta['namespace']}/{meta['name']}"] = item
        save()
        sys.exit(0)
    if args[:2] == ["get", "role,rolebinding"]:
        namespace = args[args.index("-n") + 1]
        found = [state.get("k8s", {}).get(f"{k}/{namespace}/{args[2]}") for k in ("Role", "RoleBinding")]
        if None in found:
            print(f"Error from server (NotFound): {args[2]} not found", file=sys.stderr)
            sys.exit(1)
        print(json.dumps({"kind": "List", "items": found}))
        sys.exit(0)
if tool == "gcloud":
    head = args[:3]
    if head[:2] == ["projects", "describe"]:
        need("project", "123456789")
    if head == ["services", "list", "--enabled"]:
        print("\n".join(state.get("apis", [])))
        sys.exit(0)
    if head[:2] == ["services", "enable"]:
        state["apis"] = sorted(a for a in args[2:] if a.endswith(".googleapis.com"))
        save()
        sys.exit(0)
    if args[:2] == ["storage", "managed-folders"]:  # a folder's own policy: state["folders"][url]
        verb, url = args[2], args[3]
        folders: dict[str, list[str]] = state.setdefault("folders", {})
        bucket = "gs://" + url.removeprefix("gs://").split("/", 1)[0]
        if verb == "create":
            if f"storage buckets/{bucket}" not in have or url in folders:
                print(f"ERROR: cannot create managed folder {url}", file=sys.stderr)
                sys.exit(1)
            folders[url] = []
        elif url not in folders:
            print(f"ERROR: NOT_FOUND: managed folder {url}", file=sys.stderr)
            sys.exit(1)
        elif verb == "get-iam-policy":
            print(json.dumps({"bindings": [{"members": folders[url]}]}))
        elif verb == "add-iam-policy-binding":
            folders[url].append(flag("member"))
        save()
        sys.exit(0)
    bucket_bindings: list[list[str]] = state.setdefault("bucket_bindings", [])
    if args[:3] == ["storage", "buckets", "remove-iam-policy-binding"]:
        role_given = [a for a in args if a.startswith("--role=")]
        if role_given and [flag("role"), flag("member")] not in bucket_bindings:
            print("ERROR: Policy binding with the specified principal and role not found!", file=sys.stderr)
            sys.exit(1)
        bucket_bindings[:] = [b for b in bucket_bindings if b != [flag("role"), flag("member")]]
        if not any(m == flag("member") for _, m in bucket_bindings):
            members[:] = [m for m in members if m != flag("member")]
        save()
        sys.exit(0)
    if args[:3] == ["storage", "buckets", "get-iam-policy"] and CSV in args:
        print("\n".join(f"{r},{m}" for r, m in bucket_bindings))
        sys.exit(0)
    if args[:3] == ["storage", "buckets", "add-iam-policy-binding"]:
        bucket_bindings.append([flag("role"), flag("member")])  # and the members, below
    if args[:1] == ["secrets"]:  # every secret exists; state["secrets"][name]: [role, member] pairs
        secret_bindings: list[list[str]] = state.setdefault("secrets", {}).setdefault(args[2], [])
        if args[1] == "get-iam-policy":
            print("\n".join(f"{r},{m}" for r, m in secret_bindings))
            sys.exit(0)
        if args[1] == "add-iam-policy-binding":
            secret_bindings.append([flag("role"), flag("member")])
            save()
            sys.exit(0)
    if head[:2] == ["projects", "remove-iam-policy-binding"]:
        bound = [b for b in state.get("project_bindings", []) if b != [flag("role"), flag("member")]]
        if len(bound) == len(state.get("project_bindings", [])):
            print("ERROR: Policy binding with the specified principal and role not found!", file=sys.stderr)
            sys.exit(1)
        state["project_bindings"] = bound
        state["project_members"] = sorted({m for _, m in bound})
        save()
        sys.exit(0)
    for kind, verb_at in (
        ("artifacts repositories", 2),
        ("storage buckets", 2),
        ("container clusters", 2),
        ("container node-pools", 2),
    ):
        words = kind.split()
        if args[:2] == words:
            key = f"{kind}/{args[3]}" if len(args) > 3 else kind
            verb = args[verb_at]
            if verb == "describe":
                need(key, args[3])
            if verb == "create":
                have.add(key)
                save()
                sys.exit(0)
            if verb == "get-credentials":
                have.add("credentials")
                state["context"] = (
                    f"gke_{state.get('project', 'p')}_{flag('location') if any(a.startswith('--location=') for a in args) else args[args.index('--location') + 1]}_{args[3]}"
                )
                save()
                sys.exit(0)
            if verb == "get-iam-policy":
                print(json.dumps({"bindings": [{"members": members}]}))
                sys.exit(0)
            if verb == "add-iam-policy-binding":
                members.append(flag("member"))
                save()
                sys.exit(0)
    if head[:2] == ["projects", "get-iam-policy"]:
        role_filter = [a.split(":", 1)[1] for a in args if a.startswith("--filter=bindings.role:")]
        if role_filter:  # --flatten/--filter/--format=value(bindings.members): members of that role
            bound = state.get("project_bindings", [])
            print("\n".join(m for r, m in bound if r == role_filter[0]))
            sys.exit(0)
        print(json.dumps({"bindings": [{"members": state.get("project_members", [])}]}))
        sys.exit(0)
    if head[:2] == ["projects", "add-iam-policy-binding"]:
        state.setdefault("project_members", []).append(flag("member"))
        state.setdefault("project_bindings", []).append([flag("role"), flag("member")])
        save()
        sys.exit(0)
    if head[:2] == ["iam", "service-accounts"]:
        verb, account = args[2], args[3]
        if verb == "describe":
            need(f"service-account/{account}", account)
        if verb == "create":
            have.add(f"service-account/{account}@{state.get('project', 'p')}.iam.gserviceaccount.com")
            save()
            sys.exit(0)
    if head[:2] == ["auth", "configure-docker"]:
        docker = Path(os.environ["HOME"]) / ".docker" / "config.json"
        docker.parent.mkdir(parents=True, exist_ok=True)
        docker.write_text(json.dumps({"credHelpers": {args[2]: "gcloud"}}))
        sys.exit(0)
if tool == "bash" or (args and args[0].endswith("install-agent-sandbox.sh")):
    have.add("agent-sandbox")
    save()
    sys.exit(0)
print(f"cloud_cli stand-in: unhandled command {line}", file=sys.stderr)
sys.exit(3)
