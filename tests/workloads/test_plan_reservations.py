"""`workloads plan --reservations FILE`: the prod-h100-block job (a Capacity Block pool without fallback)
planned against its block's window, from what `aws ec2 describe-capacity-reservations` prints: it fits, it
does not fit, it would start before the window, it outlasts the block."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import botocore.session
import pytest

from workloads.__main__ import main

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BLOCK = "cr-0123456789abcdef0"  # Pulumi.prod.yaml's h100-block pool selects it, in us-east-1a


def _reservation(**changes) -> dict:
    """One CapacityReservations entry, spelled as EC2's API model spells it."""
    entry = {
        "CapacityReservationId": BLOCK,
        "OwnerId": "210987654321",
        "InstanceType": "p5.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1a",
        "Tenancy": "default",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "State": "active",
        "StartDate": (START - timedelta(hours=1)).isoformat(),
        "EndDate": (START + timedelta(days=1, hours=-1)).isoformat(),
        "EndDateType": "limited",
        "InstanceMatchCriteria": "targeted",
        "ReservationType": "capacity-block",
        "Tags": [],
    }
    return {**entry, **changes}


@pytest.fixture
def plan_with(tmp_path, capsys):
    def run(*entries: dict, start: datetime = START) -> tuple[int, str]:
        path = tmp_path / "reservations.json"
        path.write_text(json.dumps({"CapacityReservations": list(entries)}))
        argv = [
            "plan",
            "--stack",
            "prod-h100-block",
            "--reservations",
            str(path),
            "--start",
            start.isoformat(),
        ]
        code = main(argv)
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return run


def test_the_test_entries_are_spelled_as_ec2s_api_model_spells_them():
    shape = botocore.session.get_session().get_service_model("ec2").shape_for("CapacityReservation")
    assert set(_reservation()) <= set(shape.members)
    states = botocore.session.get_session().get_service_model("ec2").shape_for("CapacityReservationState")
    assert {"active", "scheduled", "expired"} <= set(states.enum)


def test_a_job_that_fits_the_block_and_ends_inside_it_will_run(plan_with):
    code, out = plan_with(_reservation())
    assert code == 0, out
    assert (
        f"reservation {BLOCK} (capacity-block, p5.48xlarge, us-east-1a, active): holds 2, 2 free; "
        "window 2026-12-01 11:00 UTC - 2026-12-02 11:00 UTC"
    ) in out
    assert f"the job lands on {BLOCK}: needs 2 x p5.48xlarge, 2 free" in out
    assert (
        "maxRuntimeHours (20 h) ends 2026-12-02 08:00 UTC, before the block does (Karpenter drains its nodes "
        "from 2026-12-02 10:20 UTC)"
    ) in out
    assert out.rstrip().endswith("verdict: will run")


def test_a_job_larger_than_the_blocks_free_instances_will_not_run(plan_with):
    code, out = plan_with(_reservation(AvailableInstanceCount=1))
    assert code == 2
    assert "pool h100-block: the job needs 2 x p5.48xlarge, the reservations have 1 free of 2" in out
    assert "verdict: will not run" in out


def test_a_job_deployed_before_the_window_opens_will_not_run(plan_with):
    opens = START + timedelta(days=2)
    code, out = plan_with(
        _reservation(
            State="scheduled", StartDate=opens.isoformat(), EndDate=(opens + timedelta(days=1)).isoformat()
        )
    )
    assert code == 2
    assert (
        "pool h100-block: the job would start 2026-12-01 12:00 UTC, before the window opens "
        "2026-12-03 12:00 UTC"
    ) in out
    # Once the window is open, the same block takes it.
    code, out = plan_with(_reservation(StartDate=opens.isoformat()), start=opens + timedelta(minutes=5))
    assert code == 0, out


def test_a_job_that_outlasts_the_block_runs_and_says_what_its_checkpoint_interval_risks(plan_with):
    code, out = plan_with(_reservation(EndDate=(START + timedelta(hours=10)).isoformat()))
    assert code == 0, out
    assert (
        "maxRuntimeHours (20 h) ends 2026-12-02 08:00 UTC, after the block: Karpenter drains its nodes "
        "from 2026-12-01 21:20 UTC; the job risks at most 99 steps since the last checkpoint "
        "(checkpoint.every_steps 100) if the checkpoint on SIGTERM does not finish"
    ) in out
    assert "the job may outlast the reservation" in out and "only on a new reservation" in out


def test_reservations_the_pool_does_not_select_leave_it_without_capacity(plan_with):
    # Another AZ, another id, an expired block: none is the pool's.
    code, out = plan_with(
        _reservation(AvailabilityZone="us-east-1b"),
        _reservation(CapacityReservationId="cr-0fffffffffffffff0"),
        _reservation(State="expired"),
    )
    assert code == 2
    assert "pool h100-block: no live reservation in the file is one of the pool's (ids " + BLOCK in out


def test_without_a_file_the_plan_says_how_to_plan_against_the_window(capsys):
    assert main(["plan", "--stack", "prod-h100-block"]) == 0
    out = capsys.readouterr().out
    assert "plan against their window with --reservations FILE" in out
    assert "pool h100-block: whether its reservation is active and has room" in out


def test_a_file_of_another_shape_exits_2_naming_it(tmp_path, capsys):
    path = tmp_path / "reservations.json"
    path.write_text(json.dumps({"Reservations": []}))
    assert main(["plan", "--stack", "prod-h100-block", "--reservations", str(path)]) == 2
    captured = capsys.readouterr()
    assert (
        f"--reservations {path}: not the output of describe-capacity-reservations"
        in captured.out + captured.err
    )
