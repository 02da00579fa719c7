"""The EKS control plane (pulumi-eks `eks.Cluster`) and the managed add-ons that need running nodes.

`Cluster` creates the secrets KMS key, the node role the managed groups share, the control-plane log group
(before the cluster, so EKS writes into it), the cluster and its Kubernetes provider. `ManagedAddons`
installs CoreDNS and the EBS CSI driver once the system nodes exist, then the default gp3 StorageClass.
aws-node gets its credentials from its own Pod Identity role (`node_prerequisites`: every node group waits
for it), because pulumi-eks's vpc-cni add-on takes only an IRSA role (nodejs/eks/cluster/cluster.ts).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_command as command
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra.addons import node_health
from infra.component_args import ComponentArgs, child_options
from infra.config.cluster_rules import DEPLOY_FROM_VPC_TAG
from infra.pins import NODE_MONITORING_AGENT_VERSION
from infra.platform import keys, pod_identity, session_manager
from infra.platform.creator import CREATOR_TAG

LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
# EKS's own default service CIDR, set explicitly because custom-AMI nodes are told it at bootstrap.
SERVICE_CIDR = "172.20.0.0/16"
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
GP3 = "gp3"  # the default StorageClass, on the EBS CSI driver
# How long `pulumi destroy` waits for the driver to delete the class's volumes (each takes seconds).
VOLUME_WAIT = "15m"
# Run by `pulumi destroy` (pulumi-command's local Command, on the deployer's machine, with kubectl and the
# AWS CLI of docs/deploy.md "Prerequisites and steps"): every PV of the class, until the driver deleted it.
VOLUMES_RELEASED_SCRIPT = r"""set -eu
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
printf '%s' "$KUBECONFIG_JSON" > "$kubeconfig"
export KUBECONFIG="$kubeconfig"
of_class="{range .items[?(@.spec.storageClassName==\"$STORAGE_CLASS\")]}{.metadata.name}{' '}{end}"
volumes=$(kubectl get pv -o "jsonpath=$of_class")
if [ -n "$volumes" ]; then
  echo "waiting up to $TIMEOUT for the EBS CSI driver to delete: $volumes"
  kubectl wait --for=delete --timeout="$TIMEOUT" pv $volumes
