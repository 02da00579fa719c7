"""The image path in ECR as the program registers it (infra/platform/image_cache.py): pull-through cache
rules and creation templates per upstream, the nodes' least-privilege right to fill the cache, every release
waiting for the step that checks its images (image_primer.py, run here against a real HTTP registry), and
the releases installed from the vendored chart archives."""

from __future__ import annotations

import base64
import json
import os
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from synth_graph import synth_with_edges

from infra.config.platform import ConfigError, PlatformConfig
from infra.platform import image_primer
from infra.platform.image_primer import Entry, Problem
from infra.tools.synth import ACCOUNT_ID, stack_config

REPO = Path(__file__).resolve().parents[2]
GHCR_SECRET = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT_ID}:secret:ecr-pullthroughcache/ghcr-AbCdEf"


def _policy(resource) -> dict:
    return json.loads(resource.inputs["policy"])


def test_pull_through_rules_cover_the_upstreams_ecr_caches_without_a_credential(stack):
    rules = {
        r.inputs["ecrRepositoryPrefix"]: r.inputs
        for r in stack.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
    }
    name = "dev" if "dev" in next(iter(rules)) else "prod"
    assert {p: r["upstreamRegistryUrl"] for p, r in rules.items()} == {
        f"{name}/k8s": "registry.k8s.io",
        f"{name}/quay": "quay.io",
        f"{name}/ecr-public": "public.ecr.aws",
    }
    assert not any(r.get("credentialArn") for r in rules.values())
    templates = {
        t.inputs["prefix"]: t.inputs
        for t in stack.of_type("aws:ecr/repositoryCreationTemplate:RepositoryCreationTemplate")
    }
    # One per prefix: cached repositories, and copied ones created on push, with the same settings.
    assert templates[f"{name}/k8s"]["appliedFors"] == ["PULL_THROUGH_CACHE"]
    assert templates[f"{name}/nvcr"]["appliedFors"] == ["CREATE_ON_PUSH"]
    for template in templates.values():
        assert template["imageTagMutability"] == "IMMUTABLE"
        (encryption,) = template["encryptionConfigurations"]
        assert encryption["encryptionType"] == "KMS" and encryption["kmsKey"].startswith("arn:aws:kms:")
        assert template["customRoleArn"].endswith("image-cache-repository-creator")


def test_nodes_may_fill_the_cache_under_its_prefixes_only(dev):
    (policy,) = [p for p in dev.of_type("aws:iam/policy:Policy") if p.name == "image-cache-nodes"]
    (statement,) = _policy(policy)["Statement"]
    assert sorted(statement["Action"]) == ["ecr:BatchImportUpstreamImage", "ecr:CreateRepository"]
    assert statement["Resource"] == [
        f"arn:aws:ecr:us-east-1:{ACCOUNT_ID}:repository/dev/{p}/*" for p in ("k8s", "quay", "ecr-public")
    ]
    attached = {
        a.inputs["role"]
        for a in dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if a.name in ("image-cache-nodes-0", "karpenter-node-image-cache")
    }
    assert len(attached) == 2  # the managed node groups' role and Karpenter's node role
    creator = next(
        p for p in dev.of_type("aws:iam/rolePolicy:RolePolicy") if p.name == "image-cache-repository-creator"
    )
    grants = next(s for s in _policy(creator)["Statement"] if s["Sid"] == "EncryptThemWithTheStacksKey")
    assert grants["Resource"].startswith("arn:aws:kms:") and "*" not in grants["Resource"]


