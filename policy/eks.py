"""EKS control plane and node rules, on the engine's child resources (aws:eks/*, aws:ec2/launchTemplate,
Karpenter objects) and on the pulumi-eks component inputs (what the program itself registers of eks.Cluster
and eks.ManagedNodeGroup; their children come from the provider)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from infra.accelerators import ACCELERATOR_LABEL, CATALOG, Accelerator
from infra.config.cluster_rules import (
    DEPLOY_FROM_VPC_TAG,
    MINIMUM_KUBERNETES_VERSION,
    PRIVATE_ONLY_REASON,
    PUBLIC_CIDR_MIN_PREFIX,
    public_cidrs_problem,
)
from policy.core import Rule, as_list, dig

AWS_CLUSTER = "aws:eks/cluster:Cluster"
EKS_CLUSTER = "eks:index:Cluster"
AWS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_NODE_GROUP = "eks:index:ManagedNodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# Anything else that starts an EC2 instance with its own metadataOptions (same shape as a template's).
INSTANCES = (
    "aws:ec2/instance:Instance",
    "aws:ec2/spotInstanceRequest:SpotInstanceRequest",
    "aws:ec2/launchConfiguration:LaunchConfiguration",
)
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"

LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# Oldest Kubernetes minor the platform supports (infra/config/cluster_rules.py, shared with the config
# checks).
MINIMUM_VERSION = MINIMUM_KUBERNETES_VERSION
OPEN_CIDRS = ("0.0.0.0/0", "::/0")


def _endpoint(type_: str, inputs: Mapping[str, Any]) -> tuple[bool, bool, list[str]]:
    """(private on, public on, public CIDRs) with the AWS / pulumi-eks defaults filled in:
    public access defaults to on and, when on, to 0.0.0.0/0."""
    src = inputs if type_ == EKS_CLUSTER else dig(inputs, "vpcConfig", default={})
    private = bool(dig(src, "endpointPrivateAccess", default=False))
    public = bool(dig(src, "endpointPublicAccess", default=True))
    cidrs = [str(c) for c in as_list(dig(src, "publicAccessCidrs"))] or ["0.0.0.0/0"]
    return private, public, cidrs


def check_secrets_encryption(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == EKS_CLUSTER:
        if not dig(inputs, "encryptionConfigKeyArn"):
            yield "encryptionConfigKeyArn is not set: Kubernetes secrets are not envelope-encrypted with KMS"
        return
    configs = as_list(dig(inputs, "encryptionConfig"))
    if not any("secrets" in as_list(dig(c, "resources")) and dig(c, "provider", "keyArn") for c in configs):
        yield "encryptionConfig does not encrypt the `secrets` resource with a KMS key (provider.keyArn)"


def check_control_plane_logs(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    enabled = {str(t) for t in as_list(dig(inputs, "enabledClusterLogTypes"))}
    missing = [t for t in LOG_TYPES if t not in enabled]
    if missing:
        yield f"enabledClusterLogTypes lacks {', '.join(missing)} (required: {', '.join(LOG_TYPES)})"


def check_endpoint_not_open(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    private, public, cidrs = _endpoint(type_, inputs)
    if not private:
        yield "endpointPrivateAccess is off: nodes reach the API server through the internet"
    if public:
        open_ = [c for c in cidrs if c in OPEN_CIDRS]
        if open_:
            yield f"the public endpoint is open to {', '.join(open_)} (publicAccessCidrs={cidrs})"
        elif problem := public_cidrs_problem(cidrs, "dev"):
            yield f"publicAccessCidrs {cidrs}: {problem}"


def _cluster_tags(type_: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
    tags = dict(dig(inputs, "tags", default={}))
    return {**tags, **dig(inputs, "clusterTags", default={})} if type_ == EKS_CLUSTER else tags


def check_prod_endpoint(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Prod: the public endpoint admits only the deployer's narrow CIDRs; private-only only when the
    cluster is tagged as deployed from inside the VPC (config deployFromVpc)."""
    _, public, cidrs = _endpoint(type_, inputs)
    if public:
        if problem := public_cidrs_problem(cidrs, "prod"):
            yield f"publicAccessCidrs {cidrs}: {problem}"
    elif str(_cluster_tags(type_, inputs).get(DEPLOY_FROM_VPC_TAG, "")).lower() != "true":
        yield (
            f"the endpoint is private-only and the cluster lacks the tag {DEPLOY_FROM_VPC_TAG}=true: "
            f"{PRIVATE_ONLY_REASON}"
        )


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def check_version(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    version = dig(inputs, "version")
    if version is None:
        yield "version is not set: the cluster gets whatever EKS defaults to and upgrades are unplanned"
        return
    got, floor = _minor(str(version)), _minor(MINIMUM_VERSION)
    if got is None or floor is None or got < floor:
        yield f"version {version!r} is not supported; use {MINIMUM_VERSION} or newer"


def check_launch_template_imds(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    options = dig(inputs, "metadataOptions", default={})
    if dig(options, "httpEndpoint") == "disabled":
        return  # no metadata service at all is stricter than IMDSv2
    tokens = dig(options, "httpTokens")
    if tokens != "required":
        yield f"metadataOptions.httpTokens is {tokens!r}, not 'required' (IMDSv1 is allowed)"
    if dig(options, "httpPutResponseHopLimit") != 1:
        yield (
            f"metadataOptions.httpPutResponseHopLimit is {dig(options, 'httpPutResponseHopLimit')!r}, not 1: "
            "pods could read the node role's credentials"
        )


def check_node_group_imds(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    # Only a launch template can set the hop limit; without one EKS (and pulumi-eks' enableIMDSv2)
    # apply their own metadata options. The template itself is checked by the launch-template rule.
    if not dig(inputs, "launchTemplate"):
        yield "no launchTemplate: IMDSv2 with hop limit 1 cannot be enforced on this node group"


def check_node_class_imds(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    # Karpenter's CRD defaults (httpTokens required, hop limit 1) apply to fields left out.
    options = dig(inputs, "spec", "metadataOptions", default={})
    if dig(options, "httpEndpoint", default="enabled") == "disabled":
        return
    if dig(options, "httpTokens", default="required") != "required":
        yield f"spec.metadataOptions.httpTokens is {dig(options, 'httpTokens')!r}, not 'required'"
    hops = dig(options, "httpPutResponseHopLimit", default=1)
    if hops != 1:
        yield f"spec.metadataOptions.httpPutResponseHopLimit is {hops!r}, not 1"


def check_no_ssh(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    if type_ == EKS_CLUSTER:
        if dig(inputs, "nodePublicKey"):
            yield "nodePublicKey is set: the default node group accepts SSH"
    elif type_ == LAUNCH_TEMPLATE:
        if dig(inputs, "keyName"):
            yield f"keyName {dig(inputs, 'keyName')!r} is set: nodes accept SSH with that key pair"
    elif dig(inputs, "remoteAccess"):
        yield "remoteAccess is set: nodes accept SSH"


_BY_FAMILY: dict[str, Accelerator] = {f: a for a in CATALOG.values() for f in a.instance_families}


def gpu_accelerator(inputs: Mapping[str, Any]) -> Accelerator | None:
    """The catalog accelerator a node group's instance types (or GPU labels) belong to, if any."""
    for name in as_list(dig(inputs, "instanceTypes")):
        acc = _BY_FAMILY.get(str(name).split(".", 1)[0])
        if acc:
            return acc
    key = dig(inputs, "labels", ACCELERATOR_LABEL)
    return CATALOG.get(key) if isinstance(key, str) else None


def check_gpu_taint(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    acc = gpu_accelerator(inputs)
    if acc is None:
        return
    want = acc.taint
    for t in as_list(dig(inputs, "taints")):
        effect = str(dig(t, "effect", default="")).replace("_", "").lower()
        if dig(t, "key") == want.key and dig(t, "value") == want.value and effect == want.effect.lower():
            return
    yield f"GPU ({acc.key}) node group lacks the taint {want.key}={want.value}:{want.effect}"


def check_gpu_min_zero(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """Elastic GPU capacity is Karpenter's and must return to zero; a managed GPU group is reserved
    capacity of a fixed size, because nothing scales managed groups (Karpenter ignores them and no
    cluster-autoscaler runs): one at minSize 0 < maxSize never gets a node (infra/contract.py)."""
    if type_ == NODE_POOL:
        limits = dig(inputs, "spec", "limits", default={}) or {}
        if any(a.resource_name in limits for a in CATALOG.values()):
            after = dig(inputs, "spec", "disruption", "consolidateAfter")
            if after == "Never":
                yield "GPU NodePool has disruption.consolidateAfter Never: empty GPU nodes are never removed"
        return
    acc = gpu_accelerator(inputs)
    if acc is None:
        return
    low, high = dig(inputs, "scalingConfig", "minSize"), dig(inputs, "scalingConfig", "maxSize")
    if low != high:
        yield (
            f"GPU ({acc.key}) managed node group scales between minSize={low!r} and maxSize={high!r}, "
            "but nothing scales managed groups: make it an elastic Karpenter pool (gpuPools source "
            "karpenter) or a fixed-size reserved pool (source managed, size)"
        )


def check_node_pool_gpu_taint(type_: str, inputs: Mapping[str, Any]) -> Iterator[str]:
    """A NodePool that can launch GPU instances must taint them, or CPU pods land on GPU nodes."""
    spec = dig(inputs, "spec", "template", "spec", default={})
    values: set[str] = {str(dig(inputs, "spec", "template", "metadata", "labels", ACCELERATOR_LABEL))}
    for req in as_list(dig(spec, "requirements")):
        if dig(req, "operator") == "In":  # instance types, families or accelerator keys
            values.update(
                v for value in as_list(dig(req, "values")) for v in (str(value), str(value).split(".")[0])
            )
    accs = {a.key: a for a in CATALOG.values() if a.key in values or values & set(a.instance_families)}
    taints = {(dig(t, "key"), dig(t, "effect")) for t in as_list(dig(spec, "taints"))}
    for acc in accs.values():
        if (acc.taint.key, acc.taint.effect) not in taints:
            yield f"NodePool can launch {acc.key} GPUs but does not taint them {acc.taint.key}:NoSchedule"


CLUSTERS = (AWS_CLUSTER, EKS_CLUSTER)
NODE_GROUPS = (AWS_NODE_GROUP, EKS_NODE_GROUP)

RULES = (
    Rule(
        name="eks-secrets-encryption",
        description="EKS clusters envelope-encrypt Kubernetes secrets with a KMS key.",
        remediation="Pass the cluster KMS key: eks.Cluster(encryption_config_key_arn=key.arn) "
        "(aws.eks.Cluster: encryption_config={'provider': {'key_arn': ...}, 'resources': ['secrets']}).",
        level="mandatory",
        severity="high",
        types=CLUSTERS,
        check=check_secrets_encryption,
    ),
    Rule(
        name="eks-control-plane-logs",
        description="EKS clusters send all five control-plane log types to CloudWatch.",
        remediation=f"Set enabled_cluster_log_types={list(LOG_TYPES)}.",
        level="mandatory",
        severity="medium",
        types=CLUSTERS,
        check=check_control_plane_logs,
    ),
    Rule(
        name="eks-endpoint-not-open",
        description="The EKS API endpoint is private-enabled and never public to 0.0.0.0/0.",
        remediation="Set endpoint_private_access=True and limit public_access_cidrs to your office/VPN "
        f"CIDRs, /{PUBLIC_CIDR_MIN_PREFIX['dev']} or narrower (config mlops-eks:publicAccessCidrs), or turn "
        "endpoint_public_access off.",
        level="mandatory",
        severity="critical",
        types=CLUSTERS,
        check=check_endpoint_not_open,
    ),
    Rule(
        name="eks-prod-endpoint-deployer-only",
        description="In prod the EKS API's public endpoint admits only the deployer's CIDRs "
        f"(/{PUBLIC_CIDR_MIN_PREFIX['prod']} or narrower); a private-only endpoint needs the deployer "
        "inside the VPC.",
        remediation="List only your deployer's egress CIDRs "
        f"(/{PUBLIC_CIDR_MIN_PREFIX['prod']} or narrower) in mlops-eks:publicAccessCidrs, or set "
        "endpointPublicAccess: false with mlops-eks:deployFromVpc: true when pulumi runs inside the VPC "
        "(CI runner, bastion).",
        level="mandatory",
        severity="high",
        types=CLUSTERS,
        check=check_prod_endpoint,
        scope="prod",
    ),
    Rule(
        name="eks-supported-version",
        description=f"EKS clusters pin a supported Kubernetes version ({MINIMUM_VERSION} or newer).",
        remediation=f"Set mlops-eks:kubernetesVersion to {MINIMUM_VERSION} or newer and upgrade one minor "
        "at a time.",
        level="mandatory",
        severity="medium",
        types=CLUSTERS,
        check=check_version,
    ),
    Rule(
        name="nodes-imdsv2-hop-limit-1",
        description="Nodes and instances require IMDSv2 with a PUT response hop limit of 1, so pods cannot "
        "take the node role's credentials (launch templates, instances, spot requests, launch "
        "configurations, node groups, Karpenter EC2NodeClasses).",
        remediation="Give node groups a launch template with metadata_options={'http_tokens': 'required', "
        "'http_put_response_hop_limit': 1}; in EC2NodeClasses keep metadataOptions.httpTokens=required "
        "and httpPutResponseHopLimit=1 (the Karpenter defaults).",
        level="mandatory",
        severity="high",
        types=(LAUNCH_TEMPLATE, *INSTANCES, *NODE_GROUPS, EC2_NODE_CLASS),
        check=lambda t, i: {
            LAUNCH_TEMPLATE: check_launch_template_imds,
            EC2_NODE_CLASS: check_node_class_imds,
            **dict.fromkeys(INSTANCES, check_launch_template_imds),
        }.get(t, check_node_group_imds)(t, i),
    ),
    Rule(
        name="nodes-no-ssh",
        description="Nodes accept no SSH: no remote access, key pair or node public key.",
        remediation="Remove remote_access / key_name / node_public_key; use SSM Session Manager or "
        "`kubectl debug node/...` instead.",
        level="mandatory",
        severity="high",
        types=(*NODE_GROUPS, LAUNCH_TEMPLATE, EKS_CLUSTER),
        check=check_no_ssh,
    ),
    Rule(
        name="gpu-nodes-tainted",
        description="GPU node groups and NodePools carry the accelerator's GPU taint "
        "(nvidia.com/gpu or amd.com/gpu = true:NoSchedule), so only GPU pods are scheduled there.",
        remediation="Add taints=[{'key': acc.taint.key, 'value': 'true', 'effect': 'NO_SCHEDULE'}] from "
        "infra.accelerators.CATALOG (NodePools: spec.template.spec.taints with effect NoSchedule).",
        level="mandatory",
        severity="medium",
        types=(*NODE_GROUPS, NODE_POOL),
        check=lambda t, i: (check_node_pool_gpu_taint if t == NODE_POOL else check_gpu_taint)(t, i),
    ),
    Rule(
        name="gpu-node-groups-scale-to-zero",
        description="Elastic GPU pools scale to zero: GPU NodePools remove empty nodes; a managed GPU node "
        "group (which nothing scales) is a fixed-size reserved pool.",
        remediation="In mlops-eks:gpuPools use source karpenter (gpuLimit, consolidateAfter not Never) for "
        "elastic GPUs, or source managed with a size for reserved ones.",
        level="mandatory",
        severity="low",
        types=(*NODE_GROUPS, NODE_POOL),
        check=check_gpu_min_zero,
        scope="non-prod",
    ),
    Rule(
        name="gpu-node-groups-scale-to-zero-prod",
        description="In prod, as gpu-node-groups-scale-to-zero (advisory: a deliberately warm pool may be "
        "worth its cost in prod).",
        remediation="As gpu-node-groups-scale-to-zero; record in the config why a pool stays warm.",
        level="advisory",
        severity="low",
        types=(*NODE_GROUPS, NODE_POOL),
        check=check_gpu_min_zero,
        scope="prod",
    ),
)
