"""`python -m workloads plan`: for every committed workload stack, will its job run, where, on how many
nodes, at what cost, admitted by which queue; and for a stack that does not fit, why not, with exit 2."""

from __future__ import annotations

import dataclasses
import json
import sys

import boto3
import pytest
from moto import mock_aws

from infra.accelerators import CATALOG
from sim.kubernetes.scheduling import simulate
from workloads.__main__ import main
from workloads.platform import example_outputs_path, load_platform_outputs
from workloads.render import render
from workloads.stacks import load_stack, program_text, workload_stacks

STACKS = workload_stacks()


@pytest.fixture
def plan_of(capsys):
    def run(*argv: str) -> tuple[int, str]:
        code = main(["plan", *argv])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return run


@pytest.mark.parametrize("stack", STACKS)
def test_every_committed_stack_runs_on_the_pool_the_simulation_picks_at_catalog_prices(plan_of, stack):
    code, out = plan_of("--stack", stack)
    assert code == 0 and out.rstrip().endswith("verdict: will run"), out
    loaded = load_stack(stack)
    platform = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    verdicts = simulate(render(loaded.spec, platform, program_text=program_text(loaded.spec)), platform)
    for v in verdicts:  # every role of every pod, as the operators create them, on its pool
        assert f"{v.template.job}: {v.template.count} pod(s) of" in out and f"-> pool {v.source}" in out
    pool = platform.accelerator_pools[verdicts[0].source or ""]
    price = CATALOG[pool.accelerator].instance(pool.instance_types[0]).usd_per_hour
    assert f"Karpenter launches 1 x {pool.instance_types[0]}" in out or "Karpenter launches 2 x" in out
    assert f"x ${price:.3f} = $" in out
    assert "pod security: namespace" in out and "every pod passes" in out and "namespace quota: fits" in out


def test_the_a100_job_takes_two_p4d_nodes_and_fills_its_queue(plan_of):
    code, out = plan_of("--stack", "prod-a100")
    assert code == 0
    assert "TrainJob/zimdb-a100/node: 2 pod(s) of 71 vCPU, 860Gi, 8 nvidia.com/gpu -> pool a100" in out
    assert "Karpenter launches 2 x p4d.24xlarge (on-demand; the pool holds at most 2)" in out
    assert "pool a100: on-demand 2 x $21.960 = $43.920/h" in out
    assert (
        "queue: research (kueue): admitted at once (the gang fits the nominal quota): cpu 142 of 192, "
        "memory 1720Gi of 2048Gi, nvidia.com/gpu (a100) 16 of 16, vpc.amazonaws.com/efa 8 of 8"
    ) in out
    assert "spot" not in out.split("cost while it runs")[1].split("queue:")[0]  # an on-demand pool


def _outputs(tmp_path, platform: str, change) -> str:
    outputs = json.loads(example_outputs_path(platform).read_text())
    change(outputs)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return str(path)


def test_a_job_larger_than_its_pool_will_not_run_and_says_why(plan_of, tmp_path):
    small = {"instance_types": ["g4dn.xlarge"], "gpus_per_node": 1, "gpu_limit": 2}
    path = _outputs(tmp_path, "dev", lambda o: o["accelerator_pools"]["t4"].update(small))
    code, out = plan_of("--stack", "dev-zimdb", "--platform-outputs", path)
    assert code == 2 and "verdict: will not run because:" in out
    assert "mlops-eks:job.gpusPerNode: 4 is more than the t4 pools' instance types have" in out
    assert "allowed: 1-1" in out


def test_a_platform_without_the_gpu_device_plugin_will_not_run_the_job(plan_of, tmp_path):
    def drop(outputs: dict) -> None:
        plugins = outputs["device_plugins"]
        outputs["device_plugins"] = [p for p in plugins if p["resource"] != "nvidia.com/gpu"]

    code, out = plan_of("--stack", "dev-zimdb", "--platform-outputs", _outputs(tmp_path, "dev", drop))
    assert code == 2 and "verdict: will not run because:" in out
    assert "no device plugin serves nvidia.com/gpu on g4dn.12xlarge" in out
    assert "-> no pool" in out


