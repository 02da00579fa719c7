"""What Karpenter 1.14.1 needs to launch into capacity reservations, checked where it is decided: the
ReservedCapacity gate in the controller the real chart renders, the IAM actions of the reference policy that
reserved launches use, and the capacity-reservation interruption events on the controller's queue."""

from __future__ import annotations

from infra.addons.karpenter import iam
from infra.addons.karpenter.controller import karpenter_values
from sim import helm_render
from sim.helm_render import HelmRelease


def _controller_env(values: dict) -> dict[str, str]:
    release = HelmRelease("karpenter", "karpenter", "1.14.1", "karpenter", values)
    objects = helm_render.objects(helm_render.render(release, "1.35"))
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_controller_runs_with_the_reserved_capacity_gate_set_explicitly(values_check):
    """Beta and on by default in 1.14.1 (values.yaml `settings.featureGates.reservedCapacity`); the
    platform states it, so a chart whose default changes keeps reserved pools launching."""
    values = karpenter_values(cluster_name="mlops-eks-prod", queue_name="q", service_monitor=False)
    assert values["settings"]["featureGates"]["reservedCapacity"] is True
    gates = dict(g.split("=") for g in _controller_env(values)["FEATURE_GATES"].split(","))
    assert gates["ReservedCapacity"] == "true"
    code, out = values_check("karpenter", "1.14.1", values)
    assert code == 0, out


def _statements(policies: dict) -> list[dict]:
    return [s for document in policies.values() for s in document["Statement"]]


def test_the_controller_may_read_reservations_and_launch_into_them():
    """provider pkg/providers/capacityreservation lists reservations (DescribeCapacityReservations); a
    launch into one names the reservation as a resource of RunInstances / CreateFleet."""
    policies = iam.controller_policies(
        partition="aws",
        region="us-east-1",
        account_id="111122223333",
        cluster_name="c",
        node_role_arn="arn:aws:iam::111122223333:role/n",
        queue_arn="arn:aws:sqs:us-east-1:111122223333:q",
    )
    statements = _statements(policies)
    reads = next(s for s in statements if s["Sid"] == "AllowRegionalReadActions")
    assert "ec2:DescribeCapacityReservations" in reads["Action"]
    launch = next(s for s in statements if s["Sid"] == "AllowScopedEC2InstanceAccessActions")
    assert "arn:aws:ec2:us-east-1:*:capacity-reservation/*" in launch["Resource"]
    assert set(launch["Action"]) == {"ec2:RunInstances", "ec2:CreateFleet"}


def test_the_end_of_a_block_reaches_the_controller_like_a_spot_reclaim():
    """The interruption controller handles "EC2 Capacity Reservation Instance Interruption Warning" as it
    handles a Spot interruption: CordonAndDrain (controllers/interruption/utils.go actionForMessage)."""
    rules = {detail: source for _, source, detail in iam.INTERRUPTION_EVENTS}
    assert rules["EC2 Capacity Reservation Instance Interruption Warning"] == "aws.ec2"
    assert rules["EC2 Spot Instance Interruption Warning"] == "aws.ec2"
