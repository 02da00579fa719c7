"""The CRDs' CEL rules (x-kubernetes-validations in upstream/crds) on every custom resource the
platform stacks and the committed workload stacks create, on create and on an update of each workload
stack; and the workload program replacing what those rules refuse to update."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import pulumi
import pytest
import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as runtime_mocks
from recording_mocks import RecordingMocks

from policy.scan import PLATFORM_STACKS as PLATFORM_STACK_NAMES
from sim import contracts
from sim.kubernetes.cel import CRD_DIR, CrdRules, RuleError
from workloads import jobs
from workloads.__main__ import platform_facts
from workloads.render import render
from workloads.spec import CONFIG_KEY, parse_spec
from workloads.stacks import PLATFORM_KEY, load_stack, program_text, stack_file, workload_stacks

WORKLOAD_STACKS = workload_stacks()
JOB_KINDS = {"trainjob": "TrainJob", "pytorchjob": "PyTorchJob", "mpijob": "MPIJob", "rayjob": "RayJob"}
PLATFORM_STACKS = PLATFORM_STACK_NAMES


@pytest.fixture(scope="module")
def rules() -> CrdRules:
    return CrdRules()


def _custom_resources(objects: list[dict], rules: CrdRules) -> list[dict]:
    groups = {api.split("/")[0] for api, _ in rules.schemas}
    return [o for o in objects if o.get("apiVersion", "").split("/")[0] in groups]


@pytest.fixture(scope="module")
def platform_objects(dev, prod) -> dict[str, list[dict]]:
    """Every Kubernetes object the platform program registers, per platform stack (synth under mocks)."""
    return {
        name: [copy.deepcopy(r.inputs) for r in synth.resources if {"apiVersion", "kind"} <= set(r.inputs)]
        for name, synth in (("dev", dev), ("prod", prod))
    }


def _render(stack: str, change: dict | None = None) -> list[dict]:
    """`python -m workloads render --stack STACK`'s objects, optionally with the job spec changed."""
    workload = load_stack(stack)
    raw = yaml.safe_load(stack_file(stack).read_text())["config"][CONFIG_KEY]
    spec = parse_spec({**raw, **(change or {})})
    facts, _ = platform_facts(workload.platform_stack, None)
    return render(spec, facts, program_text=program_text(spec))


def test_every_rule_of_every_crd_is_compiled(rules):
    # Counted independently of the schema walk: every x-kubernetes-validations list anywhere in a CRD.
    def count(node) -> int:
        if isinstance(node, dict):
            own = len(node.get("x-kubernetes-validations", []))
            return own + sum(count(v) for k, v in node.items() if k != "x-kubernetes-validations")
        return sum(count(v) for v in node) if isinstance(node, list) else 0

    # Every document of every file, as parsed once per process for the rules (6 MB of YAML: ~1.4 s again).
    total = sum(count(list(contracts._parsed(f))) for f in sorted(CRD_DIR.glob("*.yaml")))
    assert total > 100
    assert len(rules.rules) == total
    called = " ".join(r.rule for r in rules.rules)
    assert ".find(" in called and ".split(" in called  # the Kubernetes library functions are needed


def _crd(tmp_path, properties: dict) -> CrdRules:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", **properties}},
                        }
                    },
                }
            ],
        },
    }
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump(crd))
    return CrdRules(tmp_path)


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ("self.name.lowerAscii() == 'x'", "does not implement"),  # a library function not implemented here
        ("self.name ==", "cannot compile"),
        ("other.name == 'x'", "unknown variable"),
    ],
)
def test_a_rule_the_evaluator_cannot_run_fails_loading_instead_of_being_skipped(tmp_path, rule, why):
    with pytest.raises(RuleError, match=why):
        _crd(tmp_path, {"x-kubernetes-validations": [{"rule": rule}]})


