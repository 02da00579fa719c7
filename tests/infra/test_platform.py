"""The platform program under Pulumi mocks, for the dev and prod stacks: what it registers and exports."""

from __future__ import annotations

import base64
import json

import botocore.session
import kubernetes_validate
import pulumi
import pytest

from infra.platform.cluster import LOG_TYPES
from infra.platform.storage import IMAGE_FLAVOURS
from infra.program import program
from infra.tools.synth import ACCOUNT_ID, PlatformMocks, RecordingMonitor, stack_config, synth

EKS_AMI_TYPES = set(botocore.session.get_session().get_service_model("eks").shape_for("AMITypes").enum)
CONTRACT_EXPORTS = {
    "cluster_name",
    "kubeconfig",
    "region",
    "vpc_id",
    "private_subnet_ids",
    "public_subnet_ids",
    "bucket_name",
    "ecr_repository_urls",
    "node_role_arn",
    "accelerator_pools",
    "cluster_creator_arn",
    "image_path",
}
# Added by the cluster add-ons, same contract.
ADDON_EXPORTS = {
    "grafana_admin_password",
    "training_operators",
    "training_runtimes",
    "gang_scheduler",
    "kueue_queues",
    "device_plugins",
    "queue_quotas",
    "priority_classes",
}


def gpu_groups(synth) -> dict[str, dict]:
    return {
        r.name.removeprefix("gpu-"): r.inputs
        for r in synth.of_type("eks:index:ManagedNodeGroup")
        if r.name != "system"
    }


def test_cluster_encrypts_secrets_with_a_rotating_key_and_logs_everything(stack):
    eks = stack.one("eks:index:Cluster").inputs
    key = stack.one("aws:kms/key:Key", "cluster-secrets").inputs
    assert key["enableKeyRotation"] is True
    assert eks["encryptionConfigKeyArn"].endswith("key/cluster-secrets")
    assert (
        eks["enabledClusterLogTypes"]
        == LOG_TYPES
        == ["api", "audit", "authenticator", "controllerManager", "scheduler"]
    )
    assert eks["authenticationMode"] == "API" and eks["createOidcProvider"] is False
    assert eks["skipDefaultNodeGroup"] is True and eks["endpointPrivateAccess"] is True
    # EKS creates managed node group roles' access entries; pulumi-eks refuses instanceRoles in API mode.
    assert "instanceRoles" not in eks
    assert eks["version"] == "1.35" and eks["name"] == f"mlops-eks-{stack.config.environment}"
    admin = eks["accessEntries"]["admin-0"]
    assert admin["principalArn"] == stack.config.admin_principal_arns[0]
    assert admin["accessPolicies"]["cluster-admin"]["policyArn"].endswith("AmazonEKSClusterAdminPolicy")