def test_a_queue_too_small_for_the_gang_is_never_admitted(plan_of, tmp_path):
    def shrink(outputs: dict) -> None:
        next(q for q in outputs["queue_quotas"] if q["name"] == "research")["gpus"]["a100"] = 8

    code, out = plan_of("--stack", "prod-a100", "--platform-outputs", _outputs(tmp_path, "prod", shrink))
    assert code == 2
    assert "'research' would never admit this job" in out
    assert "nvidia.com/gpu 2 x 8 = 16 > nominal quota 8" in out


def _spot_history(tmp_path, instance_type: str) -> str:
    """What `aws ec2 describe-spot-price-history` prints, from boto3 against moto's EC2."""
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        history = ec2.describe_spot_price_history(
            InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX (Amazon VPC)"]
        )["SpotPriceHistory"]
    assert history, "moto returned no Spot prices"
    prices = ["1.1000", "1.4000", "1.2500"]
    for entry, price in zip(history, prices * len(history), strict=False):
        entry["SpotPrice"] = price  # moto's are placeholders; the file's shape is the real API's
    path = tmp_path / "spot.json"
    path.write_text(json.dumps({"SpotPriceHistory": history}, default=str))
    return str(path)


def test_current_spot_prices_from_a_describe_spot_price_history_file(plan_of, tmp_path):
    code, out = plan_of("--stack", "dev-zimdb", "--spot-prices", _spot_history(tmp_path, "g4dn.12xlarge"))
    assert code == 0 and "spot now: $1.100-$1.400/h across the region's AZs" in out


def test_a_spot_prices_file_of_another_shape_exits_2_naming_it(plan_of, tmp_path):
    path = tmp_path / "spot.json"
    path.write_text('{"Prices": []}')
    code, out = plan_of("--stack", "dev-zimdb", "--spot-prices", str(path))
    assert code == 2 and f"--spot-prices {path}: not the output of describe-spot-price-history" in out
    assert "allowed: the JSON of `aws ec2 describe-spot-price-history" in out


def test_plan_on_a_platform_stack_runs_the_platform_checks(capfd, monkeypatch):
    """`plan` on dev answers as `python -m infra check` in its own process (workloads never imports the
    Pulumi program). That process runs here as infra's main() (a cold one is ~6 s of CPU; test_synth_cli.py
    starts `python -m infra` cold). The committed file still holds the documentation's example values."""
    import subprocess

    from infra.__main__ import main as infra_main
    from workloads.stacks import REPO

    started = []

    def run(command, cwd, check):
        started.append((command, cwd))
        assert command[:3] == [sys.executable, "-m", "infra"], command
        return subprocess.CompletedProcess(command, infra_main(command[3:]))

    monkeypatch.setattr("workloads.__main__.subprocess.run", run)
    code = main(["plan", "--stack", "dev"])
    out = capfd.readouterr().out
    assert started == [([sys.executable, "-m", "infra", "check", "--stack", "dev"], REPO)]
    assert code == 2 and "check of platform stack dev" in out and "pulumi-eks input rules: 16 rules" in out
    assert "123456789012 is the AWS documentation's example account" in out


def test_an_operator_whose_init_container_pod_security_refuses_will_not_run_the_job(plan_of, monkeypatch):
    """Training Operator v1 with its built-in init container template (no securityContext), as it runs
    unless the platform gives it its own: `restricted` refuses every Worker pod it creates."""
    from sim.operators import pods as operator_pods

    ours = operator_pods.operator_settings
    builtin = operator_pods.PYTORCH_INIT_TEMPLATE_BUILTIN
    monkeypatch.setattr(
        operator_pods,
        "operator_settings",
        lambda platform: dataclasses.replace(ours(platform), pytorch_init_template=builtin),
    )
    code, out = plan_of("--stack", "dev-zimdb-multinode")
    assert code == 2 and "pod security: namespace zimdb-multinode enforces restricted: " in out
    assert (
        "Pod Security (restricted) refuses PyTorchJob/zimdb-multinode/Worker: allowPrivilegeEscalation: "
        "container 'init-pytorch' does not set allowPrivilegeEscalation: false"
    ) in out


