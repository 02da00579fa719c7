"""Every policy over every resource of the real stacks: the platform (dev, prod) as `infra synth`
registers it and each workload stack's rendered Kubernetes objects. No mandatory violation may remain."""

from __future__ import annotations

import copy
import json

import pulumi
import pytest
import yaml
from recording_mocks import RecordingMocks

from policy.core import Resource, evaluate, from_synth, stack_is_prod
from policy.k8s import from_manifests
from policy.pack import RULES, STACK_RULES
from policy.scan import REPO


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_platform_stack_has_no_mandatory_violation(platform_resources, stack):
    findings = evaluate(from_synth(platform_resources[stack]), RULES, STACK_RULES, prod=stack_is_prod(stack))
    mandatory = [str(f) for f in findings if f.level == "mandatory"]
    assert mandatory == [], "\n".join(mandatory)


def test_workload_stacks_have_no_mandatory_violation(workload_objects):
    problems = []
    for stack, objects in workload_objects.items():
        findings = evaluate(from_manifests(objects), RULES, prod=stack_is_prod(stack))
        problems += [f"{stack}: {f}" for f in findings if f.level == "mandatory"]
    assert problems == [], "\n".join(problems)


def test_the_render_command_prints_the_objects_the_policy_tests_judge(workload_objects):
    """`workload_objects` runs `workloads render` in-process; policy.scan (`make lint`) runs the command in a
    process of its own: both read the same objects, the trainer config's literal block included."""
    from policy.scan import rendered_objects

    stack = "dev-zimdb"
    assert any(o["kind"] == "ConfigMap" for o in workload_objects[stack])
    assert rendered_objects(stack) == workload_objects[stack]


# Rules on kinds the committed stacks do not create themselves: admission webhooks come from the charts
# (tests/policy/test_chart_policies.py judges them), security groups from pulumi-eks inside the provider,
# and the rest are kinds a user's stack may add. Their bypass attempts (tests/policy/bypasses.py,
# tests/policy/bypasses_whole_stack.py) exercise them.
NOT_IN_THE_STACKS = {
    "k8s-webhooks-stay-in-cluster",
    "network-no-internet-admin-ports",
    "network-default-security-group-closed",
}


def test_the_stacks_exercise_the_policies(platform_resources, workload_objects, chart_objects):
    """Guard against a vacuous pass: each policy has resources of its type in the real stacks
    (the prod-only / non-prod-only twins count once)."""
    resources = [r for rs in platform_resources.values() for r in from_synth(rs)]
    resources += [r for objs in workload_objects.values() for r in from_manifests(objs)]
    charts = [r for objs in chart_objects.values() for r in from_manifests(objs)]
    from tests.policy.bypasses import ATTEMPTS
    from tests.policy.bypasses_whole_stack import ATTEMPTS as WHOLE_STACK_ATTEMPTS

    for name in NOT_IN_THE_STACKS:
        rule = next(r for r in RULES if r.name == name)
        assert any(a.policy == name for a in (*ATTEMPTS, *WHOLE_STACK_ATTEMPTS)), name
        if name == "k8s-webhooks-stay-in-cluster":
            assert any(rule.applies_to(r.type, False) for r in charts), name
    unexercised = {
        rule.name
        for rule in RULES
        if not any(rule.applies_to(r.type, prod) for r in resources for prod in (False, True))
    }
    assert unexercised <= NOT_IN_THE_STACKS, unexercised - NOT_IN_THE_STACKS


def _with_user_account(resources: list[Resource]) -> list[Resource]:
    """The resources as a deployed platform's exports would make them: the user's account, not the
    example files' documentation account."""
    from infra.config.placeholders import EXAMPLE_ACCOUNT
    from infra.tools.rehearse import USER_ACCOUNT

    def swap(value):
        return json.loads(json.dumps(value).replace(EXAMPLE_ACCOUNT, USER_ACCOUNT))

    return [Resource(type=r.type, name=r.name, inputs=swap(dict(r.inputs))) for r in resources]


def _gpu_pool(r) -> bool:
    return "nvidia.com/gpu" in str(r["inputs"].get("taints")) or "nvidia.com/gpu" in str(
        r["inputs"].get("spec")
    )


def _set(path: tuple, value):
    def mutate(inputs: dict) -> None:
        for key in path[:-1]:
            inputs = inputs[key]
        inputs[path[-1]] = value

    return mutate


def _pods(obj: dict) -> list[dict]:
    from policy.k8s import pod_specs

    return [spec for _, spec in pod_specs(obj)]