def test_prod_endpoint_admits_only_the_deployer_and_dev_public_endpoint_is_limited(dev, prod):
    prod_eks, dev_eks = prod.one("eks:index:Cluster").inputs, dev.one("eks:index:Cluster").inputs
    assert prod_eks["endpointPrivateAccess"] is True and prod_eks["endpointPublicAccess"] is True
    assert prod_eks["publicAccessCidrs"] == ["198.51.100.7/32"]
    # Tagged with its creator (infra/platform/creator.py), not as deployed from the VPC.
    assert set(prod_eks["clusterTags"]) == {"mlops-eks:cluster-creator"}
    assert dev_eks["endpointPublicAccess"] is True
    assert dev_eks["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_every_launch_template_requires_imdsv2_with_hop_limit_one_and_no_ssh(stack):
    templates = {r.name: r.inputs for r in stack.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert len(templates) == 1 + len([p for p in stack.config.gpu_pools if p.source == "managed"])
    for name, lt in templates.items():
        assert lt["metadataOptions"] == {
            "httpEndpoint": "enabled",
            "httpTokens": "required",
            "httpPutResponseHopLimit": 1,
        }, name
        assert "keyName" not in lt, name
        assert lt["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true", name
    for group in stack.of_type("eks:index:ManagedNodeGroup"):
        assert group.inputs["launchTemplate"]["id"] == f"{group.name}-lt-id"
        assert "remoteAccess" not in group.inputs
        assert group.inputs["amiType"] in EKS_AMI_TYPES
        assert set(group.inputs["instanceTypes"]) and group.inputs["cluster"] == "[resource cluster-eks]"


# Reserved capacity beside dev's elastic pools: fixed-size managed groups (AMD custom AMI, A100 with EFA).
RESERVED_POOLS = [
    {
        "name": "amd-reserved",
        "accelerator": "amd-v520",
        "source": "managed",
        "size": 1,
        "instanceTypes": ["g4ad.xlarge"],
        "capacityTypes": ["spot"],
        "amiId": "ami-0123456789abcdef0",
    },
    {
        "name": "a100-reserved",
        "accelerator": "a100",
        "source": "managed",
        "size": 2,
        "instanceTypes": ["p4d.24xlarge"],
        "capacityTypes": ["on-demand"],
        "diskSizeGiB": 500,
        "efa": True,
    },
    {"name": "t4-reserved", "accelerator": "t4", "source": "managed", "size": 1},
    # A Capacity Block of 2 x p5.48xlarge as an EKS CAPACITY_BLOCK group.
    {
        "name": "h100-cb",
        "accelerator": "h100",
        "source": "managed",
        "size": 2,
        "instanceTypes": ["p5.48xlarge"],
        "capacityTypes": ["reserved"],
        "reservation": {"ids": ["cr-0a1b2c3d4e5f60718"], "availabilityZone": "us-east-1b"},
    },
]


@pytest.fixture(scope="module")
def reserved():
    values = stack_config("dev")
    addons = values["mlops-eks:addons"]
    values = {
        **values,
        "mlops-eks:gpuPools": [*values["mlops-eks:gpuPools"], *RESERVED_POOLS],
        "mlops-eks:addons": {**addons, "gpu": {**addons["gpu"], "efaDevicePlugin": True}},
    }
    config, resources, exports = synth("dev", values)
    groups = {r.name: r.inputs for r in resources if r.type == "eks:index:ManagedNodeGroup"}
    templates = {r.name: r.inputs for r in resources if r.type == "aws:ec2/launchTemplate:LaunchTemplate"}
    placement = {r.name: r.inputs for r in resources if r.type == "aws:ec2/placementGroup:PlacementGroup"}
    return config, groups, templates, placement, exports


def test_elastic_gpu_pools_are_karpenter_node_pools_and_no_managed_gpu_group(stack):
    # A managed group at minSize 0 never grows (Karpenter ignores managed groups, no autoscaler runs).
    assert gpu_groups(stack) == {}
    pools = {r.name: r.inputs for r in stack.of_type("kubernetes:karpenter.sh/v1:NodePool")}
    for pool in stack.config.gpu_pools:
        body, acc = pools[f"karpenter-pool-gpu-{pool.name}"]["spec"], pool.catalog_entry
        assert body["limits"] == {acc.resource_name: str(pool.gpu_limit)}
        assert body["template"]["spec"]["taints"] == [
            {"key": acc.resource_name, "value": "true", "effect": "NoSchedule"}
        ]
        assert body["template"]["metadata"]["labels"] == acc.node_labels
        requirements = {r["key"]: r["values"] for r in body["template"]["spec"]["requirements"]}
        assert requirements["node.kubernetes.io/instance-type"] == pool.instance_type_names
        assert requirements["karpenter.sh/capacity-type"] == pool.capacity_types


def test_reserved_pools_are_fixed_size_managed_groups_with_the_eks_capacity_spelling(reserved):
    config, groups, _, _, exports = reserved
    for pool in (p for p in config.gpu_pools if p.source == "managed"):
        group, acc = groups[f"gpu-{pool.name}"], pool.catalog_entry
        size = pool.size
        assert group["scalingConfig"] == {"minSize": size, "maxSize": size, "desiredSize": size}
        spelling = {"spot": "SPOT", "on-demand": "ON_DEMAND", "reserved": "CAPACITY_BLOCK"}
        assert group["capacityType"] == spelling[pool.capacity_types[0]]
        # GPU nodes, NVIDIA and AMD, also start with the startup GPU check's taint (gpu_node_check.py).
        startup = [{"key": "mlops-eks.io/gpu-check", "value": "pending", "effect": "NO_SCHEDULE"}]
        assert group["taints"] == [
            {"key": acc.resource_name, "value": "true", "effect": "NO_SCHEDULE"},
            *startup,
        ]
        assert group["labels"] == acc.node_labels and group["instanceTypes"] == pool.instance_type_names
        # Nothing to keep on a fixed-size group; the system group (min < max) keeps a manual scale-up.
        assert group.get("ignoreScalingChanges") is False
        assert exports["accelerator_pools"][pool.name]["source"] == "managed"
        assert exports["accelerator_pools"][pool.name]["size"] == size
    assert groups["system"]["ignoreScalingChanges"] is True


def test_a_capacity_block_group_targets_its_block_from_the_launch_template_in_the_blocks_az(reserved):
    """EKS user guide, "Create a managed node group with Capacity Blocks for ML": the launch template sets
    InstanceMarketOptions.MarketType capacity-block and targets the block's reservation id; the group's
    capacity type is CAPACITY_BLOCK and its subnets are those of the block's AZ."""
    _, groups, templates, _, exports = reserved
    template = templates["gpu-h100-cb-lt"]
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = template["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0a1b2c3d4e5f60718"}
    assert groups["gpu-h100-cb"]["capacityType"] == "CAPACITY_BLOCK"
    assert groups["gpu-h100-cb"]["subnetIds"] == ["network-private-1-id"]  # us-east-1b, the block's AZ
    for name, other in templates.items():
        if name != "gpu-h100-cb-lt":
            assert "instanceMarketOptions" not in other and "capacityReservationSpecification" not in other
    pool = exports["accelerator_pools"]["h100-cb"]
    assert pool["capacity_types"] == ["reserved"]
    assert pool["reservation"] == {
        "ids": ["cr-0a1b2c3d4e5f60718"],
        "tags": {},
        "availability_zone": "us-east-1b",
    }


def test_dev_uses_spot_gpus_and_prod_on_demand_or_reserved(dev, prod):
    assert {c for p in dev.config.gpu_pools for c in p.capacity_types} == {"spot", "on-demand"}
    assert {c for p in prod.config.gpu_pools for c in p.capacity_types} == {"on-demand", "reserved"}
    assert dev.one("eks:index:ManagedNodeGroup", "system").inputs["capacityType"] == "SPOT"
    assert prod.one("eks:index:ManagedNodeGroup", "system").inputs["capacityType"] == "ON_DEMAND"


def test_amd_pool_boots_its_custom_ami_with_nodeadm_and_registers_the_amd_taint(reserved):
    _, groups, templates, _, _ = reserved
    lt = templates["gpu-amd-reserved-lt"]
    assert groups["gpu-amd-reserved"]["amiType"] == "CUSTOM" and lt["imageId"] == "ami-0123456789abcdef0"
    user_data = base64.b64decode(lt["userData"]).decode()
    assert "Content-Type: application/node.eks.aws" in user_data
    assert "--register-with-taints=amd.com/gpu=true:NoSchedule" in user_data
    assert "mlops-eks.io/accelerator=amd-v520" in user_data and '"cidr": "172.20.0.0/16"' in user_data
    # The NVIDIA pools use the EKS-optimized AMI: no image or user data of ours.
    t4 = templates["gpu-t4-reserved-lt"]
    assert "imageId" not in t4 and "userData" not in t4
    assert groups["gpu-t4-reserved"]["amiType"] == "AL2023_x86_64_NVIDIA"


def test_reserved_a100_pool_has_efa_interfaces_in_one_placement_group_and_one_subnet(reserved):
    _, groups, templates, placement, exports = reserved
    lt = templates["gpu-a100-reserved-lt"]
    assert placement["gpu-a100-reserved-placement"]["strategy"] == "cluster"
    assert lt["placement"]["groupName"] == "gpu-a100-reserved-placement"
    interfaces = lt["networkInterfaces"]
    assert [i["networkCardIndex"] for i in interfaces] == [0, 1, 2, 3]
    assert {i["interfaceType"] for i in interfaces} == {"efa"} and interfaces[0]["deviceIndex"] == 0
    # us-east-1b's: the first of the VPC's AZs EC2 offers p4d.24xlarge in (the mocks' OFFERINGS table).
    assert groups["gpu-a100-reserved"]["subnetIds"] == ["network-private-1-id"]
    assert exports["accelerator_pools"]["a100-reserved"]["efa_interfaces"] == 4


def test_network_spans_three_azs_with_discovery_tags_and_nat_per_environment(dev, prod):
    for result, nats in ((dev, 1), (prod, 3)):
        subnets = {r.name: r.inputs for r in result.of_type("aws:ec2/subnet:Subnet")}
        assert len(subnets) == 6
        for i in range(3):
            private, public = subnets[f"network-private-{i}"], subnets[f"network-public-{i}"]
            assert private["tags"]["karpenter.sh/discovery"] == result.exports["cluster_name"]
            assert private["tags"]["kubernetes.io/role/internal-elb"] == "1"
            assert public["tags"]["kubernetes.io/role/elb"] == "1" and public["mapPublicIpOnLaunch"] is False
        assert len(result.of_type("aws:ec2/natGateway:NatGateway")) == nats
        endpoint = result.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs
        assert (
            endpoint["vpcEndpointType"] == "Gateway"
            and endpoint["serviceName"] == "com.amazonaws.us-east-1.s3"
        )


def test_bucket_is_private_versioned_encrypted_and_denies_plain_http(stack):
    policy = json.loads(stack.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    deny = policy["Statement"][0]
    bucket_arn = f"arn:aws:s3:::{stack.exports['bucket_name']}"
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "s3:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [bucket_arn, f"{bucket_arn}/*"]
    block = stack.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(
        block[k] is True
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    versioning = stack.one("aws:s3/bucketVersioning:BucketVersioning").inputs
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    sse = stack.one("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    rules = stack.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
    expire = next(r for r in rules if "noncurrentVersionExpiration" in r)
    assert expire["filter"]["prefix"] == "jobs/"
    assert expire["noncurrentVersionExpiration"]["noncurrentDays"] == stack.config.checkpoint_noncurrent_days


def test_ecr_repositories_scan_on_push_refuse_tag_overwrites_and_expire_old_images(stack):
    repos = {r.name: r.inputs for r in stack.of_type("aws:ecr/repository:Repository")}
    assert set(repos) == {f"storage-{f}" for f in IMAGE_FLAVOURS}
    for repo in repos.values():
        assert (
            repo["imageTagMutability"] == "IMMUTABLE"
            and repo["imageScanningConfiguration"]["scanOnPush"] is True
        )
    for policy in stack.of_type("aws:ecr/lifecyclePolicy:LifecyclePolicy"):
        rule = json.loads(policy.inputs["policy"])["rules"][0]
        assert rule["selection"]["countNumber"] == stack.config.ecr_keep_images


def test_coredns_is_our_addon_and_ebs_csi_has_its_own_pod_identity_role(stack):
    addons = {r.inputs["addonName"]: r.inputs for r in stack.of_type("aws:eks/addon:Addon")}
    assert set(addons) == {
        "coredns",
        "eks-pod-identity-agent",
        "aws-ebs-csi-driver",
        "eks-node-monitoring-agent",
    }
    # vpc-cni and kube-proxy: pulumi-eks's managed add-ons (not disabled); CoreDNS is ours (it waits for
    # the nodes, the Pod Identity agent does not: test_ordering.py).
    eks = stack.one("eks:index:Cluster").inputs
    assert "useDefaultVpcCni" not in eks and "kubeProxyAddonOptions" not in eks
    assert eks["corednsAddonOptions"]["enabled"] is False and eks["bootstrapSelfManagedAddons"] is False
    association = addons["aws-ebs-csi-driver"]["podIdentityAssociations"]
    assert association == [
        {
            "roleArn": "arn:aws:iam::123456789012:role/addons-ebs-csi",
            "serviceAccount": "ebs-csi-controller-sa",
        }
    ]
    trust = json.loads(stack.one("aws:iam/role:Role", "addons-ebs-csi").inputs["assumeRolePolicy"])
    assert trust["Statement"] == [
        {
            "Sid": "EksPodIdentity",
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-arn": (
                        f"arn:aws:eks:{stack.config.region}:123456789012:cluster/{stack.exports['cluster_name']}"
                    ),
                    "aws:RequestTag/kubernetes-namespace": "kube-system",
                    "aws:RequestTag/kubernetes-service-account": "ebs-csi-controller-sa",
                }
            },
        }
    ]
    attachment = stack.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "addons-ebs-csi").inputs
    assert attachment["policyArn"] == "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"


def test_gp3_is_the_default_storage_class_and_passes_the_kubernetes_schema(stack):
    sc = stack.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["parameters"] == {"type": "gp3", "encrypted": "true", "fsType": "ext4"}
    kubernetes_validate.validate(sc, stack.config.kubernetes_version, strict=True)


def test_components_have_typed_tokens_and_own_their_children(stack):
    components = {r.name: r for r in stack.resources if r.type.startswith("mlops-eks:infra:")}
    assert {r.type for r in components.values()} >= {
        f"mlops-eks:infra:{n}" for n in ("Network", "Cluster", "NodePool", "ManagedAddons", "Storage")
    }
    roots = [r for r in stack.resources if r.parent is None and r.type != "pulumi:pulumi:Stack"]
    assert {r.type for r in roots} <= {r.type for r in components.values()}, [r.name for r in roots]


def test_exports_are_the_contract_and_describe_each_pool(stack):
    assert CONTRACT_EXPORTS <= set(stack.exports) <= CONTRACT_EXPORTS | ADDON_EXPORTS
    assert stack.exports["kubeconfig"] == "[secret]"
    assert set(stack.exports["ecr_repository_urls"]) == {"cuda", "rocm", "cpu"}
    assert stack.exports["region"] == "us-east-1" and len(stack.exports["private_subnet_ids"]) == 3
    # Where nodes pull from: the operators' pod models name their injected images under it.
    assert stack.exports["image_path"] == {
        "account_id": ACCOUNT_ID,
        "region": "us-east-1",
        "stack": stack.exports["cluster_name"].removeprefix("mlops-eks-"),
    }
    t4 = stack.exports["accelerator_pools"]["t4"]
    dev = stack.config.environment == "dev"
    assert t4 == {
        "source": "karpenter",
        "accelerator": "t4",
        "instance_types": ["g4dn.12xlarge"],
        "gpus_per_node": 4,
        "resource_name": "nvidia.com/gpu",
        "node_labels": {"mlops-eks.io/accelerator": "t4", "nvidia.com/gpu.present": "true"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "startup_taints": [{"key": "mlops-eks.io/gpu-check", "value": "pending", "effect": "NoSchedule"}],
        "capacity_types": ["spot", "on-demand"] if dev else ["on-demand"],
        "reservation": None,
        "efa_interfaces": 0,
        "gpu_limit": 8 if dev else 16,
        "size": None,
    }
    assert {p["resource"] for p in stack.exports["device_plugins"]} >= {"nvidia.com/gpu"}


def test_kubeconfig_reaches_the_kubernetes_provider_as_a_secret(stack):
    assert stack.one("pulumi:providers:kubernetes").inputs["kubeconfig"] == "[secret]"


def test_invalid_config_stops_the_program_before_any_resource(pulumi_mocks):
    values = {**stack_config("dev"), "mlops-eks:availabilityZoneCount": 0}
    monitor = RecordingMonitor(PlatformMocks("us-east-1"))
    pulumi_mocks(monitor.mocks, config=values, monitor=monitor)

    @pulumi.runtime.test
    def run():
        program()

    with pytest.raises(pulumi.RunError, match=r"mlops-eks:availabilityZoneCount: got 0; allowed: 2, 3 or 4"):
        run()
    assert [r.type for r in monitor.registered if r.type != "pulumi:pulumi:Stack"] == []


def test_subnets_go_to_the_configured_availability_zones():
    values = {
        **stack_config("prod"),
        "mlops-eks:availabilityZones": ["us-east-1b", "us-east-1c", "us-east-1d"],
    }
    for pool in values["mlops-eks:gpuPools"]:  # a reservation bought in one of those AZs
        if "reservation" in pool:
            pool["reservation"] = {**pool["reservation"], "availabilityZone": "us-east-1c"}
    _, resources, _ = synth("prod", values)
    zones = {r.name: r.inputs["availabilityZone"] for r in resources if r.type == "aws:ec2/subnet:Subnet"}
    assert zones["network-private-0"] == zones["network-public-0"] == "us-east-1b"
    assert zones["network-private-2"] == "us-east-1d"


def test_old_versions_expire_under_the_prefix_jobs_write_to():
    from infra.contract import JOBS_PREFIX
    from workloads.pod import s3_prefix
    from workloads.spec import TrainingJobSpec

    spec = TrainingJobSpec.model_validate({"name": "zimdb", "accelerator": "t4", "image": "x:1"})
    assert f"{s3_prefix(spec)}/".startswith(JOBS_PREFIX)
