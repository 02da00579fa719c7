"""Karpenter 1.14: GPU and CPU nodes on demand, sized to the pending pods.

The controller's AWS identity is an IAM role bound to its service account with EKS Pod Identity, holding
the reference policies of `iam.py` (this package) scoped to this cluster. Nodes get their own role with an
`EC2_LINUX` access entry. Spot interruptions, rebalance recommendations, instance state changes, AWS
Health and capacity-reservation events reach the controller through an SQS queue fed by EventBridge.

Teardown order is dependency wiring: NodePools and EC2NodeClasses depend on the Helm release, so
`pulumi destroy` deletes them first while the controller still runs and terminates their instances;
the release depends on the cluster and its node groups, so it goes before them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.accelerators import CATALOG
from infra.addons import node_health
from infra.addons.gpu_node_check import startup_taints
from infra.addons.karpenter import iam
from infra.addons.karpenter.node_pools import (
    CPU_NODE_CLASS,
    NODE_CLASS_API,
    NVIDIA_NODE_CLASS,
    NodeClassFacts,
    cpu_node_pool,
    ec2_node_class,
    gpu_node_class_name,
    gpu_node_pool,
    placement_group_name,
)
from infra.addons.manifests import custom_resource
from infra.charts import release
from infra.component_args import ComponentArgs, child_options
from infra.config.addons import KarpenterConfig
from infra.config.platform import GpuPoolConfig
from infra.contract import PoolReservation
from infra.platform import pod_identity, session_manager
from infra.platform.image_cache import ImageCache

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "karpenter"


class KarpenterArgs(ComponentArgs):
    config: KarpenterConfig
    # The stack's `gpuPools` with source karpenter: one NodePool each.
    gpu_pools: Sequence[GpuPoolConfig] = ()
    cluster_name: pulumi.Output[str] | str
    region: str
    account_id: pulumi.Output[str] | str
    k8s_provider: k8s.Provider
    # Tags on the private subnets (karpenter.sh/discovery: <cluster>) and the cluster security group.
    subnet_tags: dict[str, str]
    # The private subnets, in AZ order, and the index of the one each EFA pool's nodes launch into: in
    # the AZ that offers its instance types (infra/platform/zones.py).
    private_subnet_ids: pulumi.Output[Any] | Sequence[str] = ()
    efa_subnet_index: dict[str, int] = {}
    security_group_id: pulumi.Output[str] | str
    partition: str = "aws"
    # Create a ServiceMonitor for the controller's metrics (needs the Prometheus Operator CRDs).
    service_monitor: bool = False
    # Karpenter's node repair (alpha; infra/addons/node_health.py) and the startup GPU check's taint on
    # NVIDIA NodePools (infra/addons/gpu_node_check.py).
    node_repair: bool = False
    gpu_check: bool = False
    # Session Manager on Karpenter's nodes (infra/platform/session_manager.py).
    session_manager: bool = True
    tags: dict[str, str] = {}
    images: ImageCache


# After the grace period: the instances' termination and Karpenter's finalizer on the NodeClaims.
NODE_TERMINATION_MARGIN_MINUTES = 15
_DURATION = re.compile(r"(\d+)(h|m|s)")


def delete_timeout(node_pool: dict[str, Any]) -> str:
    """How long `pulumi destroy` waits for a NodePool to go. Deleting it makes Karpenter drain and terminate
    its nodes first (its termination finalizer); a pod there gets the pool's terminationGracePeriod, where
    the pool sets one, before it is deleted. GPU pools set none, so their training pods
    (`karpenter.sh/do-not-disrupt`) are never evicted: the destroy then fails after the margin, naming the
    NodePool, and docs/deploy.md "Teardown" deletes the workload stacks first. The pool's grace (where set)
    plus the margin, in minutes."""
    grace = node_pool["spec"]["template"]["spec"].get("terminationGracePeriod") or "0s"
    seconds = sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in _DURATION.findall(grace))
    return f"{-(-seconds // 60) + NODE_TERMINATION_MARGIN_MINUTES}m"


def karpenter_values(
    *, cluster_name: str, queue_name: str, service_monitor: bool, node_repair: bool = False
) -> dict[str, Any]:
    """Helm values for the karpenter chart."""
    settings = {"clusterName": cluster_name, "interruptionQueue": queue_name}
    gates = node_health.karpenter_values(node_repair=node_repair)["settings"]["featureGates"]
    return {
        "serviceAccount": {"name": SERVICE_ACCOUNT},
        # ReservedCapacity is beta and on by default in 1.14.1 (values.yaml); stated so reserved pools keep
        # working when a chart upgrade changes the default.
        "settings": settings | {"featureGates": {**gates, "reservedCapacity": True}},
        "serviceMonitor": {"enabled": service_monitor},
        "controller": {
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        },
        "logLevel": "info",
    }


def _item(index: int) -> Callable[[Any], str]:
    return lambda ids: ids[index]


def _group_name(pool: GpuPoolConfig) -> Callable[[str], str]:
    return lambda cluster: placement_group_name(cluster, pool)


class Karpenter(pulumi.ComponentResource):
    """`opts.depends_on`: the cluster and its node groups. The controller starts after them and before its
    NodePools, and goes before them on destroy."""

    node_role: aws.iam.Role
    interruption_queue: aws.sqs.Queue
    release: k8s.helm.v3.Release
    node_classes: dict[str, k8s.apiextensions.CustomResource]
    node_pools: dict[str, k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Karpenter", name, None, opts)
        aws_opts = pulumi.ResourceOptions(parent=self)
        cfg = args.config

        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=json.dumps(iam.node_trust_policy()),
            tags=args.tags,
            opts=aws_opts,
        )
        for managed in iam.NODE_MANAGED_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{managed}",
                role=self.node_role.name,
                policy_arn=f"arn:{args.partition}:iam::aws:policy/{managed}",
                opts=aws_opts,
            )
        # The node role fills the platform's image cache (infra/platform/image_cache.py).
        aws.iam.RolePolicyAttachment(
            f"{name}-node-image-cache",
            role=self.node_role.name,
            policy_arn=args.images.node_policy_arn,
            opts=aws_opts,
        )
        if args.session_manager:
            session_manager.grant(f"{name}-node", self.node_role, aws_opts)
        access_entry = aws.eks.AccessEntry(
            f"{name}-node",
            cluster_name=args.cluster_name,
            principal_arn=self.node_role.arn,
            type="EC2_LINUX",
            tags=args.tags,
            opts=aws_opts,
        )

        self.interruption_queue = aws.sqs.Queue(
            f"{name}-interruption",
            message_retention_seconds=300,
            sqs_managed_sse_enabled=True,
            tags=args.tags,
            opts=aws_opts,
        )
        rules = {
            suffix: aws.cloudwatch.EventRule(
                f"{name}-{suffix}",
                event_pattern=json.dumps({"source": [source], "detail-type": [detail_type]}),
                tags=args.tags,
                opts=aws_opts,
            )
            for suffix, source, detail_type in iam.INTERRUPTION_EVENTS
        }
        # Only these rules may send (aws:SourceArn): the policy names them, the targets wait for it.
        queue_policy = aws.sqs.QueuePolicy(
            f"{name}-interruption",
            queue_url=self.interruption_queue.url,
            policy=pulumi.Output.all(self.interruption_queue.arn, *(r.arn for r in rules.values())).apply(
                lambda v: json.dumps(iam.interruption_queue_policy(v[0], list(v[1:])))
            ),
            opts=aws_opts,
        )
        for suffix, rule in rules.items():
            aws.cloudwatch.EventTarget(
                f"{name}-{suffix}",
                rule=rule.name,
                target_id="KarpenterInterruptionQueueTarget",
                arn=self.interruption_queue.arn,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[queue_policy]),
            )

        controller_role = aws.iam.Role(
            f"{name}-controller",
            assume_role_policy=pulumi.Output.all(args.account_id, args.cluster_name).apply(
                lambda v: json.dumps(
                    pod_identity.trust_policy(
                        cluster_arn=pod_identity.cluster_arn(
                            partition=args.partition, region=args.region, account_id=v[0], cluster_name=v[1]
                        ),
                        namespace=NAMESPACE,
                        service_account=SERVICE_ACCOUNT,
                    )
                )
            ),
            tags=args.tags,
            opts=aws_opts,
        )
        documents = pulumi.Output.all(
            args.cluster_name, args.account_id, self.node_role.arn, self.interruption_queue.arn
        ).apply(
            lambda v: iam.controller_policies(
                partition=args.partition,
                region=args.region,
                account_id=v[1],
                cluster_name=v[0],
                node_role_arn=v[2],
                queue_arn=v[3],
            )
        )
        attachments = []
        for suffix in iam.CONTROLLER_POLICY_NAMES:
            policy = aws.iam.Policy(
                f"{name}-{suffix}",
                policy=documents[suffix].apply(json.dumps),
                tags=args.tags,
                opts=aws_opts,
            )
            attachments.append(
                aws.iam.RolePolicyAttachment(
                    f"{name}-{suffix}", role=controller_role.name, policy_arn=policy.arn, opts=aws_opts
                )
            )
        identity = aws.eks.PodIdentityAssociation(
            f"{name}-controller",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=controller_role.arn,
            tags=args.tags,
            opts=aws_opts,
        )

        values = pulumi.Output.all(args.cluster_name, self.interruption_queue.name).apply(
            lambda v: karpenter_values(
                cluster_name=v[0],
                queue_name=v[1],
                service_monitor=args.service_monitor,
                node_repair=args.node_repair,
            )
        )
        self.release = release(
            "karpenter",
            "karpenter",
            NAMESPACE,
            values,
            child_options(
                self, opts, provider=args.k8s_provider, depends_on=[identity, access_entry, *attachments]
            ),
            images=args.images,
        )

        facts_inputs = (args.cluster_name, self.node_role.name, args.subnet_tags, args.security_group_id)
        self.node_classes = {}
        self.placement_groups: dict[str, aws.ec2.PlacementGroup] = {}
        self.node_pools = {}
        # Deleted before the release (they depend on it): the controller must still run to drain and
        # terminate their nodes.
        cr_opts = pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=[self.release])

        def node_class(
            class_name: str,
            ami_id: str | None = None,
            subnet_id: pulumi.Input[str] | None = None,
            placement_group: pulumi.Input[str] | None = None,
            reservation: PoolReservation | None = None,
        ) -> None:
            def render(v: list[Any]) -> dict[str, Any]:
                shared = NodeClassFacts(
                    cluster_name=v[0],
                    node_role_name=v[1],
                    subnet_tags=v[2],
                    security_group_id=v[3],
                    ami_alias=cfg.ami_alias,
                    root_volume_gib=cfg.root_volume_gib,
                    tags=args.tags,
                )
                body = ec2_node_class(
                    class_name,
                    shared,
                    ami_id=ami_id,
                    subnet_id=v[4],
                    placement_group=v[5],
                    reservation=reservation,
                )
                return body["spec"]

            self.node_classes[class_name] = custom_resource(
                f"{name}-class-{class_name}",
                {"apiVersion": NODE_CLASS_API, "kind": "EC2NodeClass", "metadata": {"name": class_name}},
                cr_opts,
                spec=pulumi.Output.all(*facts_inputs, subnet_id, placement_group).apply(render),
            )

        gpu_pools = [p for p in args.gpu_pools if p.source == "karpenter"]
        if any(gpu_node_class_name(p) == NVIDIA_NODE_CLASS for p in gpu_pools):
            node_class(NVIDIA_NODE_CLASS)
        for pool in gpu_pools:
            reservation = pool.reservation.contract() if pool.reservation else None
            if CATALOG[pool.accelerator].vendor == "amd":
                node_class(gpu_node_class_name(pool), pool.ami_id, reservation=reservation)
            elif pool.efa:
                group = aws.ec2.PlacementGroup(
                    f"{name}-pg-{pool.name}",
                    name=pulumi.Output.from_input(args.cluster_name).apply(_group_name(pool)),
                    strategy="cluster",
                    tags=args.tags,
                    opts=pulumi.ResourceOptions(parent=self),
                )
                self.placement_groups[pool.name] = group
                index = args.efa_subnet_index[pool.name]
                subnet = pulumi.Output.from_input(args.private_subnet_ids).apply(_item(index))
                node_class(
                    gpu_node_class_name(pool),
                    subnet_id=subnet,
                    placement_group=group.name,
                    reservation=reservation,
                )
            elif reservation is not None:
                node_class(gpu_node_class_name(pool), reservation=reservation)
        if cfg.cpu_pool.enabled:
            node_class(CPU_NODE_CLASS)

        pool_bodies = [
            gpu_node_pool(p, startup_taints=startup_taints(p.accelerator, enabled=args.gpu_check))
            for p in gpu_pools
        ]
        if cfg.cpu_pool.enabled:
            pool_bodies.append(cpu_node_pool(cfg.cpu_pool))
        for body in pool_bodies:
            pool_name = body["metadata"]["name"]
            node_class_ref = self.node_classes[body["spec"]["template"]["spec"]["nodeClassRef"]["name"]]
            timeouts = pulumi.CustomTimeouts(delete=delete_timeout(body))
            self.node_pools[pool_name] = custom_resource(
                f"{name}-pool-{pool_name}",
                body,
                pulumi.ResourceOptions.merge(
                    cr_opts, pulumi.ResourceOptions(depends_on=[node_class_ref], custom_timeouts=timeouts)
                ),
            )

        self.register_outputs(
            {
                "node_role_arn": self.node_role.arn,
                "interruption_queue": self.interruption_queue.name,
                "node_pools": list(self.node_pools),
            }
        )