def test_a_rule_text_is_compiled_once_and_a_refused_one_is_named_where_it_is_each_time(tmp_path):
    """The same rule in two CRDs (as in a CRD's served versions) runs one program, compiled once per process;
    a rule the evaluator cannot run is refused with its file, version and path at every load."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.size >= 0"}]}},
    }
    one, two = CrdRules.for_schema(schema, "One"), CrdRules.for_schema(schema, "Two")
    assert one.rules[0].program is two.rules[0].program
    assert one.validate_value("One", "x", {"spec": {"size": -1}}, None, schema)
    assert not two.validate_value("Two", "x", {"spec": {"size": 1}}, None, schema)
    where = re.escape("widgets.yaml v1 .spec: \"other.name == 'x'\" reads an unknown variable 'other'")
    for _ in range(2):
        with pytest.raises(RuleError, match=f"^{where}$"):
            _crd(tmp_path, {"x-kubernetes-validations": [{"rule": "other.name == 'x'"}]})


def _widget(spec: dict) -> dict:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


SEMANTICS = {
    "x-kubernetes-validations": [{"rule": "has(self.mode)", "message": "mode is defaulted first"}],
    "properties": {
        "mode": {"type": "string", "default": "fast"},
        "size": {
            "type": "integer",
            "x-kubernetes-validations": [
                {"rule": "self >= oldSelf", "messageExpression": "'may only grow from ' + string(oldSelf)"}
            ],
        },
        "first": {
            "type": "string",
            "x-kubernetes-validations": [
                {
                    "rule": "!oldSelf.hasValue() || self == oldSelf.value()",
                    "optionalOldSelf": True,
                    "message": "fixed once set",
                }
            ],
        },
        "keyed": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
                },
            },
        },
        "atomic": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "value": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
                },
            },
        },
    },
}


def test_evaluator_follows_the_api_servers_create_and_update_semantics(tmp_path):
    rules = _crd(tmp_path, SEMANTICS)
    keyed, atomic = [{"name": "k", "value": "1"}], [{"value": "1"}]
    old = _widget({"size": 5, "first": "a", "keyed": keyed, "atomic": atomic})
    assert rules.validate(old) == []  # defaulted mode; transition rules skipped on create...
    ran = {e.rule.rule for e in rules.evaluations}
    assert "!oldSelf.hasValue() || self == oldSelf.value()" in ran  # ...except optionalOldSelf ones
    assert "self >= oldSelf" not in ran

    new = copy.deepcopy(old)
    new["spec"] |= {"size": 3, "first": "b", "atomic": [{"value": "2"}]}
    new["spec"]["keyed"] = [{"name": "other", "value": "x"}, {"name": "k", "value": "2"}]
    found = {(v.path, v.message) for v in rules.validate(new, old)}
    assert found == {
        (".spec.size", "may only grow from 5"),  # messageExpression, with oldSelf
        (".spec.first", "fixed once set"),
        (".spec.keyed[1].value", "failed rule: self == oldSelf"),  # correlated by key, not index
    }  # atomic list items never correlate: their transition rule does not run


def test_kubernetes_library_functions_behave_as_upstream(tmp_path):
    rules = _crd(
        tmp_path,
        {
            "x-kubernetes-validations": [
                {"rule": "self.ref.find('^[^@]+') == 'al2023'", "message": "find"},
                {"rule": "self.ref.split('@') == ['al2023', 'v1', 'x']", "message": "split"},
                {"rule": "self.ref.split('@', 2) == ['al2023', 'v1@x']", "message": "split n"},
                {"rule": "self.ref.find('[0-9]{9}') == ''", "message": "find none"},
            ]
        },
    )
    assert rules.validate(_widget({"ref": "al2023@v1@x"})) == []
    found = {v.message for v in rules.validate(_widget({"ref": "bottlerocket@v1@x"}))}
    assert found == {"find", "split", "split n"}


@pytest.mark.parametrize("stack", PLATFORM_STACKS)
def test_platform_custom_resources_pass_every_rule(rules, platform_objects, stack):
    crs = _custom_resources(platform_objects[stack], rules)
    assert {"NodePool", "EC2NodeClass"} <= {o["kind"] for o in crs}
    missing = [f"{o['apiVersion']} {o['kind']}" for o in crs if rules.schema_for(o) is None]
    assert not missing, f"no CRD version for {missing}"
    violations = [str(v) for o in crs for v in rules.validate(o)]
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("stack", WORKLOAD_STACKS)
def test_workload_custom_resources_pass_every_rule(rules, stack):
    crs = _custom_resources(_render(stack), rules)
    assert {o["kind"] for o in crs} & {"TrainJob", "PyTorchJob", "MPIJob", "RayJob"}
    violations = [str(v) for o in crs for v in rules.validate(o)]
    assert not violations, "\n".join(violations)


def test_rules_using_the_kubernetes_functions_ran_on_real_objects(rules, platform_objects):
    for stack in PLATFORM_STACKS:
        for obj in _custom_resources(platform_objects[stack], rules):
            rules.validate(obj)
    for stack in WORKLOAD_STACKS:
        for obj in _custom_resources(_render(stack), rules):
            rules.validate(obj)
    ran = {(e.kind, e.rule.rule) for e in rules.evaluations if e.ok}
    kinds_with_find = {k for k, rule in ran if ".find(" in rule}
    assert {"NodePool"} <= kinds_with_find
    assert any(k == "EC2NodeClass" and ".split(" in rule for k, rule in ran)
    assert any(k == "TrainJob" and "metadata.name.matches" in rule for k, rule in ran)


def _one(objects: list[dict], kind: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind]
    return copy.deepcopy(obj)


def _rejected(rules: CrdRules, obj: dict, old: dict | None = None) -> set[str]:
    return {v.path for v in rules.validate(obj, old)}


def test_rules_reject_bad_platform_objects(rules, platform_objects):
    crs = _custom_resources(platform_objects["dev"], rules)
    pool = next(o for o in crs if o["kind"] == "NodePool")
    bad = copy.deepcopy(pool)
    reqs = bad["spec"]["template"]["spec"]["requirements"]
    reqs.append({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]})  # reserved key
    reqs.append({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["-1"]})
    assert {
        f".spec.template.spec.requirements[{len(reqs) - 2}].key",
        ".spec.template.spec.requirements",
    } <= _rejected(rules, bad)
    moved = copy.deepcopy(pool)
    moved["spec"]["template"]["spec"]["nodeClassRef"]["kind"] = "OtherNodeClass"
    assert ".spec.template.spec.nodeClassRef" in _rejected(rules, moved, pool)

    runtime = copy.deepcopy(next(o for o in crs if o["kind"] == "ClusterTrainingRuntime"))
    runtime["spec"]["mlPolicy"]["mpi"] = {}  # two ML policies at once
    assert ".spec.mlPolicy" in _rejected(rules, runtime)

    node_class = copy.deepcopy(next(o for o in crs if o["kind"] == "EC2NodeClass"))
    node_class["spec"]["amiSelectorTerms"] = [{"alias": "ubuntu@latest"}]
    assert ".spec.amiSelectorTerms[0].alias" in _rejected(rules, node_class)


def test_rules_reject_bad_queues_and_flavors(rules):
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "q"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
                }
            ]
        },
    }
    assert ".spec.resourceGroups[0]" in _rejected(rules, queue)
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "f"},
        "spec": {
            "tolerations": [
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
            ]
        },
    }
    assert ".spec.tolerations" in _rejected(rules, flavor)
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "l"},
        "spec": {"clusterQueue": "a"},
    }
    assert _rejected(rules, local | {"spec": {"clusterQueue": "b"}}, local) == {".spec.clusterQueue"}


def test_rules_reject_bad_and_changed_jobs(rules):
    trainjob_objects = _render("dev-zimdb")
    job = _one(trainjob_objects, "TrainJob")
    job["metadata"]["name"] = "Zimdb"
    assert "" in _rejected(rules, job)  # the root rule on metadata.name
    old = _one(trainjob_objects, "TrainJob")
    new = copy.deepcopy(old)
    new["spec"]["trainer"]["numProcPerNode"] = 2
    assert _rejected(rules, new, old) == {".spec.trainer"}

    runtime = _one(trainjob_objects, "TrainingRuntime")
    both = copy.deepcopy(runtime)
    both["spec"]["mlPolicy"]["mpi"] = {}
    assert ".spec.mlPolicy" in _rejected(rules, both)
    restarts = copy.deepcopy(runtime)
    restarts["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] += 1
    assert _rejected(rules, restarts, runtime) == {".spec.template.spec.failurePolicy"}

    pytorchjob = _one(_render("dev-zimdb-multinode"), "PyTorchJob")
    pytorchjob["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "a"}  # a Volcano queue
    requeued = copy.deepcopy(pytorchjob)
    requeued["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "b"}
    assert _rejected(rules, requeued, pytorchjob) == {".spec.runPolicy.schedulingPolicy.queue"}


# What a user changes in a workload stack's config between two `pulumi up`s.
UPDATES = {
    "new image": {"imageTag": "0.2.0"},
    "restart budget": {"restartBudget": 9},
    "more steps": {"trainerConfig": {"train": {"max_steps": 5000}}},
    "suspend": {"suspend": True},
}


@dataclass
class Registration:
    type: str
    name: str
    inputs: dict
    replace_on_changes: list[str]
    delete_before_replace: bool


class OptionsMonitor(runtime_mocks.MockMonitor):
    """The mock monitor, also keeping each registration's replace options (MockResourceArgs has none)."""

    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[Registration] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        inputs = json_format.MessageToDict(request.object)
        self.registered.append(
            Registration(
                request.type,
                request.name,
                inputs,
                list(request.replaceOnChanges),
                request.deleteBeforeReplace,
            )
        )
        return super().RegisterResource(request)


