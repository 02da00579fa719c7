"""The platform program under Pulumi mocks, for the dev and prod stacks: what it registers and exports."""

from __future__ import annotations

import asyncio
import base64
import json

import botocore.session
import kubernetes_validate
import pulumi
import pytest

from infra.cluster import LOG_TYPES
from infra.program import program
from infra.storage import IMAGE_FLAVOURS
from infra.synth import PlatformMocks, RecordingMonitor, install_mocks, stack_config, synth

EKS_AMI_TYPES = set(botocore.session.get_session().get_service_model("eks").shape_for("AMITypes").enum)
CONTRACT_EXPORTS = {
    "cluster_name", "kubeconfig", "region", "oidc_provider_arn", "oidc_provider_url", "vpc_id",
    "private_subnet_ids", "public_subnet_ids", "bucket_name", "ecr_repository_urls", "node_role_arn",
    "accelerator_pools",
}  # fmt: skip
# Added by the cluster add-ons (issue 3), same contract.
ADDON_EXPORTS = {
    "grafana_admin_password",
    "training_operators",
    "training_runtimes",
    "gang_scheduler",
    "kueue_queues",
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
    assert eks["authenticationMode"] == "API" and eks["createOidcProvider"] is True
    assert eks["skipDefaultNodeGroup"] is True and eks["endpointPrivateAccess"] is True
    assert eks["version"] == "1.33" and eks["name"] == f"mlops-eks-{stack.config.environment}"
    admin = eks["accessEntries"]["admin-0"]
    assert admin["principalArn"] == stack.config.admin_principal_arns[0]
    assert admin["accessPolicies"]["cluster-admin"]["policyArn"].endswith("AmazonEKSClusterAdminPolicy")


def test_prod_endpoint_is_private_and_dev_public_endpoint_is_limited(dev, prod):
    prod_eks, dev_eks = prod.one("eks:index:Cluster").inputs, dev.one("eks:index:Cluster").inputs
    assert prod_eks["endpointPublicAccess"] is False and "publicAccessCidrs" not in prod_eks
    assert dev_eks["endpointPublicAccess"] is True
    assert dev_eks["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_every_launch_template_requires_imdsv2_with_hop_limit_one_and_no_ssh(stack):
    templates = {r.name: r.inputs for r in stack.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    assert len(templates) == 1 + len(stack.config.gpu_pools)
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


def test_gpu_pools_scale_from_zero_with_catalog_taints_labels_and_instance_types(stack):
    groups = gpu_groups(stack)
    assert set(groups) == {p.name for p in stack.config.gpu_pools}
    for pool in stack.config.gpu_pools:
        group, acc = groups[pool.name], pool.catalog_entry
        assert group["scalingConfig"] == {"minSize": 0, "maxSize": pool.max_size, "desiredSize": 0}
        assert group["taints"] == [{"key": acc.resource_name, "value": "true", "effect": "NO_SCHEDULE"}]
        assert group["labels"] == acc.node_labels
        assert group["instanceTypes"] == pool.instance_type_names
        assert group["capacityType"] == pool.capacity_type


def test_dev_uses_spot_gpus_and_prod_on_demand(dev, prod):
    assert {g["capacityType"] for g in gpu_groups(dev).values()} == {"SPOT"}
    assert {g["capacityType"] for g in gpu_groups(prod).values()} == {"ON_DEMAND"}
    assert prod.one("eks:index:ManagedNodeGroup", "system").inputs["capacityType"] == "ON_DEMAND"


def test_amd_pool_boots_its_custom_ami_with_nodeadm_and_registers_the_amd_taint(dev):
    group = gpu_groups(dev)["amd"]
    lt = dev.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-amd-lt").inputs
    assert group["amiType"] == "CUSTOM" and lt["imageId"] == "ami-0123456789abcdef0"
    user_data = base64.b64decode(lt["userData"]).decode()
    assert "Content-Type: application/node.eks.aws" in user_data
    assert "--register-with-taints=amd.com/gpu=true:NoSchedule" in user_data
    assert "mlops-eks.io/accelerator=amd-v520" in user_data and '"cidr": "172.20.0.0/16"' in user_data
    # The NVIDIA pools use the EKS-optimized AMI: no image or user data of ours.
    t4 = dev.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-t4-lt").inputs
    assert (
        "imageId" not in t4
        and "userData" not in t4
        and gpu_groups(dev)["t4"]["amiType"] == "AL2023_x86_64_NVIDIA"
    )


def test_prod_a100_pool_has_efa_interfaces_in_one_placement_group_and_one_subnet(prod):
    lt = prod.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-a100-lt").inputs
    placement = prod.one("aws:ec2/placementGroup:PlacementGroup", "gpu-a100-placement").inputs
    assert placement["strategy"] == "cluster" and lt["placement"]["groupName"] == "gpu-a100-placement"
    interfaces = lt["networkInterfaces"]
    assert [i["networkCardIndex"] for i in interfaces] == [0, 1, 2, 3]
    assert {i["interfaceType"] for i in interfaces} == {"efa"} and interfaces[0]["deviceIndex"] == 0
    assert gpu_groups(prod)["a100"]["subnetIds"] == ["network-private-0-id"]
    assert prod.exports["accelerator_pools"]["a100"]["efa"] is True


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


def test_managed_addons_wait_for_nodes_and_ebs_csi_has_its_own_pod_identity_role(stack):
    addons = {r.inputs["addonName"]: r.inputs for r in stack.of_type("aws:eks/addon:Addon")}
    assert set(addons) == {"coredns", "eks-pod-identity-agent", "aws-ebs-csi-driver"}
    # vpc-cni and kube-proxy: pulumi-eks's managed add-ons (not disabled); CoreDNS is ours, after nodes.
    eks = stack.one("eks:index:Cluster").inputs
    assert "vpcCniOptions" not in eks and "kubeProxyAddonOptions" not in eks
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
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {
                "StringEquals": {
                    "aws:RequestTag/eks-cluster-name": stack.exports["cluster_name"],
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
    kubernetes_validate.validate(sc, "1.33", strict=True)


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
    t4 = stack.exports["accelerator_pools"]["t4"]
    assert t4 == {
        "accelerator": "t4",
        "instance_types": ["g4dn.12xlarge"],
        "gpus_per_node": 4,
        "resource_name": "nvidia.com/gpu",
        "node_labels": {"mlops-eks.io/accelerator": "t4", "nvidia.com/gpu.present": "true"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "min_size": 0,
        "max_size": t4["max_size"],
        "capacity_type": "SPOT" if stack.config.environment == "dev" else "ON_DEMAND",
        "efa": False,
    }


def test_kubeconfig_reaches_the_kubernetes_provider_as_a_secret(stack):
    assert stack.one("pulumi:providers:kubernetes").inputs["kubeconfig"] == "[secret]"


def test_invalid_config_stops_the_program_before_any_resource():
    values = {**stack_config("dev"), "mlops-eks:availabilityZoneCount": 0}
    monitor = RecordingMonitor(PlatformMocks("us-east-1"))
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()})
    install_mocks(monitor.mocks, "dev", monitor)

    @pulumi.runtime.test
    def run():
        program()

    try:
        with pytest.raises(
            pulumi.RunError, match=r"mlops-eks:availabilityZoneCount: got 0; allowed: 2, 3 or 4"
        ):
            run()
    finally:
        pulumi.runtime.set_all_config({})
        asyncio.set_event_loop(asyncio.new_event_loop())
    assert [r.type for r in monitor.registered if r.type != "pulumi:pulumi:Stack"] == []


def test_subnets_go_to_the_configured_availability_zones():
    values = {
        **stack_config("prod"),
        "mlops-eks:availabilityZones": ["us-east-1b", "us-east-1c", "us-east-1d"],
    }
    try:
        _, resources, _ = synth("prod", values)
    finally:
        asyncio.set_event_loop(asyncio.new_event_loop())
    zones = {r.name: r.inputs["availabilityZone"] for r in resources if r.type == "aws:ec2/subnet:Subnet"}
    assert zones["network-private-0"] == zones["network-public-0"] == "us-east-1b"
    assert zones["network-private-2"] == "us-east-1d"


def test_old_versions_expire_under_the_prefix_jobs_write_to():
    from infra.storage import JOBS_PREFIX
    from workloads.pod import s3_prefix
    from workloads.spec import TrainingJobSpec

    spec = TrainingJobSpec.model_validate({"name": "zimdb", "accelerator": "t4", "image": "x:1"})
    assert f"{s3_prefix(spec)}/".startswith(JOBS_PREFIX)
