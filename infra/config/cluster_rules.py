"""What the platform allows for the EKS control plane: Kubernetes versions, API endpoint exposure and
cluster admins. Pure data and functions (no Pulumi), shared by `infra.config.platform` (which refuses a stack
before any resource exists) and the `policy` pack (which checks the same rules on what was planned).
"""

from __future__ import annotations

import ipaddress
import re
from datetime import date
from typing import NamedTuple

from infra.accelerators import EKS_CONTROL_PLANE_USD_PER_HOUR, EKS_EXTENDED_SUPPORT_USD_PER_HOUR

# EKS Kubernetes minors the platform is validated with, and when EKS standard support ends (after it,
# extended support bills six times the control-plane fee). Sources, looked up 2026-11-23 in stored
# copies: the EKS release calendar (docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html,
# awsdocs/amazon-eks-user-guide: 1.33 ends 2026-07-29) and endoflife.date/amazon-eks (copy of
# 2026-02: 1.34 ends 2026-12-02; 1.35 released 2026-01-28, ends 2027-03-27). No source seen lists an
# EKS 1.36 release or Karpenter support for it; Karpenter 1.9 and later support Kubernetes up to 1.35
# (endoflife.date/karpenter, copy of 2026-05-09). The other pinned charts set no upper bound (their
# Chart.yaml kubeVersion is ">=" only or absent). EKS add-ons are not pinned: EKS installs each
# add-on's default version for the cluster's Kubernetes version.
EKS_STANDARD_SUPPORT_END = {
    "1.33": "2026-07-29",
    "1.34": "2026-12-02",
    "1.35": "2027-03-27",
}
DEFAULT_KUBERNETES_VERSION = "1.35"


def in_extended_support(version: str, today: date) -> bool:
    """Whether EKS bills `version` at the extended-support rate on `today`."""
    return today > date.fromisoformat(EKS_STANDARD_SUPPORT_END[version])


def extended_support_notice(version: str, today: date) -> str | None:
    """What a preview and an update say about a version past its standard support, or None."""
    if not in_extended_support(version, today):
        return None
    newest = max(EKS_STANDARD_SUPPORT_END, key=lambda v: int(v.split(".")[1]))
    extra = (EKS_EXTENDED_SUPPORT_USD_PER_HOUR - EKS_CONTROL_PLANE_USD_PER_HOUR) * 730
    return (
        f"mlops-eks:kubernetesVersion: {version!r} left EKS standard support on "
        f"{EKS_STANDARD_SUPPORT_END[version]}: EKS bills this cluster extended support, "
        f"${EKS_EXTENDED_SUPPORT_USD_PER_HOUR:.2f} per hour instead of ${EKS_CONTROL_PLANE_USD_PER_HOUR:.2f} "
        f"(about ${extra:.0f} more a month); "
        f"upgrade one minor at a time towards {newest!r}"
    )


MINIMUM_KUBERNETES_VERSION = "1.33"

# The regions that offer EKS, per partition: botocore 1.44.5's endpoint data (boto3.Session()
# .get_available_regions("eks", partition_name=...) for aws, aws-us-gov and aws-cn; the boto3 pin of the
# train extra; tests/faults/test_bad_input_platform.py keeps the two equal). A region added later needs a
# line here: an unknown name is more often a typo (us-east-9) than a region newer than botocore.
EKS_REGIONS = (
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "cn-north-1",
    "cn-northwest-1",
)

# The address ranges a VPC may use without hiding internet addresses from it: RFC 1918 and the shared
# address space (RFC 6598), the ranges AWS documents for VPC IPv4 CIDR blocks.
PRIVATE_RANGES = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
)

# The widest public-endpoint CIDR each environment accepts. Prod admits only the deployer's own
# addresses (a VPN or NAT egress: /24 or narrower); dev admits an office block, never the internet.
PUBLIC_CIDR_MIN_PREFIX = {"prod": 24, "dev": 16}
DEPLOY_FROM_VPC_TAG = "mlops-eks:deploy-from-vpc"
PRIVATE_ONLY_REASON = (
    "with only the private endpoint the API server is reachable from inside the VPC alone, and "
    "`pulumi up` installs the Helm releases and custom resources through it from the machine that runs it"
)