def test_every_release_waits_for_the_step_that_checks_its_images_and_installs_the_vendored_archive(dev):
    steps = {r.name: r for r in dev.of_type("command:local:Command") if r.name.endswith("-images")}
    urns = {e.urn: r.name for r, e in zip(dev.resources, dev.edges, strict=True)}
    releases = [
        (r, e)
        for r, e in zip(dev.resources, dev.edges, strict=True)
        if r.type == "kubernetes:helm.sh/v3:Release"
    ]
    assert len(releases) >= 8
    for release, edges in releases:
        chart = release.inputs["chart"]
        assert chart.startswith("upstream/helm/") and (REPO / chart).is_file(), chart
        assert "repositoryOpts" not in release.inputs
        waits_for = {urns.get(u) for u in edges.dependencies}
        expected = f"{release.inputs['name']}-images"
        if release.inputs["name"] != "aws-efa-k8s-device-plugin":  # EKS's own registry: nothing to check
            assert expected in waits_for, release.inputs["name"]
            images = json.loads(steps[expected].inputs["environment"]["IMAGES"])
            assert images and all(
                i["ref"].startswith(f"{ACCOUNT_ID}.dkr.ecr.us-east-1.amazonaws.com/dev/") for i in images
            )
    # An image ECR cannot cache carries the command that copies it in, by digest where one is pinned.
    nvidia = json.loads(steps["nvidia-device-plugin-images"].inputs["environment"]["IMAGES"])
    assert nvidia[0]["copy"] == (
        "crane copy nvcr.io/nvidia/k8s-device-plugin:v0.20.0 "
        f"{ACCOUNT_ID}.dkr.ecr.us-east-1.amazonaws.com/dev/nvcr/nvidia/k8s-device-plugin:v0.20.0"
    )
    karpenter = json.loads(steps["karpenter-images"].inputs["environment"]["IMAGES"])
    assert karpenter[0]["digest"].startswith("sha256:7231") and karpenter[0]["copy"] == ""


def test_a_ghcr_credential_makes_ghcr_pull_through_with_it():
    values = stack_config("dev")
    values["mlops-eks:registryCredentials"] = {"ghcr": GHCR_SECRET}
    synth = synth_with_edges("dev", values)
    (rule,) = [
        r
        for r in synth.of_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
        if r.inputs["ecrRepositoryPrefix"] == "dev/ghcr"
    ]
    assert rule.inputs["upstreamRegistryUrl"] == "ghcr.io" and rule.inputs["credentialArn"] == GHCR_SECRET
    (step,) = [r for r in synth.of_type("command:local:Command") if r.name == "kubeflow-trainer-images"]
    assert all(i["copy"] == "" for i in json.loads(step.inputs["environment"]["IMAGES"]))


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        ({"gitlab": GHCR_SECRET}, "registryCredentials.gitlab.*one of dockerHub, ghcr"),
        (
            {"ghcr": "arn:aws:secretsmanager:us-east-1:123456789012:secret:ghcr-token"},
            "ecr-pullthroughcache/",
        ),
        ({"ghcr": GHCR_SECRET.replace("us-east-1", "eu-west-1")}, "a secret in us-east-1"),
    ],
)
def test_a_registry_credential_ecr_cannot_use_is_refused_with_what_it_can(credentials, message):
    values = {**stack_config("dev"), "mlops-eks:registryCredentials": credentials}
    with pytest.raises(ConfigError, match=message):
        PlatformConfig.from_mapping(values)


def test_a_registry_credential_of_another_account_is_refused_naming_the_deploying_one():
    config = PlatformConfig.from_mapping(
        {**stack_config("dev"), "mlops-eks:registryCredentials": {"ghcr": GHCR_SECRET}}
    )
    assert config.registry_credential_problems(ACCOUNT_ID) == []
    (problem,) = config.registry_credential_problems("210987654321")
    assert "registryCredentials.ghcr" in problem and "(210987654321)" in problem


class _Registry(BaseHTTPRequestHandler):
    """A registry's manifest endpoint: digests by (repository, tag), Basic auth required."""

    manifests: dict[tuple[str, str], str] = {}
    token = base64.b64encode(b"AWS:secret").decode()

    def do_GET(self):  # noqa: N802 (http.server's method name)
        parts = self.path.split("/")  # /v2/<repository...>/manifests/<tag>
        repository, tag = "/".join(parts[2:-2]), parts[-1]
        if self.headers.get("Authorization") != f"Basic {self.token}":
            self.send_response(401)
        elif (repository, tag) in self.manifests and "manifest" in self.headers.get("Accept", ""):
            self.send_response(200)
            self.send_header("Docker-Content-Digest", self.manifests[(repository, tag)])
        else:
            self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def registry():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()  # quick shutdown()
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()


