"""A workload stack: the job in `mlops-eks:job` onto the platform stack in `mlops-eks:platformStack`.

StackReference(platform) -> Kubernetes provider from its kubeconfig -> the objects `render` returns
(namespace with quota, service account, ConfigMaps/PVCs, the job) and, when the job reads or writes S3,
an IAM role reachable only from the job's service account (EKS Pod Identity) that grants only the job's
prefix. The spec is validated twice before anything is created: on its own, then against the platform's
exports (inside the apply that reads them; a SpecError there fails the update with no resource made).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import ValidationError

from infra.contract import JOB_LABEL, PLATFORM_STACK_KEY
from infra.platform import pod_identity
from workloads import jobs, pod
from workloads.identity import role_description, s3_policy
from workloads.platform import PlatformFacts
from workloads.render import render
from workloads.spec import (
    CONFIG_KEY,
    HUB_TOKEN_CONFIG,
    MLFLOW_CREDENTIAL_CONFIG,
    SpecError,
    TrainingJobSpec,
    parse_spec,
)
from workloads.stacks import platform_stack_ref, program_text

TRAINING_DASHBOARD_UID = "mlops-eks-training"  # infra/addons/monitoring/dashboards.py, variable `job`
FACT_NAMES = tuple(PlatformFacts.model_fields)


def job_options(kind: str) -> pulumi.ResourceOptions:
    """How a job object changes: replaced, not updated, when a field the CRD or operator fixes changes."""
    if kind not in jobs.REPLACE_ON_CHANGES:
        return pulumi.ResourceOptions()
    return pulumi.ResourceOptions(
        replace_on_changes=jobs.REPLACE_ON_CHANGES[kind],
        delete_before_replace=kind in jobs.DELETE_BEFORE_REPLACE,
    )


def _k8s_resource(
    spec: TrainingJobSpec,
    obj: dict[str, Any],
    opts: pulumi.ResourceOptions,
    secrets: dict[str, Any] | None = None,
) -> pulumi.CustomResource:
    """One rendered object as the typed pulumi-kubernetes resource (custom resources generically).
    `secrets`: each Secret's value by its name (secret Outputs of the stack's secret config)."""
    kind, meta = obj["kind"], obj["metadata"]
    # The runtime's Kubernetes name follows its spec; its Pulumi name stays, so a change is a replacement.
    name = f"{spec.name if kind == 'TrainingRuntime' else meta['name']}-{kind.lower()}"
    opts = pulumi.ResourceOptions.merge(opts, job_options(kind))
    if kind == "Namespace":
        return k8s.core.v1.Namespace(name, metadata=meta, opts=opts)
    if kind == "ResourceQuota":
        return k8s.core.v1.ResourceQuota(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "ServiceAccount":
        automount = obj["automountServiceAccountToken"]
        return k8s.core.v1.ServiceAccount(
            name, metadata=meta, automount_service_account_token=automount, opts=opts
        )
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=obj["data"], opts=opts)
    if kind == "NetworkPolicy":
        return k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "Secret":  # a credential: the decrypted secret config, kept secret in Pulumi's state
        value = (secrets or {}).get(meta["name"])
        if value is None:
            raise SpecError(f"{spec.name}: Secret {meta['name']} has no value from the stack's secret config")
        data = {key: value for key in obj["stringData"]}  # one key, whose placeholder `render` printed
        return k8s.core.v1.Secret(name, metadata=meta, type=obj["type"], string_data=data, opts=opts)
    if kind == "PersistentVolumeClaim":
        return k8s.core.v1.PersistentVolumeClaim(name, metadata=meta, spec=obj["spec"], opts=opts)
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=kind, metadata=meta, spec=obj["spec"], opts=opts
    )


def with_creation_id(spec: TrainingJobSpec, obj: dict[str, Any]) -> dict[str, Any]:
    """The job with its pods' creation annotation (jobs.CREATION_ANNOTATION) set to a random id that Pulumi
    keeps as long as the job's identity: an update in place (suspend, TTL, deadline) keeps it, a changed job
    (replaced) or a new creation after `pulumi destroy` gets a new one, and with it a new restart count."""
    replicas = obj["spec"].get("pytorchReplicaSpecs") or {}
    annotations = [r["template"]["metadata"].get("annotations") or {} for r in replicas.values()]
    identities = {a[jobs.CREATION_ANNOTATION] for a in annotations if jobs.CREATION_ANNOTATION in a}
    if not identities:
        return obj
    (identity,) = identities
    creation = random.RandomUuid(f"{spec.name}-creation", keepers={"job": identity})
    stamped = copy.deepcopy(obj)
    for replica in stamped["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["metadata"]["annotations"][jobs.CREATION_ANNOTATION] = creation.result
    return stamped


def _identity(
    spec: TrainingJobSpec, facts: PlatformFacts, after: list[pulumi.Resource]
) -> list[pulumi.Resource]:
    """The job's IAM role and its Pod Identity association (only for jobs that use S3); `render` prints
    the same resources from workloads.identity.aws_resources."""
    if not spec.uses_s3:
        return []
    aws_provider = aws.Provider(f"{spec.name}-aws", region=facts.region)
    opts = pulumi.ResourceOptions(provider=aws_provider)
    # The association and the role live in the deployer's account: the cluster must be there too.
    account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(provider=aws_provider))
    cluster_arn = account.account_id.apply(
        lambda account_id: pod_identity.cluster_arn(
            partition=pod_identity.partition_of(facts.region),
            region=facts.region,
            account_id=account_id,
            cluster_name=facts.cluster_name,
        )
    )
    role = aws.iam.Role(
        f"{spec.name}-job",
        # Under the cluster's role path: the platform's bucket policy admits pod roles by it.
        path=pod_identity.role_path(facts.cluster_name),
        assume_role_policy=cluster_arn.apply(
            lambda arn: json.dumps(
                pod_identity.trust_policy(
                    cluster_arn=arn, namespace=spec.namespace_name, service_account=spec.name
                )
            )
        ),
        description=role_description(spec, facts),
        opts=opts,
    )
    policy = aws.iam.RolePolicy(
        f"{spec.name}-s3",
        role=role.id,
        policy=json.dumps(s3_policy(facts.bucket_name, pod.s3_prefix(spec), facts.region)),
        opts=opts,
    )
    association = aws.eks.PodIdentityAssociation(
        f"{spec.name}-pod-identity",
        cluster_name=facts.cluster_name,
        namespace=spec.namespace_name,
        service_account=spec.name,
        role_arn=role.arn,
        opts=pulumi.ResourceOptions(provider=aws_provider, depends_on=after),
    )
    return [role, policy, association]


def deploy(
    spec: TrainingJobSpec,
    facts: PlatformFacts,
    kubeconfig: pulumi.Input[str],
    secrets: dict[str, Any] | None = None,
) -> list[pulumi.Resource]:
    """Create the workload stack's resources; the job goes last, after its identity exists."""
    objects = render(spec, facts, program_text=program_text(spec))
    provider = k8s.Provider(f"{spec.name}-k8s", kubeconfig=kubeconfig)
    created: list[pulumi.Resource] = []
    identity: list[pulumi.Resource] = []
    for obj in objects:
        if obj["kind"] in ("TrainingRuntime", "TrainJob", "PyTorchJob", "MPIJob", "RayJob") and not identity:
            identity = _identity(spec, facts, after=created)
        # In render's order: the namespace first, the job after everything it mounts or runs as.
        opts = pulumi.ResourceOptions(provider=provider, depends_on=list(created) + identity)
        if obj["kind"] == "PyTorchJob":
            obj = with_creation_id(spec, obj)
        created.append(_k8s_resource(spec, obj, opts, secrets))
    return created + identity