def public_cidr_problem(cidr: str, environment: str) -> str | None:
    """Why `cidr` may not reach the public endpoint in `environment`, or None when it may."""
    if "/" not in cidr:
        # Python reads "198.51.100.7" as a /32; EKS's UpdateClusterConfig and CreateCluster refuse a
        # publicAccessCidrs entry without a prefix length (InvalidParameterException), after the VPC exists.
        return "a bare IP address, which EKS refuses: write it as a CIDR (e.g. 198.51.100.7/32)"
    try:
        net = ipaddress.ip_network(cidr)
    except ValueError:
        return "not a network in CIDR notation (e.g. 198.51.100.7/32)"
    bound = PUBLIC_CIDR_MIN_PREFIX["prod" if environment == "prod" else "dev"]
    if net.prefixlen == 0:
        return "the whole internet: no environment exposes the Kubernetes API to it"
    if net.version == 4 and net.prefixlen < bound:
        return f"wider than /{bound}: {environment} admits only narrow deployer/office CIDRs"
    if net.version == 6:
        return "EKS publicAccessCidrs are IPv4 only"
    return None


def public_cidrs_problem(cidrs: list[str], environment: str) -> str | None:
    """Why the public CIDRs may not reach the endpoint together, or None. Each CIDR is checked alone
    (public_cidr_problem) and so is their union: [0.0.0.0/1, 128.0.0.0/1] or four /2s are the whole
    internet, and two adjacent /17s are a /16, so the union may not admit more addresses than one
    block of the environment's widest prefix (it is that block, or narrower pieces of it)."""
    nets = []
    for cidr in cidrs:
        if problem := public_cidr_problem(cidr, environment):
            return f"{cidr}: {problem}"
        nets.append(ipaddress.ip_network(cidr))
    union = list(ipaddress.collapse_addresses(n for n in nets if n.version == 4))
    size = sum(n.num_addresses for n in union)
    blocks = ", ".join(map(str, union))
    if size == 2**32:
        return f"together they are the whole internet ({blocks})"
    bound = PUBLIC_CIDR_MIN_PREFIX["prod" if environment == "prod" else "dev"]
    if size > 2 ** (32 - bound):
        return (
            f"together they admit {size} addresses ({blocks}), more than one /{bound}: {environment} "
            "admits only narrow deployer/office CIDRs"
        )
    return None


class Principal(NamedTuple):
    partition: str
    account: str
    kind: str  # "role" or "user"
    name: str  # without the IAM path: names are unique per account and kind


_IAM = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):(role|user)/(?:[\w+=,.@-]+/)*([\w+=,.@-]+)$")
_ASSUMED = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/[\w+=,.@-]+$")


def iam_principal(arn: str) -> Principal | None:
    """The IAM role or user behind an ARN. An STS session ARN (`assumed-role/ROLE/SESSION`, what
    `aws sts get-caller-identity` shows for a role) maps to its role; role paths (SSO roles live under
    `aws-reserved/sso.amazonaws.com/`) do not take part, as STS session ARNs omit them."""
    if m := _IAM.match(arn):
        return Principal(m[1], m[2], m[3], m[4])
    if m := _ASSUMED.match(arn):
        return Principal(m[1], m[2], "role", m[3])
    return None


def is_access_entry_principal(arn: str) -> bool:
    """EKS access entries take IAM role or user ARNs, not STS session ARNs."""
    return _IAM.match(arn) is not None


def has_cluster_access(caller_arn: str, creator_arn: str, admin_arns: list[str]) -> bool:
    """Whether the identity running pulumi can reach the Kubernetes API: it created the cluster (EKS's
    creator entry) or has an access entry from adminPrincipalArns."""
    caller = iam_principal(caller_arn)
    if caller is None:  # not a role or user ARN (a federated user): nothing to compare, EKS decides
        return True
    return caller == iam_principal(creator_arn) or any(caller == iam_principal(arn) for arn in admin_arns)


def creator_conflicts(admin_arns: list[str], caller_arn: str) -> list[int]:
    """Indexes of `admin_arns` that name the identity deploying the cluster. EKS already gives the
    cluster creator an admin access entry (pulumi-eks always sets bootstrapClusterCreatorAdminPermissions:
    true, nodejs/eks/cluster/cluster.ts; pulumi/pulumi-eks#2373), so a second entry for it fails."""
    caller = iam_principal(caller_arn)
    return [i for i, arn in enumerate(admin_arns) if caller is not None and iam_principal(arn) == caller]