def facts_dump(facts) -> dict:
    """The facts as the platform's outputs (JSON values), for the StackReference mock."""
    return facts.model_dump(mode="json")


def _deploy(pulumi_mocks, stack: str) -> list[Registration]:
    """workloads.program for a committed workload stack under mocks; its registrations with options."""
    from workloads.program import program

    config = yaml.safe_load(stack_file(stack).read_text())["config"]
    outputs = facts_dump(platform_facts(config[PLATFORM_KEY], None)[0]) | {"kubeconfig": "{}"}
    monitor = OptionsMonitor(RecordingMocks(outputs))
    values = {PLATFORM_KEY: config[PLATFORM_KEY], CONFIG_KEY: config[CONFIG_KEY]}
    pulumi_mocks(monitor.mocks, stack=stack, config=values, monitor=monitor)
    pulumi.runtime.test(program)()
    return monitor.registered


def _covered(path: str, replace_on_changes: list[str]) -> bool:
    dotted = path.lstrip(".").split("[")[0]
    return any(dotted == p or dotted.startswith(p + ".") for p in replace_on_changes)


@pytest.mark.parametrize("stack", WORKLOAD_STACKS)
def test_updates_the_crds_refuse_replace_the_object_instead(rules, stack, pulumi_mocks):
    registered = _deploy(pulumi_mocks, stack)
    deployed = {r.inputs.get("kind"): r for r in registered if r.type.startswith("kubernetes:")}
    old = {o["kind"]: o for o in _custom_resources(_render(stack), rules)}
    refused = {}
    runs_trainer = load_stack(stack).spec.program.runs_trainer
    for change_name, change in UPDATES.items():
        if "trainerConfig" in change and not runs_trainer:
            continue
        for kind, obj in ((o["kind"], o) for o in _custom_resources(_render(stack, change), rules)):
            before = old[kind]
            if obj["metadata"]["name"] != before["metadata"]["name"]:
                assert obj["spec"] != before["spec"]  # a new object (the runtime): created, never updated
                continue
            for v in rules.validate(obj, before):
                refused.setdefault(kind, set()).add(v.path)
                options = deployed[kind]
                assert _covered(v.path, options.replace_on_changes), (
                    f"{stack}, {change_name}: {v} - but {kind} is updated in place "
                    f"(replaceOnChanges {options.replace_on_changes})"
                )
                assert options.delete_before_replace, f"{kind} keeps its name: the old one must go first"
    if "TrainJob" in old:
        assert refused["TrainJob"] == {".spec.trainer", ".spec.runtimeRef"}
    for kind, options in deployed.items():
        assert options.replace_on_changes == jobs.REPLACE_ON_CHANGES.get(kind, [])
    if "TrainingRuntime" in deployed:
        # Its Kubernetes name follows its spec, its Pulumi name does not: a change is one replacement,
        # create-first, so the new TrainJob's runtime exists when Trainer's webhook checks for it.
        runtime = deployed["TrainingRuntime"]
        assert runtime.name == f"{load_stack(stack).spec.name}-trainingruntime"
        assert not runtime.delete_before_replace


