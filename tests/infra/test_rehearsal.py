"""The rehearsal of a user's first deploy (infra/tools/rehearse.py, sim/pulumi/engine.py): the steps of
docs/deploy.md for dev, prod and every committed workload stack, the program over a gRPC monitor with config
as the CLI hands it over, the policy pack through its analyzer at the pack's own levels, and an update by a
second identity. One rehearsal per session (a platform stack is rehearsed once; its workload stacks read its
exports)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import rpc

from infra.config import stack_files
from infra.contract import ACCELERATOR_LABEL
from infra.platform.creator import CREATOR_TAG
from infra.tools.rehearse import (
    FIRST_DEPLOYER,
    REPO,
    USER_ACCOUNT,
    USER_VALUES,
    Rehearsal,
    RehearsalError,
    check_identities,
)
from infra.tools.synth import PlatformMocks
from sim.pulumi.engine import Analyzer, CreateFailed, Registration, RunResult, run_program
from tests.infra.warm_interpreter import WarmInterpreter
from tests.warm_fork import WarmServer

STACKS = ["dev", "prod", *stack_files.workload_stacks(REPO)]


def preview(
    values: dict[str, str],
    secret_keys: list[str],
    *,
    stack: str = "dev",
    caller: str = FIRST_DEPLOYER,
    outputs: dict[str, dict] | None = None,
    clusters: dict[str, dict[str, str]] | None = None,
    update: bool = False,
    legacy_backend: bool = False,
) -> RunResult:
    """One `make preview` (or with `update`, the update of `make up`) of the program alone (no policy pack)
    as `caller`, in an account with the EKS `clusters` (name -> tags)."""
    return run_program(
        stack=stack,
        preview=not update,
        config=values,
        secret_keys=secret_keys,
        cloud=PlatformMocks("us-east-1", account_id=USER_ACCOUNT, caller_arn=caller, clusters=clusters),
        stack_outputs=outputs or {},
        policy_pack=False,
        legacy_backend=legacy_backend,
        start=WARM[0].run if WARM else None,
    )


def _in_plaintext(value: Any, secret: str) -> bool:
    """Whether `secret` occurs in wire-format inputs outside a secret wrapper."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return False
        return any(_in_plaintext(v, secret) for v in value.values())
    if isinstance(value, list):
        return any(_in_plaintext(v, secret) for v in value)
    return isinstance(value, str) and secret in value


WARM: list[WarmInterpreter] = []  # the module's warm interpreter, while its tests run
# What the pack's analyzer imports before the pack's own code (pulumi/policy/__main__.py, policy/__main__.py),
# and IAM's action database, which the pack loads on its first IAM rule (policy/iam_semantics.py: 13 MB of
# JSON, parsed once here instead of once per analyzer).
ANALYZER_PRELOAD = (
    "import grpc, pulumi.runtime, pulumi.policy, pulumi_policy\nimport policy.pack\n"
    "import policy_sentry.shared.iam_data\n"
)
ANALYZERS: list[WarmServer] = []