# (what is broken, resource type, which resource, mutation, the policy that must catch it)
MUTATIONS = [
    (
        "public endpoint open",
        "eks:index:Cluster",
        None,
        lambda i: i.update(endpointPublicAccess=True, publicAccessCidrs=None),
        "eks-endpoint-not-open",
    ),
    (
        "no secrets key",
        "eks:index:Cluster",
        None,
        _set(("encryptionConfigKeyArn",), None),
        "eks-secrets-encryption",
    ),
    (
        "hop limit 2",
        "aws:ec2/launchTemplate:LaunchTemplate",
        None,
        _set(("metadataOptions", "httpPutResponseHopLimit"), 2),
        "nodes-imdsv2-hop-limit-1",
    ),
    (
        # The committed stacks' GPU capacity is all Karpenter's (managed GPU groups are reserved pools).
        "GPU NodePool never empties",
        "kubernetes:karpenter.sh/v1:NodePool",
        _gpu_pool,
        _set(("spec", "disruption", "consolidateAfter"), "Never"),
        "gpu-node-groups-scale-to-zero-prod",
    ),
    (
        "GPU NodePool untainted",
        "kubernetes:karpenter.sh/v1:NodePool",
        _gpu_pool,
        _set(("spec", "template", "spec", "taints"), []),
        "gpu-nodes-tainted",
    ),
    (
        "node class hop limit 3",
        "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
        None,
        _set(("spec", "metadataOptions", "httpPutResponseHopLimit"), 3),
        "nodes-imdsv2-hop-limit-1",
    ),
    (
        "bucket policy emptied",
        "aws:s3/bucketPolicy:BucketPolicy",
        None,
        _set(("policy",), '{"Statement": []}'),
        "s3-tls-only",
    ),
    (
        "mutable ECR tags",
        "aws:ecr/repository:Repository",
        None,
        _set(("imageTagMutability",), "MUTABLE"),
        "ecr-scan-and-immutable-tags",
    ),
    (
        "queue unencrypted",
        "aws:sqs/queue:Queue",
        None,
        lambda i: (i.pop("sqsManagedSseEnabled", None), i.pop("kmsMasterKeyId", None)),
        "sqs-encryption",
    ),
    (
        "versioning suspended",
        "aws:s3/bucketVersioning:BucketVersioning",
        None,
        _set(("versioningConfiguration", "status"), "Suspended"),
        "s3-bucket-guardrails-present",
    ),
]
WORKLOAD_MUTATIONS = [
    (
        "hostNetwork",
        "PyTorchJob",
        lambda o: [p.update(hostNetwork=True) for p in _pods(o)],
        "k8s-training-no-host-namespaces",
    ),
    (
        "root user",
        "PyTorchJob",
        lambda o: [p.update(securityContext={"runAsUser": 0}) for p in _pods(o)],
        "k8s-training-run-as-non-root",
    ),
    (
        "no GPU toleration",
        "TrainJob",
        lambda o: [p.pop("tolerations", None) for p in _pods(o)],
        "k8s-gpu-requests-tolerate-taint",
    ),
    (
        "latest image",
        "TrainJob",
        lambda o: o["spec"]["trainer"].update(image="repo/cuda:latest"),
        "k8s-images-pinned",
    ),
]


@pytest.mark.parametrize(
    ("what", "type_", "which", "mutate", "rule"), MUTATIONS, ids=[m[0] for m in MUTATIONS]
)
def test_breaking_a_real_platform_resource_is_caught(platform_resources, what, type_, which, mutate, rule):
    """The real stacks pass because they are right, not because the policies miss them."""
    records = copy.deepcopy(platform_resources["prod"])
    targets = [r for r in records if r["type"] == type_ and (which is None or which(r))]
    assert targets, f"prod has no {type_} to break"
    mutate(targets[0]["inputs"])
    caught = {f.rule for f in evaluate(from_synth(records), RULES, STACK_RULES, prod=True)}
    assert rule in caught, f"{what}: {rule} did not fire"


@pytest.mark.parametrize(
    ("what", "kind", "mutate", "rule"), WORKLOAD_MUTATIONS, ids=[m[0] for m in WORKLOAD_MUTATIONS]
)
def test_breaking_a_real_workload_object_is_caught(workload_objects, what, kind, mutate, rule):
    objects = [copy.deepcopy(o) for objs in workload_objects.values() for o in objs if o.get("kind") == kind]
    assert objects, f"no workload stack renders a {kind}"
    mutate(objects[0])
    assert rule in {f.rule for f in evaluate(from_manifests(objects[:1]), RULES)}, (
        f"{what}: {rule} did not fire"
    )


def test_workload_programs_pass_every_policy(workload_objects, pulumi_mocks):
    """The workload program's own AWS resources too (the job's Pod Identity role, its S3 policy)."""
    from workloads.platform import example_outputs_path
    from workloads.program import program

    problems, seen = [], set()
    for stack in workload_objects:
        config = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]
        platform = config["mlops-eks:platformStack"]
        outputs = {**json.loads(example_outputs_path(platform).read_text()), "kubeconfig": "{}"}
        values = {"mlops-eks:platformStack": platform, "mlops-eks:job": config["mlops-eks:job"]}
        mocks = pulumi_mocks(RecordingMocks(outputs), stack=stack, config=values)
        pulumi.runtime.test(program)()
        as_sent = [(r.typ, r.name, json.loads(json.dumps(r.inputs))) for r in mocks.resources]
        resources = [Resource(type=t, name=n, inputs=i) for t, n, i in as_sent]
        seen |= {r.type for r in resources}
        # At the engine's levels: the example platform exports' documentation account would be mandatory,
        # so the platform's outputs here carry a user's account (as they would after `make up`).
        findings = evaluate(_with_user_account(resources), RULES, prod=stack_is_prod(stack), engine=True)
        problems += [f"{stack}: {f}" for f in findings]
    assert problems == [], "\n".join(problems)
    assert "aws:iam/role:Role" in seen, seen