@pytest.mark.parametrize("stack", [s for s in WORKLOAD_STACKS if load_stack(s).spec.operator == "trainjob"])
def test_a_changed_runtime_is_a_new_runtime_its_trainjob_follows(rules, stack):
    old, new = _render(stack), _render(stack, UPDATES["restart budget"])
    old_runtime, new_runtime = _one(old, "TrainingRuntime"), _one(new, "TrainingRuntime")
    # Updated in place, the API server would refuse it:
    in_place = copy.deepcopy(new_runtime) | {"metadata": old_runtime["metadata"]}
    assert _rejected(rules, in_place, old_runtime) == {".spec.template.spec.failurePolicy"}
    assert new_runtime["metadata"]["name"] != old_runtime["metadata"]["name"]
    assert _one(new, "TrainJob")["spec"]["runtimeRef"]["name"] == new_runtime["metadata"]["name"]
    # Nothing that is not the runtime's spec renames it (a redeploy keeps it):
    assert _one(_render(stack, UPDATES["suspend"]), "TrainingRuntime") == old_runtime


@pytest.mark.parametrize("stack", WORKLOAD_STACKS)
def test_suspend_stays_an_in_place_update(rules, stack):
    old = {o["kind"]: o for o in _custom_resources(_render(stack), rules)}
    for obj in _custom_resources(_render(stack, UPDATES["suspend"]), rules):
        if obj["kind"] in ("TrainJob", "PyTorchJob"):
            assert rules.validate(obj, old[obj["kind"]]) == []
            changed = [p for p in ("spec.suspend", "spec.runPolicy.suspend") if _get(obj, p) is True]
            assert changed and not any(_covered(p, jobs.REPLACE_ON_CHANGES[obj["kind"]]) for p in changed)


