#!/usr/bin/env python3
"""Validates every manifest in deploy/kubernetes against the Kubernetes schemas.

Built-in kinds go through kubernetes-validate (PyPI) in strict mode, so a misspelt or
misplaced field fails; the Gateway API, Inference Extension and LeaderWorkerSet kinds, which it
has no schema for, are checked against the fields of their CRDs (below), and a
LeaderWorkerSet's pod templates as built-in PodTemplates. With --pagoda BIN, every `--flag` in
a pagoda container's args must be a flag of that subcommand, and a pod's grace period must
cover its preStop sleep plus pagoda's --shutdown-timeout.
Run by crates/pagoda/tests/deploy_manifests.rs (so by scripts/test.sh and CI).
"""
import argparse
import pathlib
import shlex
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.33.0"

_NAME = {"type": "string", "minLength": 1, "maxLength": 253}
_PORT = {"type": "object", "required": ["number"], "additionalProperties": False,
         "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}}}
_METADATA = {"type": "object", "required": ["name"],
             "properties": {"name": _NAME, "namespace": _NAME,
                            "labels": {"type": "object"}, "annotations": {"type": "object"}}}


def _resource(api_version, kind, spec):
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
            "additionalProperties": False,
            "properties": {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                           "metadata": _METADATA, "spec": spec}}


# inference.networking.k8s.io/v1 InferencePool (the extension's
# config/crd/bases/inference.networking.k8s.io_inferencepools.yaml).
INFERENCE_POOL = _resource("inference.networking.k8s.io/v1", "InferencePool", {
    "type": "object", "required": ["selector", "targetPorts", "endpointPickerRef"],
    "additionalProperties": False,
    "properties": {
        "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
        "selector": {"type": "object", "required": ["matchLabels"], "additionalProperties": False,
                     "properties": {"matchLabels": {
                         "type": "object", "minProperties": 1, "maxProperties": 64,
                         "additionalProperties": {"type": "string", "maxLength": 63}}}},
        "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "items": _PORT},
        "endpointPickerRef": {
            "type": "object", "required": ["name", "port"], "additionalProperties": False,
            "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                           "name": _NAME, "port": _PORT,
                           "failureMode": {"enum": ["FailOpen", "FailClose"]}}},
    },
})

_PARENT_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
               "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                              "namespace": _NAME, "name": _NAME, "sectionName": _NAME,
                              "port": {"type": "integer"}}}
_BACKEND_REF = {"type": "object", "required": ["name"], "additionalProperties": False,
                "properties": {"group": {"type": "string"}, "kind": {"type": "string"},
                               "namespace": _NAME, "name": _NAME,
                               "port": {"type": "integer"}, "weight": {"type": "integer"}}}
# gateway.networking.k8s.io/v1 HTTPRoute, the parts a route to an InferencePool uses.
HTTP_ROUTE = _resource("gateway.networking.k8s.io/v1", "HTTPRoute", {
    "type": "object", "additionalProperties": False,
    "properties": {
        "parentRefs": {"type": "array", "items": _PARENT_REF},
        "hostnames": {"type": "array", "items": {"type": "string"}},
        "rules": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "matches": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"path": {
                        "type": "object", "additionalProperties": False,
                        "properties": {"type": {"enum": ["Exact", "PathPrefix",
                                                         "RegularExpression"]},
                                       "value": {"type": "string"}}}}}},
                "backendRefs": {"type": "array", "items": _BACKEND_REF},
                "timeouts": {"type": "object"},
            }}},
    },
})

# leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (kubernetes-sigs/lws,
# config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml); its two pod templates are
# checked as the built-in PodTemplate's (`pod_templates` below).
_POD_TEMPLATE = {"type": "object", "required": ["spec"]}
LEADER_WORKER_SET = _resource("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {
    "type": "object", "required": ["leaderWorkerTemplate"], "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
        "leaderWorkerTemplate": {
            "type": "object", "required": ["workerTemplate"], "additionalProperties": False,
            "properties": {
                "size": {"type": "integer", "minimum": 1},
                "restartPolicy": {"enum": ["RecreateGroupOnPodRestart", "Default", "None"]},
                "leaderTemplate": _POD_TEMPLATE,
                "workerTemplate": _POD_TEMPLATE,
                "subGroupPolicy": {"type": "object"},
            }},
        "rolloutStrategy": {"type": "object"},
        "networkConfig": {
            "type": "object", "additionalProperties": False,
            "properties": {"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}}},
    },
})