fi
"""
# The VPC CNI's service account (the vpc-cni add-on's DaemonSet aws-node runs as it).
VPC_CNI_SERVICE_ACCOUNT = "aws-node"
# No AmazonEKS_CNI_Policy: the VPC CNI has its own Pod Identity role (module docstring). Session Manager
# (instead of SSH) is an inline policy of its own actions (infra/platform/session_manager.py).
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")


def assume_role_policy(service: str, actions: tuple[str, ...] = ("sts:AssumeRole",), **condition) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions)}
    if condition:
        statement["Condition"] = condition
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def pod_identity_trust_policy(cluster_arn: str, namespace: str, service_account: str) -> str:
    trust = pod_identity.trust_policy(
        cluster_arn=cluster_arn, namespace=namespace, service_account=service_account
    )
    return json.dumps(trust)


class ClusterArgs(ComponentArgs):
    cluster_name: str
    partition: str
    kubernetes_version: str
    vpc_id: pulumi.Output[str]
    private_subnet_ids: pulumi.Output[list[str]]
    public_subnet_ids: pulumi.Output[list[str]]
    endpoint_public_access: bool
    public_access_cidrs: list[str]
    # Recorded on the cluster as a tag, so the policy pack sees why a private-only prod API is legal.
    deploy_from_vpc: bool = False
    # Where a deploy-from-VPC runner lives: 443 on the cluster security group is opened to these.
    deployer_cidrs: list[str] = []
    admin_principal_arns: list[str]
    region: str
    account_id: pulumi.Output[str] | str
    # The stack's KMS key (infra/platform/keys.py) for the control-plane log group, and how long logs
    # are kept.
    log_key_arn: pulumi.Output[str] | str
    log_retention_days: int
    # Who creates the cluster, recorded on it (infra/platform/creator.py): EKS makes that identity admin.
    creator_arn: str
    # Session Manager on the managed groups' nodes (infra/platform/session_manager.py).
    session_manager: bool = True
    tags: dict[str, str]


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes secrets in {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=args.tags,
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-secrets", name=f"alias/{args.cluster_name}-secrets", target_key_id=key.key_id, opts=child
        )

        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            # Managed node groups only: Karpenter's nodes have their own role (addons/karpenter/).
            description=f"Worker nodes of {args.cluster_name}'s managed node groups",
            tags=args.tags,
            opts=child,
        )
        for policy in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.node_role.name,
                policy_arn=f"arn:{args.partition}:iam::aws:policy/{policy}",
                opts=child,
            )
        if args.session_manager:
            session_manager.grant(f"{name}-node", self.node_role, child)

        # Created before the cluster: EKS would otherwise create the group itself, unencrypted and
        # never expiring, and then leave it behind on destroy.
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=keys.eks_log_group_name(args.cluster_name),
            retention_in_days=args.log_retention_days,
            kms_key_id=args.log_key_arn,
            tags=args.tags,
            opts=child,
        )

        admin_policy = f"arn:{args.partition}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            private_subnet_ids=args.private_subnet_ids,
            public_subnet_ids=args.public_subnet_ids,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            # EKS creates each managed group's EC2_LINUX access entry itself; pulumi-eks refuses
            # `instanceRoles` under API (authenticationMode.ts validateAuthenticationMode).
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                f"admin-{i}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn=admin_policy,
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                        )
                    },
                )
                for i, arn in enumerate(args.admin_principal_arns)
            },
            encryption_config_key_arn=key.arn,
            enabled_cluster_log_types=LOG_TYPES,
            endpoint_private_access=True,
            endpoint_public_access=args.endpoint_public_access,
            public_access_cidrs=args.public_access_cidrs or None,
            # No IAM OIDC provider: every pod role is a Pod Identity role (infra/platform/pod_identity.py),
            # and an unused IRSA provider is one more way to assume roles that trust it.
            create_oidc_provider=False,
            cluster_tags={
                CREATOR_TAG: args.creator_arn,
                **({DEPLOY_FROM_VPC_TAG: "true"} if args.deploy_from_vpc else {}),
            },
            kubernetes_service_ip_address_range=SERVICE_CIDR,
            # vpc-cni and kube-proxy come as EKS add-ons with the cluster; CoreDNS waits for nodes
            # (ManagedAddons), so EKS must not bootstrap its self-managed copies.
            bootstrap_self_managed_addons=False,
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            # The CNI's network-policy agent enforces the platform's and jobs' NetworkPolicies
            # (infra/addons/network_policies.py); pulumi-eks writes it as the add-on's configuration value
            # {"enableNetworkPolicy": "true"} (nodejs/eks/addons/cni-addon.ts, mergeConfigurationValues).
            # Needs vpc-cni 1.14+ and kernel 5.10+: the AL2023 (and accelerated) EKS AMIs run 6.1.
            vpc_cni_options=eks.VpcCniOptionsArgs(enable_network_policy=True),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[log_group]),
        )
        # The name as an Output that resolves once the cluster exists (the component's registration
        # returns after pulumi-eks created it), carrying the dependency to whatever takes it as input.
        self.name: pulumi.Output[str] = self.eks.urn.apply(lambda _: args.cluster_name)
        self.kubeconfig_json = self.eks.kubeconfig_json
        # Attributes a custom-AMI or EFA launch template needs; read back once the cluster exists.
        self.info = aws.eks.get_cluster_output(
            name=args.cluster_name, opts=pulumi.InvokeOutputOptions(parent=self, depends_on=[self.eks])
        )
        # The private endpoint's ENIs carry the EKS cluster security group, which admits the nodes only: a
        # runner in its own subnet (deployFromVpc) reaches the API through a rule for its CIDR.
        self.api_access: list[pulumi.Resource] = [
            aws.ec2.SecurityGroupRule(
                f"{name}-deployer-{i}",
                type="ingress",
                protocol="tcp",
                from_port=443,
                to_port=443,
                cidr_blocks=[cidr],
                security_group_id=self.info.vpc_config.cluster_security_group_id,
                description="pulumi up from a runner inside the VPC (deployerCidrs)",
                opts=child,
            )
            for i, cidr in enumerate(args.deployer_cidrs)
        ]
        self.k8s_provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig_json, opts=child)
        self.arn: pulumi.Output[str] = pulumi.Output.all(self.name, args.account_id).apply(
            lambda v: pod_identity.cluster_arn(
                partition=args.partition, region=args.region, account_id=v[1], cluster_name=v[0]
            )
        )
        self.node_prerequisites = self._node_networking(name, args)
        self.register_outputs(
            {
                "cluster_name": self.name,
                "node_role_arn": self.node_role.arn,
            }
        )

    def _node_networking(self, name: str, args: ClusterArgs) -> list[pulumi.Resource]:
        """The Pod Identity agent and the VPC CNI's role and association: what a node needs before it
        can turn Ready (module docstring). DaemonSet add-ons turn ACTIVE without nodes."""
        child = pulumi.ResourceOptions(parent=self)
        agent = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=self.name,
            addon_name="eks-pod-identity-agent",
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=args.tags,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-vpc-cni",
            assume_role_policy=self.arn.apply(
                lambda arn: pod_identity_trust_policy(arn, "kube-system", VPC_CNI_SERVICE_ACCOUNT)
            ),
            description=f"VPC CNI (kube-system/aws-node) of {args.cluster_name}",
            tags=args.tags,
            opts=child,
        )
        policy = aws.iam.RolePolicyAttachment(
            f"{name}-vpc-cni",
            role=role.name,
            policy_arn=f"arn:{args.partition}:iam::aws:policy/AmazonEKS_CNI_Policy",
            opts=child,
        )
        association = aws.eks.PodIdentityAssociation(
            f"{name}-vpc-cni",
            cluster_name=self.name,
            namespace="kube-system",
            service_account=VPC_CNI_SERVICE_ACCOUNT,
            role_arn=role.arn,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        return [agent, policy, association]


class ManagedAddonsArgs(ComponentArgs):
    # Cluster.name: an Output of the cluster, so the add-ons and their associations wait for it.
    cluster_name: pulumi.Output[str]
    cluster_arn: pulumi.Output[str]
    # Cluster.node_prerequisites: the Pod Identity agent the EBS CSI driver's credentials come through.
    pod_identity_agent: list[pulumi.Resource]
    partition: str
    k8s_provider: k8s.Provider
    # The EKS node monitoring agent (infra/addons/node_health.py): node conditions for GPU and other faults.
    node_monitoring_agent: bool = False
    # The cluster's kubeconfig (a secret): `pulumi destroy` waits through it for the EBS volumes to go.
    kubeconfig: pulumi.Output[str]
    tags: dict[str, str]


class ManagedAddons(pulumi.ComponentResource):
    """`opts.depends_on`: the node groups. The add-ons' pods need schedulable nodes before EKS reports
    them ACTIVE."""

    def __init__(self, name: str, args: ManagedAddonsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("mlops-eks:infra:ManagedAddons", name, None, opts)

        def addon(addon_name: str, *after: pulumi.Resource, **kwargs) -> aws.eks.Addon:
            return aws.eks.Addon(
                f"{name}-{addon_name}",
                cluster_name=args.cluster_name,
                addon_name=addon_name,
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=args.tags,
                opts=child_options(self, opts, depends_on=list(after)),
                **kwargs,
            )

        addon("coredns")
        if args.node_monitoring_agent:
            addon(
                node_health.NODE_MONITORING_AGENT,
                # Pinned: its DCGM host engine and dcgm-exporter's DCGM client must stay the same release
                # (infra/pins.py).
                addon_version=NODE_MONITORING_AGENT_VERSION,
                configuration_values=json.dumps(node_health.monitoring_agent_configuration()),
            )

        # EBS CSI gets its own role, assumable only by the kube-system/ebs-csi-controller-sa service
        # account of this cluster (Pod Identity association below, session tags in the trust policy).
        ebs_role = aws.iam.Role(
            f"{name}-ebs-csi",
            assume_role_policy=args.cluster_arn.apply(
                lambda arn: pod_identity_trust_policy(arn, "kube-system", EBS_CSI_SERVICE_ACCOUNT)
            ),
            description=args.cluster_name.apply(lambda cluster: f"EBS CSI controller of {cluster}"),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        policy = aws.iam.RolePolicyAttachment(
            f"{name}-ebs-csi",
            role=ebs_role.name,
            policy_arn=f"arn:{args.partition}:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy",
            opts=pulumi.ResourceOptions(parent=self),
        )
        ebs = addon(
            "aws-ebs-csi-driver",
            *args.pod_identity_agent,
            policy,
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=ebs_role.arn, service_account=EBS_CSI_SERVICE_ACCOUNT
                )
            ],
        )

        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=GP3, annotations={"storageclass.kubernetes.io/is-default-class": "true"}
            ),
            provisioner="ebs.csi.aws.com",
            parameters={"type": "gp3", "encrypted": "true", "fsType": "ext4"},
            volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True,
            reclaim_policy="Delete",
            opts=pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=[ebs]),
        )
        # `pulumi destroy` deletes what depends on the add-ons first (the releases and their namespaces, so
        # their PVCs), then the add-ons. A deleted PVC's EBS volume is deleted afterwards, asynchronously, by
        # the driver's controller (external-provisioner; the class's reclaimPolicy is Delete): removed
        # before that, the driver leaves the volumes behind, billed. This command's delete runs between the
        # two (it depends on the driver, everything else on the add-ons component) and waits for them.
        command.local.Command(
            f"{name}-ebs-volumes-released",
            create="true",
            delete=VOLUMES_RELEASED_SCRIPT,
            environment={"KUBECONFIG_JSON": args.kubeconfig, "STORAGE_CLASS": GP3, "TIMEOUT": VOLUME_WAIT},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ebs, self.storage_class]),
        )
        self.register_outputs({"storage_class": self.storage_class.metadata.name})