def start_analyzer(command: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """The analyzer's command line (`python -u -m pulumi.policy ...`) forked from the warm analyzer server."""
    (server,) = ANALYZERS
    run = {**env, **server.env()}
    pipe = subprocess.PIPE
    argv = [server.stub, *command[1:]]
    return subprocess.Popen(argv, cwd=cwd, env=run, stdout=pipe, stderr=pipe, text=True)


@pytest.fixture(scope="module", autouse=True)
def warm_interpreter() -> Iterator[WarmInterpreter]:
    """The program runs of this module forked from one interpreter that imported the SDKs once
    (tests/infra/warm_interpreter.py): 30 cold starts would import them 30 times; the pack's analyzers
    from one that imported the pack (tests/warm_fork.py). test_a_warm_run_registers_what_a_cold_run_registers
    keeps both honest."""
    warm = WarmInterpreter()
    WARM.append(warm)
    ANALYZERS.append(WarmServer(ANALYZER_PRELOAD, dict(os.environ)))
    yield warm
    WARM.clear()
    warm.close()
    ANALYZERS.pop().close()


@pytest.fixture(scope="module")
def rehearsal(warm_interpreter) -> tuple[Rehearsal, dict[str, str]]:
    """Every committed stack rehearsed in one session: stack -> "" (passed) or the rehearsal's error."""
    session = Rehearsal(start=warm_interpreter.run, start_analyzer=start_analyzer)
    outcome = {}
    for stack in STACKS:
        try:
            session.run(stack)
            outcome[stack] = ""
        except RehearsalError as err:
            outcome[stack] = str(err)
    return session, outcome


@pytest.mark.parametrize("stack", STACKS)
def test_the_rehearsal_passes_for_every_committed_stack(rehearsal, stack):
    session, outcome = rehearsal
    assert outcome[stack] == ""
    up = session.runs[(stack, "up")]
    assert up.returncode == 0 and up.registrations and up.mandatory == []


def test_a_warm_run_registers_what_a_cold_run_registers(rehearsal):
    """The first `make up` of dev, started cold as the language host starts it, the pack's analyzer too: the
    same resources with the same inputs, the same exports and logs, and the same findings of the pack as the
    rehearsal's forked run (registration order is the program's asynchronous order, not compared)."""
    session, _ = rehearsal
    warm = session.runs[("dev", "up")]
    values, secret_keys = session.merged("dev", session.stack_config("dev")[0])
    cloud = PlatformMocks("us-east-1", account_id=USER_ACCOUNT, caller_arn=FIRST_DEPLOYER, clusters={})
    cold = run_program(
        stack="dev",
        preview=False,
        config=values,
        secret_keys=secret_keys,
        cloud=cloud,
        stack_outputs={},
    )

    def seen(result: RunResult) -> list[tuple[str, str]]:
        return sorted((r.urn, json.dumps(r.inputs, sort_keys=True)) for r in result.registrations)

    assert cold.returncode == warm.returncode == 0
    assert seen(cold) == seen(warm) and len(seen(cold)) > 100
    assert cold.outputs == warm.outputs and sorted(cold.logs) == sorted(warm.logs)
    assert sorted(map(repr, cold.diagnostics)) == sorted(map(repr, warm.diagnostics))
    assert cold.policies == warm.policies and len(cold.policies) > 20


def test_the_program_runs_its_engine_branch_with_the_clis_merged_config(rehearsal):
    """Not the mocks again: the monitor is a gRPC server, so the program refuses what only the engine
    branch refuses, and it got every Pulumi.yaml default the stack file leaves unset."""
    session, _ = rehearsal
    up = session.runs[("dev", "up")]
    assert not [m for s, m in up.logs if "accepted offline only" in m]
    values, _ = session.merged("dev", session.stack_config("dev")[0])
    # Unset in Pulumi.dev.yaml: the CLI hands the program Pulumi.yaml's default "" (a plain value).
    assert values["mlops-eks:alertReceiverSecret"] == "" and values["mlops-eks:grafanaAdminPassword"] == ""
    examples = Rehearsal(
        values={**USER_VALUES, "account": "123456789012"}, start=WARM[0].run, start_analyzer=start_analyzer
    )
    with pytest.raises(RehearsalError, match="123456789012 is the AWS documentation's example account"):
        examples.run("dev")


def test_the_policy_pack_judged_every_registration_through_its_analyzer(rehearsal):
    session, _ = rehearsal
    preview = session.runs[("prod", "preview")]
    # During a first preview most inputs are unknown: the pack says it cannot judge them, advisory.
    assert any("during preview" in d.message and d.level == "advisory" for d in preview.diagnostics)
    up = session.runs[("prod", "up")]
    analyzed = {d.urn for d in preview.diagnostics}
    assert analyzed and analyzed <= {r.urn for r in up.registrations} | {""}


@pytest.mark.parametrize(
    ("cidr", "mandatory"), [("0.0.0.0/0", False), ("10.0.0.0/8", False), ("198.51.100.0/24", True)]
)
def test_the_placeholder_rule_at_the_engines_level_judges_networks_inside_documentation_ranges(
    cidr, mandatory
):
    """Under the engine the pack reads pulumi-policy's proxies (a route list is a Sequence, not a list), at
    the level the pack declares (mandatory), not the offline one."""
    analyzer = Analyzer.start(
        engine_address="127.0.0.1:1",
        stack="dev",
        preview=False,
        config={},
        secret_keys=[],
        start=start_analyzer,
    )
    try:
        route = Registration(
            urn="urn:pulumi:dev::mlops-eks::aws:ec2/routeTable:RouteTable::rt",
            type="aws:ec2/routeTable:RouteTable",
            name="rt",
            parent="",
            custom=True,
            inputs={"vpcId": "vpc-1", "routes": [{"cidrBlock": cidr, "natGatewayId": "nat-1"}]},
            state={},
            dependencies=[],
            property_dependencies={},
        )
        analyzer.analyze(route)
        found = [d for d in analyzer.diagnostics if d.policy == "no-documentation-placeholders"]
        assert analyzer.levels["no-documentation-placeholders"] == "mandatory"
        assert [d.level for d in found] == (["mandatory"] if mandatory else [])
    finally:
        analyzer.stop()


def test_an_update_by_a_second_identity_keeps_the_creator_and_the_bucket_principals(rehearsal):
    session, _ = rehearsal
    first, second = session.runs[("dev", "up")], session.runs[("dev", "up-second-identity")]
    assert second.returncode == 0 and second.caller.endswith(":assumed-role/platform-admin/ci")
    assert first.outputs["cluster_creator_arn"] == second.outputs["cluster_creator_arn"] == FIRST_DEPLOYER
    policy = next(
        r.inputs["policy"] for r in second.registrations if r.type.endswith("bucketPolicy:BucketPolicy")
    )
    assert "role/deployer" in json.dumps(policy), "the first deployer lost the bucket"
    # The check itself refuses a bucket policy that changed hands.
    changed = [
        dataclasses.replace(r, inputs={**r.inputs, "policy": "changed"})
        if r.type.endswith("bucketPolicy:BucketPolicy")
        else r
        for r in second.registrations
    ]
    with pytest.raises(RehearsalError, match="bucket's policy changed"):
        check_identities("dev", first, dataclasses.replace(second, registrations=changed))


def test_a_deployer_neither_creator_nor_admin_is_refused_before_anything_is_created(rehearsal):
    session, _ = rehearsal
    values, secret_keys = session.merged("dev", session.stack_config("dev")[0])
    stranger = f"arn:aws:sts::{USER_ACCOUNT}:assumed-role/someone-else/x"
    result = preview(values, secret_keys, caller=stranger, clusters=session.clusters)
    assert result.returncode != 0 and result.registrations == []
    assert any("is neither the cluster's creator" in e for e in result.errors), result.errors


ADMIN = f"arn:aws:sts::{USER_ACCOUNT}:assumed-role/platform-admin/ci"  # listed in adminPrincipalArns
WEBHOOK = "https://hooks.example.com/x"


@dataclasses.dataclass(frozen=True)
class ChangedDev:
    values: dict[str, str]
    secret_keys: list[str]
    applied: list[str]  # the config commands, as the rehearsal echoes them
    preview: RunResult


@pytest.fixture(scope="module")
def changed_dev(warm_interpreter) -> ChangedDev:
    """One `make preview` of dev that three tests read, each about a change of its own: the alert
    receiver's webhook URL set with `config set --secret`, Kubernetes 1.33, and a listed admin (ADMIN)
    deploying to an account whose dev cluster predates the creator tag."""
    session = Rehearsal(
        secrets={"mlops-eks:alertReceiverSecret": WEBHOOK}, start=WARM[0].run, start_analyzer=start_analyzer
    )
    config, applied = session.stack_config("dev")
    config["mlops-eks:addons"]["observability"]["alertReceiver"] = "webhook"
    config["mlops-eks:kubernetesVersion"] = "1.33"
    values, secret_keys = session.merged("dev", config)
    untagged = {"mlops-eks-dev": {"Name": "cluster-eks-eksCluster"}}
    result = preview(values, secret_keys, caller=ADMIN, clusters=untagged)
    assert result.returncode == 0, result.errors
    return ChangedDev(values, secret_keys, applied, result)


def test_a_secret_set_with_config_set_secret_reaches_the_program_as_a_secret(changed_dev):
    assert changed_dev.secret_keys == ["mlops-eks:alertReceiverSecret"]
    assert "********" in changed_dev.applied[-1]
    registered = changed_dev.preview.registrations
    exposed = [r.name for r in registered if _in_plaintext(r.inputs, WEBHOOK)]
    sent = [r.name for r in registered if "hooks.example.com" in json.dumps(r.inputs)]
    assert sent and exposed == []
    # The same value written into the file in plaintext is refused under the engine.
    plain = {**changed_dev.values}
    result = preview(plain, [])
    assert any("a plaintext secret in the stack file" in e for e in result.errors), result.errors


def test_a_preview_on_a_version_past_standard_support_says_what_it_costs(changed_dev):
    """Kubernetes 1.33 left EKS standard support on 2026-07-29: still deployable (an existing cluster
    upgrades one minor at a time), and the preview says so with the price."""
    warnings = [m for s, m in changed_dev.preview.logs if s == "warning" and "extended support" in m]
    assert warnings and "$0.60 per hour" in warnings[0]


def test_a_cluster_created_before_the_creator_was_recorded_on_it_records_its_next_deployer(changed_dev):
    warnings = [m for s, m in changed_dev.preview.logs if s == "warning"]
    assert any(f"has no {CREATOR_TAG} tag: recording {ADMIN}" in m for m in warnings), warnings
    (cluster,) = [r for r in changed_dev.preview.registrations if r.type == "eks:index:Cluster"]
    assert cluster.inputs["clusterTags"][CREATOR_TAG] == ADMIN


def test_destroy_waits_for_each_pools_termination_grace_plus_a_margin(rehearsal):
    """Deleting a NodePool drains its nodes first; a pod gets the pool's terminationGracePeriod where the pool
    sets one. GPU pools set none (their jobs' do-not-disrupt pods are never evicted, so the workload stacks
    go first), and get the margin only; the engine is told to wait that long for every pool."""
    session, _ = rehearsal
    registered = session.runs[("dev", "up")].registrations
    pools = {r.name: r for r in registered if r.type == "kubernetes:karpenter.sh/v1:NodePool"}
    assert len(pools) >= 2, list(pools)
    for resource in pools.values():
        grace = resource.inputs["spec"]["template"]["spec"].get("terminationGracePeriod")
        expected = {None: "15m", "1h": "75m", "30m": "45m"}[grace]
        assert resource.delete_timeout == expected, (resource.name, grace)
    labels = {n: r.inputs["spec"]["template"].get("metadata", {}).get("labels", {}) for n, r in pools.items()}
    gpu = [r for name, r in pools.items() if ACCELERATOR_LABEL in labels[name]]
    assert gpu and all(r.delete_timeout == "15m" for r in gpu)


def test_deploying_from_inside_the_vpc_is_refused_on_the_first_deploy_and_accepted_after_it(rehearsal):
    session, _ = rehearsal
    config = session.stack_config("prod")[0]
    config.pop("mlops-eks:publicAccessCidrs")
    config |= {
        "mlops-eks:endpointPublicAccess": False,
        "mlops-eks:deployFromVpc": True,
        "mlops-eks:deployerCidrs": ["10.30.0.0/19"],
    }
    values, secret_keys = session.merged("prod", config)

    def from_runner(clusters: dict) -> RunResult:
        return preview(values, secret_keys, stack="prod", clusters=clusters)

    first = from_runner({})
    assert first.registrations == []
    assert any("deployFromVpc" in e and "first deploy" in e for e in first.errors), first.errors
    # After a first deploy from outside (the cluster the prod rehearsal created), from the runner:
    later = from_runner({"mlops-eks-prod": session.clusters["mlops-eks-prod"]})
    assert later.returncode == 0, later.errors
    rules = [r for r in later.registrations if r.type == "aws:ec2/securityGroupRule:SecurityGroupRule"]
    assert [r.inputs["cidrBlocks"] for r in rules] == [["10.30.0.0/19"]]


class FailsAfterTheCluster(PlatformMocks):
    """A first update that fails once EKS created the cluster: its first Helm release is refused."""

    def created(self, typ, name, inputs):
        if typ == "kubernetes:helm.sh/v3:Release":
            raise CreateFailed(f"release {name}: context deadline exceeded")
        return super().created(typ, name, inputs)


def test_a_failed_first_update_keeps_its_creator_for_the_next_deployer_on_a_legacy_diy_backend(rehearsal):
    """The first update fails after EKS created the cluster: the stack records no outputs. The next update
    by a listed admin reads the creator from the cluster's tag (not outputs that were never written, and
    through no `organization/project/stack` reference, which a DIY backend of the legacy layout refuses)."""
    session, _ = rehearsal
    values, secret_keys = session.merged("dev", session.stack_config("dev")[0])
    clusters: dict[str, dict[str, str]] = {}
    failing = FailsAfterTheCluster(
        "us-east-1", account_id=USER_ACCOUNT, caller_arn=FIRST_DEPLOYER, clusters=clusters
    )
    first = run_program(
        stack="dev",
        preview=False,
        config=values,
        secret_keys=secret_keys,
        cloud=failing,
        stack_outputs={},
        policy_pack=False,
        legacy_backend=True,
        start=WARM[0].run,
    )
    assert first.returncode != 0 and any(
        "context deadline exceeded" in e for e in [*first.errors, first.output]
    )
    assert clusters["mlops-eks-dev"][CREATOR_TAG] == FIRST_DEPLOYER
    retry = preview(values, secret_keys, caller=ADMIN, clusters=clusters, update=True, legacy_backend=True)
    assert retry.returncode == 0, retry.errors or retry.output[-2000:]
    assert retry.outputs["cluster_creator_arn"] == FIRST_DEPLOYER
    policy = next(
        r.inputs["policy"] for r in retry.registrations if r.type.endswith("bucketPolicy:BucketPolicy")
    )
    assert "role/deployer" in json.dumps(policy), "the creator lost the bucket to the second deployer"


def test_a_replaced_clusters_creator_is_read_from_the_cluster_not_the_stacks_old_record(rehearsal):
    """EKS made the identity that created the new cluster its admin: listing it too would fail with a
    duplicate
    access entry. The check names the creator the cluster records, whatever the stack recorded before."""
    session, _ = rehearsal
    values, secret_keys = session.merged("dev", session.stack_config("dev")[0])
    replaced = {"mlops-eks-dev": {CREATOR_TAG: ADMIN}}
    old_record = {"organization/mlops-eks/dev": {"cluster_creator_arn": FIRST_DEPLOYER, "vpc_id": "vpc-0old"}}
    result = preview(values, secret_keys, caller=ADMIN, clusters=replaced, outputs=old_record)
    assert result.registrations == []
    role = f"arn:aws:iam::{USER_ACCOUNT}:role/platform-admin"
    problem = f"adminPrincipalArns[0]: '{role}' is the cluster's creator ({ADMIN})"
    assert any(problem in e for e in result.errors), result.errors


def test_a_mistyped_stack_is_refused_with_the_stack_it_resembles():
    with pytest.raises(
        RehearsalError, match=r"Pulumi\.dev-zimbd\.yaml \(did you mean dev-zimdb\?\); allowed: a stack"
    ):
        Rehearsal().run("dev-zimbd")


# A URL in what the program registers is something a provider could fetch while previewing or updating.
_URL = re.compile(r"\b(?:https?|git|oci|ssh|s3)://[^\s\"'\\]+|\bgit@[\w.-]+:[^\s\"'\\]+")
# The URLs among the registrations no provider fetches, and why.
NOT_FETCHED = {
    r"^https?://[\w.-]+\.svc(?:\.cluster\.local)?(?::\d+)?(?:/|$)": "an in-cluster Service a pod calls "
    "at run time (Kubecost's Prometheus)",
    r"^https://\{host\}:\{port\}": "a template the startup GPU check fills in at run time with the API "
    "server's in-cluster address",
    r"^https://[\w.-]+\.eks\.amazonaws\.com/?$": "the cluster's API endpoint (kubeconfig): where the "
    "Kubernetes provider deploys, not something it downloads",
}


def remote_references(registrations: list[Registration]) -> list[str]:
    found = []
    for r in registrations:
        for url in sorted(set(_URL.findall(json.dumps(r.inputs)))):
            if not any(re.match(allowed, url) for allowed in NOT_FETCHED):
                found.append(f"{r.type} {r.name}: {url}")
    return found


def kustomize_remote_bases(registrations: list[Registration]) -> list[str]:
    """Remote resources of the kustomizations the program installs: kustomize fetches them at each preview."""
    found = []
    pending = [
        REPO / r.inputs["directory"] for r in registrations if r.type == "kubernetes:kustomize/v2:Directory"
    ]
    assert pending, "no kustomization to follow"
    while pending:
        directory = pending.pop()
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        for resource in kustomization.get("resources") or []:
            if "://" in resource or resource.startswith("git@"):
                found.append(f"{directory.relative_to(REPO)}: {resource}")
            elif (directory / resource).is_dir():
                pending.append(directory / resource)
    return found


def test_nothing_the_program_registers_names_a_remote_a_provider_fetches_at_deploy(rehearsal):
    """Charts come from the vendored archives (infra/charts.py), images from ECR: no Helm repository, no
    registry and no GitHub in any input of dev's and prod's updates."""
    session, _ = rehearsal
    for stack in ("dev", "prod"):
        registrations = session.runs[(stack, "up")].registrations
        assert remote_references(registrations) == [], stack
        charts = [r.inputs["chart"] for r in registrations if r.type == "kubernetes:helm.sh/v3:Release"]
        assert charts and all((REPO / c).is_file() for c in charts), charts
    # The check finds what a provider would fetch.
    helm_repo = Registration(
        "u",
        "kubernetes:helm.sh/v3:Release",
        "x",
        "",
        True,
        {"repositoryOpts": {"repo": "https://nvidia.github.io/k8s-device-plugin"}},
        {},
        [],
        {},
    )
    assert remote_references([helm_repo]) == [
        "kubernetes:helm.sh/v3:Release x: https://nvidia.github.io/k8s-device-plugin"
    ]


def test_no_kustomization_the_program_installs_builds_on_a_remote_base(rehearsal):
    session, _ = rehearsal
    assert kustomize_remote_bases(session.runs[("dev", "up")].registrations) == []