CUSTOM = {("inference.networking.k8s.io/v1", "InferencePool"): INFERENCE_POOL,
          ("gateway.networking.k8s.io/v1", "HTTPRoute"): HTTP_ROUTE,
          ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): LEADER_WORKER_SET}


def pod_templates(doc):
    """The pod templates inside a custom resource, each as a built-in PodTemplate."""
    if doc.get("kind") == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        for role in ("leaderTemplate", "workerTemplate"):
            if role in lwt:
                yield {"apiVersion": "v1", "kind": "PodTemplate",
                       "metadata": {"name": f"{doc['metadata']['name']}-{role}"},
                       "template": lwt[role]}


def validate(doc):
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in CUSTOM:
        jsonschema.validate(doc, CUSTOM[key])
        for template in pod_templates(doc):
            kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
    else:
        # Raises SchemaNotFoundError for a kind it does not know: an unknown kind is an error
        # here, never a skipped file.
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def pod_specs(doc):
    if doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        yield doc["spec"]["template"]["spec"]
    for template in pod_templates(doc):
        yield template["template"]["spec"]


def pagoda_args(c):
    """A pagoda container's subcommand and flags: its args, or the `pagoda SUB ...` that ends
    the script of a `sh -c` command (as under mpirun)."""
    if c.get("args"):
        return c["args"]
    command = c.get("command", [])
    if len(command) == 3 and command[:2] == ["/bin/sh", "-c"]:
        words = shlex.split(command[2].replace("\\\n", " "))
        for i, w in enumerate(words):
            if w == "pagoda" or w.endswith("/pagoda"):
                return words[i + 1:]
    return []


def check_pagoda_args(pod, pagoda, where):
    errors = []
    for c in pod.get("containers", []):
        args = pagoda_args(c)
        if not args or not c.get("image", "").split("/")[-1].startswith("pagoda"):
            continue
        help_text = subprocess.run([pagoda, args[0], "--help"], check=True,
                                   capture_output=True, text=True).stdout
        flags = {}
        for a in args[1:]:
            if a.startswith("--"):
                name, _, value = a.partition("=")
                flags[name] = value
                if f"{name} " not in help_text and f"{name}\n" not in help_text \
                        and f"{name}=" not in help_text and f"{name} <" not in help_text:
                    errors.append(f"{where}: `pagoda {args[0]}` has no flag {name}")
        grace = pod.get("terminationGracePeriodSeconds", 30)
        pre_stop = (c.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
                    .get("seconds", 0))
        drain = float(flags.get("--shutdown-timeout", 30))
        if grace < pre_stop + drain:
            errors.append(f"{where}: terminationGracePeriodSeconds {grace} < preStop "
                          f"{pre_stop} s + --shutdown-timeout {drain} s")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", help="the pagoda binary, to check the containers' flags")
    ap.add_argument("files", nargs="*")
    opts = ap.parse_args()
    here = pathlib.Path(__file__).parent
    files = [pathlib.Path(f) for f in opts.files] or sorted(here.glob("*.yaml"))
    errors, count = [], 0
    for f in files:
        for i, doc in enumerate(yaml.safe_load_all(f.read_text())):
            if doc is None:
                continue
            where = f"{f.name}[{i}] {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            count += 1
            try:
                validate(doc)
            except Exception as e:  # every validator's error is reported, then the next doc
                errors.append(f"{where}: {type(e).__name__}: {getattr(e, 'message', e)}")
                continue
            if opts.pagoda:
                for pod in pod_specs(doc):
                    errors.extend(check_pagoda_args(pod, opts.pagoda, where))
    for e in errors:
        print("ERROR", e)
    print(f"{count} resources in {len(files)} files, {len(errors)} errors")
    return 1 if errors or count == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