def test_a_job_that_admission_refuses_will_not_run(plan_of, monkeypatch):
    """A runtime whose JobSet failure-policy rule has a hyphen: `pulumi up` succeeds, and JobSet's webhook
    refuses the JobSet Trainer creates from it, so the TrainJob never gets a pod. The plan says so."""
    from workloads import jobs

    monkeypatch.setattr(jobs, "PERMANENT_FAILURE_RULE", "permanent-exit-code")
    code, out = plan_of("--stack", "dev-zimdb")
    assert code == 2 and "verdict: will not run because:" in out
    assert (
        "admission: webhook validate-jobset-x-k8s-io-v1alpha2-jobset.x-k8s.io refuses JobSet zimdb/zimdb "
        "(created by Kubeflow Trainer (TrainJob zimdb)): invalid failure policy rule name "
        "'permanent-exit-code'"
    ) in out


def test_a_queued_job_in_a_namespace_the_stack_does_not_create_is_warned_about(tmp_path):
    """Kueue manages only namespaces labelled for it (infra/addons/training.py kueue_manager_config); a
    namespace the stack does not create may lack the label, and the job would run unqueued."""
    from workloads.plan import plan
    from workloads.spec import parse_spec
    from workloads.stacks import read_config, stack_file

    loaded = load_stack("prod-a100")
    raw = read_config(stack_file("prod-a100"))["mlops-eks:job"]
    assert raw.get("queue") and loaded.spec.create_namespace
    facts = load_platform_outputs(example_outputs_path(loaded.platform_stack))
    shared = dataclasses.replace(loaded, spec=parse_spec({**raw, "createNamespace": False}))
    text = plan(shared, facts, tmp_path).text()
    assert "only the cluster can tell:" in text and "mlops-eks.io/kueue=true" in text
    assert f"kubectl label namespace {loaded.spec.namespace_name} mlops-eks.io/kueue=true" in text
    assert "only the cluster can tell:" not in plan(loaded, facts, tmp_path).text()


@pytest.mark.parametrize(("stack", "minutes"), [("dev-zimdb", "1-3"), ("prod-a100", "3-6")])
def test_the_launch_time_is_the_instance_familys_with_what_it_rests_on(plan_of, stack, minutes):
    code, out = plan_of("--stack", stack)
    assert code == 0
    (line,) = [line for line in out.splitlines() if "launch and join" in line]
    assert f"launch and join {minutes} min (" in line
    assert ("NVSwitch" in line) == (stack == "prod-a100")


def test_a_pool_of_an_instance_type_without_a_published_price_says_so_and_stays_out_of_the_total():
    from workloads.plan import PoolPlan, _cost_lines

    stack = load_stack("prod-a100")
    a100 = load_platform_outputs(example_outputs_path(stack.platform_stack)).accelerator_pools["a100"]
    p5e = a100.model_copy(update={"accelerator": "h200", "instance_types": ("p5e.48xlarge",)})
    p5en = a100.model_copy(update={"accelerator": "h200", "instance_types": ("p5en.48xlarge",)})
    lines = _cost_lines(
        [PoolPlan("h200-block", p5e, "p5e.48xlarge", 2), PoolPlan("h200", p5en, "p5en.48xlarge", 1)], stack
    )
    assert lines[0].startswith("pool h200-block: on-demand 2 x p5e.48xlarge: price unknown (AWS publishes no")
    assert "pool h200: on-demand 1 x $63.296 = $63.296/h" in lines
    assert lines[-1].startswith("total on-demand: $63.296/h")
    assert lines[-1].endswith("(without pool h200-block: price unknown)")


def test_every_catalog_family_has_a_launch_estimate():
    from workloads.plan import LAUNCH_MINUTES

    families = {f for acc in CATALOG.values() for f in acc.instance_families}
    assert families <= LAUNCH_MINUTES.keys(), families - LAUNCH_MINUTES.keys()