def test_the_primer_accepts_the_pinned_digest_and_stops_a_moved_tag_or_a_missing_copy(registry):
    digest = "sha256:" + "1" * 64
    _Registry.manifests = {("dev/k8s/kueue/kueue", "v0.19.2"): digest}
    token = _Registry.token
    cached = Entry(ref=f"{registry}/dev/k8s/kueue/kueue:v0.19.2", digest=digest)
    assert image_primer.check(cached, token, scheme="http") == digest
    moved = Entry(ref=cached.ref, digest="sha256:" + "2" * 64)
    with pytest.raises(Problem, match="the tag moved upstream") as err:
        image_primer.check(moved, token, scheme="http")
    assert err.value.code == 2
    copy = "crane copy nvcr.io/nvidia/k8s-device-plugin:v0.20.0 x"
    with pytest.raises(Problem, match=f"copy it: {copy}"):
        image_primer.check(
            Entry(ref=f"{registry}/dev/nvcr/nvidia/k8s-device-plugin:v0.20.0", copy=copy),
            token,
            scheme="http",
        )
    with pytest.raises(Problem, match="HTTP 401") as err:
        image_primer.check(cached, "wrong", scheme="http")
    assert err.value.code == 2
    with pytest.raises(Problem) as err:  # nothing listens: a retry may fix it
        image_primer.check(Entry(ref="127.0.0.1:9/x/y:1"), token, scheme="http")
    assert err.value.code == 200


def test_the_primer_takes_its_token_from_the_aws_cli_and_exits_2_with_what_to_fix(
    registry, tmp_path, capsys, monkeypatch
):
    aws = tmp_path / "aws"  # the AWS CLI as the primer calls it: prints the registry's Basic credential
    aws.write_text(f"#!/bin/sh\necho {_Registry.token}\n")
    aws.chmod(aws.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    _Registry.manifests = {("dev/quay/kuberay/operator", "v1.7.0"): "sha256:" + "3" * 64}
    images = [{"ref": f"{registry}/dev/quay/kuberay/operator:v1.7.0", "digest": "", "copy": ""}]
    environ = {"REGION": "us-east-1", "IMAGES": json.dumps(images)}
    assert image_primer.main(environ, scheme="http") == 0
    assert "sha256:333" in capsys.readouterr().out
    images.append(
        {"ref": f"{registry}/dev/icr/kubecost/frontend:2.8.7", "digest": "", "copy": "crane copy a b"}
    )
    assert image_primer.main({**environ, "IMAGES": json.dumps(images)}, scheme="http") == 2
    assert "copy it: crane copy a b" in capsys.readouterr().err


def test_the_vendored_kueue_and_jobset_run_their_promoted_release_images_not_the_staging_ones(rendered):
    """The archives come from the source trees, whose values name the staging registry's moving tags pulled
    Always (upstream/helm/PROVENANCE.txt): the values give them the images the published charts install."""
    containers = {
        (o["metadata"]["name"], c["name"]): c
        for o in rendered["dev"].all_objects
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    registry = f"{ACCOUNT_ID}.dkr.ecr.us-east-1.amazonaws.com/dev/k8s"
    kueue = containers[("kueue-controller-manager", "manager")]
    assert (kueue["image"], kueue["imagePullPolicy"]) == (f"{registry}/kueue/kueue:v0.19.2", "IfNotPresent")
    jobset = next(c for (name, _), c in containers.items() if name.startswith("jobset-controller"))
    assert (jobset["image"], jobset["imagePullPolicy"]) == (
        f"{registry}/jobset/jobset:v0.12.0",
        "IfNotPresent",
    )


def test_the_images_command_prints_a_copy_for_each_image_ecr_cannot_cache(capsys):
    from infra.__main__ import main

    assert main(["images", "--stack", "dev", "--account", "210987654321"]) == 0
    out = capsys.readouterr().out
    registry = "210987654321.dkr.ecr.us-east-1.amazonaws.com"
    copies = [line for line in out.splitlines() if line.startswith("crane copy ")]
    nvidia = "nvidia/k8s-device-plugin:v0.20.0"
    assert f"crane copy nvcr.io/{nvidia} {registry}/dev/nvcr/{nvidia}" in copies
    assert {line.split()[2].split("/")[0] for line in copies} == {"docker.io", "ghcr.io", "icr.io", "nvcr.io"}
    assert f"--password-stdin {registry}" in out
    assert main(["images", "--stack", "dev", "--account", "2109876"]) == 2
    assert "allowed: an AWS account id (12 digits)" in capsys.readouterr().err
