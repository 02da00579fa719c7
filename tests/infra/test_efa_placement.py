"""An EFA pool's gang stays in one AZ, in a cluster placement group: its own EC2NodeClass selects one private
subnet and a placement group the program creates (strategy cluster), checked against Karpenter's 1.14
EC2NodeClass CRD and its CEL rules.

Karpenter 1.14 resolves `placementGroupSelector` (provider pkg/providers/placementgroup) and adds the group
to its launches, but narrows offerings only for partition groups (instancetype/offering/
placement_group_resolver.go): for a cluster group, which lives in one AZ, it would still pick offerings in
every zone of the node class's subnets. EFA's OS-bypass traffic stays inside one subnet as well (AWS EFA
docs). One subnet settles both."""

from __future__ import annotations

import copy
import json

import yaml

from infra.tools.synth import OFFERINGS
from sim.kubernetes.cel import CrdRules

NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"


def _body(resource) -> dict:
    """A copy: the session's synth is shared, and tests change what they check."""
    return copy.deepcopy(
        {
            "apiVersion": resource.inputs["apiVersion"],
            "kind": resource.inputs["kind"],
            "metadata": resource.inputs["metadata"],
            "spec": resource.inputs["spec"],
        }
    )


def _efa_class(prod, pool: str = "a100") -> dict:
    pools = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in prod.of_type(NODE_POOL)}
    ref = pools[f"gpu-{pool}"]["template"]["spec"]["nodeClassRef"]["name"]
    (node_class,) = [r for r in prod.of_type(NODE_CLASS) if r.inputs["metadata"]["name"] == ref]
    return copy.deepcopy(_body(node_class))  # the session's synth is shared: tests change their copy


def test_the_prod_a100_pool_launches_into_a_cluster_placement_group_in_one_subnet(prod):
    (group,) = [g for g in prod.of_type(PLACEMENT_GROUP) if g.name.endswith("-a100")]
    assert group.inputs["strategy"] == "cluster"
    spec = _efa_class(prod)["spec"]
    assert spec["placementGroupSelector"] == {"name": group.inputs["name"]}
    assert group.inputs["name"] == f"{prod.exports['cluster_name']}-a100"
    (term,) = spec["subnetSelectorTerms"]
    # The subnet of the first VPC AZ that EC2 offers p4d.24xlarge in (the mocks answer with OFFERINGS).
    offering = OFFERINGS["us-east-1"]["p4d.24xlarge"]
    private = {r.name: r.inputs["availabilityZone"] for r in prod.of_type(SUBNET) if "-private-" in r.name}
    first = next(name for name, zone in sorted(private.items()) if zone in offering)
    assert term == {"id": f"{first}-id"}


def test_only_efa_pools_get_a_placement_group(dev, prod):
    assert dev.of_type(PLACEMENT_GROUP) == []
    efa = [p.name for p in prod.config.gpu_pools if p.efa and p.source == "karpenter"]
    assert [g.name.split("-pg-", 1)[-1] for g in prod.of_type(PLACEMENT_GROUP)] == efa
    t4 = next(r for r in prod.of_type(NODE_POOL) if r.inputs["metadata"]["name"] == "gpu-t4")
    assert t4.inputs["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "nvidia"


def test_the_efa_node_class_passes_the_crd_and_its_cel_rules(prod, crd_check):
    node_class = _efa_class(prod)
    # The mock's subnet id stands for an EC2 one: the CRD's pattern wants the real shape.
    node_class["spec"]["subnetSelectorTerms"] = [{"id": "subnet-0123456789abcdef0"}]
    code, output = crd_check([node_class])
    assert code == 0, output
    rules = CrdRules()
    assert rules.validate(node_class) == []
    both = copy.deepcopy(node_class)
    both["spec"]["placementGroupSelector"]["id"] = "pg-0123456789abcdef0"
    assert {v.message for v in rules.validate(both)} == {"'name' and 'id' are mutually exclusive"}


def test_efa_nodes_give_containers_the_locked_memory_efa_registers(prod):
    """Not CAP_IPC_LOCK (refused under `restricted`, and never effective for the pods' non-root user): an
    RLIMIT_MEMLOCK in containerd's base runtime spec (nodeadm NodeConfig baseRuntimeSpec). Every other node
    class keeps the default limits."""
    (config,) = yaml.safe_load_all(_efa_class(prod)["spec"]["userData"])
    rlimits = {r["type"]: r for r in config["spec"]["containerd"]["baseRuntimeSpec"]["process"]["rlimits"]}
    assert set(rlimits) == {"RLIMIT_NOFILE", "RLIMIT_MEMLOCK"}  # the list replaces nodeadm's default one
    assert rlimits["RLIMIT_NOFILE"] == {"type": "RLIMIT_NOFILE", "soft": 65536, "hard": 1048576}
    memlock = rlimits["RLIMIT_MEMLOCK"]
    assert memlock["soft"] == memlock["hard"] >= 2**50  # a petabyte: no pinning ever reaches it
    # nodeadm merges through float64 (util.Merge: json into map[string]interface{}); the result must still
    # be a uint64 the OCI runtime accepts.
    assert int(json.loads(json.dumps(memlock["hard"]), parse_int=float)) < 2**64
    for node_class in prod.of_type(NODE_CLASS):
        if not node_class.inputs["metadata"]["name"].startswith("efa-"):
            (other,) = yaml.safe_load_all(node_class.inputs["spec"]["userData"])
            assert "containerd" not in other["spec"]


def test_the_reserved_efa_pool_launches_into_its_reservation_in_the_reservations_az(prod, crd_check):
    """The h100-block pool (Pulumi.prod.yaml) draws from its Capacity Block only: the NodePool allows the
    `reserved` capacity type alone, its node class selects the block by id, and its one subnet is in the
    block's AZ, with the pool's placement group there."""
    pools = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in prod.of_type(NODE_POOL)}
    requirements = pools["gpu-h100-block"]["template"]["spec"]["requirements"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]} in requirements
    node_class = _efa_class(prod, "h100-block")
    spec = node_class["spec"]
    assert spec["capacityReservationSelectorTerms"] == [{"id": "cr-0123456789abcdef0"}]
    (term,) = spec["subnetSelectorTerms"]
    private = {
        f"{r.name}-id": r.inputs["availabilityZone"] for r in prod.of_type(SUBNET) if "-private-" in r.name
    }
    assert private[term["id"]] == "us-east-1a"
    (group,) = [g for g in prod.of_type(PLACEMENT_GROUP) if g.name.endswith("-h100-block")]
    assert spec["placementGroupSelector"] == {"name": group.inputs["name"]}
    node_class["spec"]["subnetSelectorTerms"] = [{"id": "subnet-0123456789abcdef0"}]
    code, output = crd_check([node_class])
    assert code == 0, output
    rules = CrdRules()
    assert rules.validate(node_class) == []
    # The CRD's own rule: an id term carries nothing else (our config renders tags as a term of their own).
    mixed = copy.deepcopy(node_class)
    mixed["spec"]["capacityReservationSelectorTerms"] = [{"id": "cr-0123456789abcdef0", "tags": {"a": "b"}}]
    (violation,) = rules.validate(mixed)
    assert violation.message.startswith("'id' is mutually exclusive, cannot be set along with other fields")