def _get(obj: dict, dotted: str):
    for key in dotted.split("."):
        obj = obj.get(key, {}) if isinstance(obj, dict) else {}
    return obj


def _changes(old, new, path: str = "") -> list[str]:
    """The paths at which two objects differ (lists by index)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in old.keys() | new.keys() for c in _changes(old.get(k), new.get(k), f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        pairs = enumerate(zip(old, new, strict=True))
        return [c for i, (a, b) in pairs for c in _changes(a, b, f"{path}[{i}]")]
    return [] if old == new else [path]


POD_CHANGES = [
    (stack, change)
    for stack in WORKLOAD_STACKS
    for change in ("new image", "more steps")
    if change == "new image" or load_stack(stack).spec.program.runs_trainer  # trainerConfig: trainer only
]


@pytest.mark.parametrize(("stack", "change"), POD_CHANGES)
def test_a_changed_pod_replaces_the_job(stack, change):
    # The operators build pods from the job once: a new image updated in place would reach no running
    # pod (the Training Operator only creates missing ones), and the trainer reads its config only at
    # start, so a ConfigMap updated alone would change nothing or, worse, one restarted pod of a gang.
    spec = load_stack(stack).spec
    kind = JOB_KINDS[spec.operator]
    changed = _changes(_one(_render(stack), kind), _one(_render(stack, UPDATES[change]), kind))
    assert changed
    assert all(_covered(p, jobs.REPLACE_ON_CHANGES[kind]) for p in changed), changed


@pytest.mark.parametrize("stack", WORKLOAD_STACKS)
def test_every_job_has_a_deadline_and_a_changed_one_replaces_a_trainjob(rules, stack):
    spec = load_stack(stack).spec
    kind = JOB_KINDS[spec.operator]
    top_level = kind in ("TrainJob", "RayJob")  # the others': runPolicy
    path = "spec.activeDeadlineSeconds" if top_level else "spec.runPolicy.activeDeadlineSeconds"
    old, new = _one(_render(stack), kind), _one(_render(stack, {"maxRuntimeHours": 1.5}), kind)
    assert _get(old, path) == round(spec.max_runtime_hours * 3600) and _get(new, path) == 5400
    assert rules.validate(new) == []
    if kind == "TrainJob":
        # Immutable in the CRD: in place the API server refuses it, so Pulumi replaces the job.
        assert _rejected(rules, new, old) == {".spec.activeDeadlineSeconds"}
        assert _covered(path, jobs.REPLACE_ON_CHANGES[kind])