def logs_command(spec: TrainingJobSpec) -> str:
    return (
        f"kubectl logs -n {spec.namespace_name} -l {JOB_LABEL}={spec.name} "
        "--all-containers --prefix --follow --max-log-requests 32"
    )


def hub_token(config: pulumi.Config, spec: TrainingJobSpec) -> pulumi.Output[str] | None:
    """The stack's secret config `hfToken` for a job with `hubToken: true`."""
    if not spec.hub_token:
        return None
    return _secret_config(
        config, HUB_TOKEN_CONFIG, f"{CONFIG_KEY}.hubToken is true", "<token>`, or hubToken false"
    )


def mlflow_credential(config: pulumi.Config, spec: TrainingJobSpec) -> pulumi.Output[str] | None:
    """The stack's secret config `mlflowCredential` for a job whose `mlflow.auth` is token or basic."""
    if spec.mlflow is None or spec.mlflow.auth == "none":
        return None
    needed = f"{CONFIG_KEY}.mlflow.auth is {spec.mlflow.auth}"
    return _secret_config(config, MLFLOW_CREDENTIAL_CONFIG, needed, "<token or password>`, or auth none")


def _secret_config(config: pulumi.Config, key: str, needed: str, allowed: str) -> pulumi.Output[str]:
    """A secret config value as a secret Output (encrypted in Pulumi's state, never printed); an unset or
    empty one fails the update before anything is made."""
    name = key.split(":")[1]
    missing = f"{needed} but the secret config {key} is not set; allowed: `pulumi config set --secret {name} "
    missing += allowed
    value = config.get_secret(name)
    if value is None:
        raise pulumi.RunError(missing)

    def present(text: str) -> str:
        if not text:
            raise pulumi.RunError(missing)
        return text

    return pulumi.Output.secret(value.apply(present))


def program() -> None:
    config = pulumi.Config()  # the project's namespace: mlops-eks:<key>
    try:
        platform_stack = platform_stack_ref(config.require(PLATFORM_STACK_KEY), pulumi.get_organization())
        spec = parse_spec(config.require_object("job"))
    except SpecError as err:
        raise pulumi.RunError(str(err)) from None
    ref = pulumi.StackReference(platform_stack)
    secrets = {
        pod.hub_token_secret(spec): hub_token(config, spec),
        pod.mlflow_secret(spec): mlflow_credential(config, spec),
    }
    secrets = {name: value for name, value in secrets.items() if value is not None}

    def facts_and_deploy(outputs: dict[str, Any]) -> int:
        try:
            facts = PlatformFacts.model_validate({k: v for k, v in outputs.items() if v is not None})
            return len(deploy(spec, facts, ref.require_output("kubeconfig"), secrets))
        except ValidationError as err:
            raise pulumi.RunError(
                f"platform stack {platform_stack}: its exports are not a platform's: {err}"
            ) from None
        except SpecError as err:
            raise pulumi.RunError(f"{err}\n(platform stack {platform_stack})") from None

    # Rendering needs the platform's facts as values (the pool decides the pod's shape), so the
    # resources are created once the StackReference's outputs are known — at preview time already.
    pulumi.Output.all(**{n: ref.get_output(n) for n in FACT_NAMES}).apply(facts_and_deploy)
    pulumi.export("job_name", spec.name)
    pulumi.export("namespace", spec.namespace_name)
    pulumi.export("logs_command", logs_command(spec))
    pulumi.export("grafana_dashboard_path", f"/d/{TRAINING_DASHBOARD_UID}?var-job={spec.name}")
