"""The guardrails hold against the ways around them (tests/policy/bypasses.py), agree with config
validation, decide prod by one rule, and refuse documentation placeholders under a real engine."""

from __future__ import annotations

import json

import pytest

from infra.config.environment import ENVIRONMENT_KEY, environment_of
from infra.config.platform import ConfigError, PlatformConfig
from infra.config.pulumi_config import check_placeholders
from policy import pack
from policy.core import Resource, evaluate, stack_config, stack_is_prod
from policy.pack import RULES
from tests.policy.bypasses import ATTEMPTS, EKS, figures, reported
from workloads.spec import SpecError, parse_spec


@pytest.mark.parametrize("attempt", ATTEMPTS, ids=[f"{a.policy}: {a.what}" for a in ATTEMPTS])
def test_policy_reports_the_bypass(attempt):
    assert reported(attempt), f"{attempt.policy} let through {attempt.what}: {attempt.inputs}"


def test_every_attempt_names_a_policy_of_the_pack():
    names = {r.name for r in RULES}
    assert {a.policy for a in ATTEMPTS} <= names
    assert all(caught == n for caught, n in figures().values())


# --- one definition of prod ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "config", "tags", "prod"),
    [
        ("production", {}, {}, True),  # no key: prod, whatever the stack is called
        ("staging", {}, {}, True),
        ("dev", {}, {"environment": "dev"}, True),  # a tag cannot relax what the program enforces
        ("prod", {ENVIRONMENT_KEY: "dev"}, {}, False),  # the key decides, not the name
        ("anything", {ENVIRONMENT_KEY: "prod"}, {}, True),
        ("anything", {ENVIRONMENT_KEY: "Dev"}, {}, True),  # the program refuses it; the pack fails safe
    ],
)
def test_the_pack_decides_prod_from_the_stack_config_only(monkeypatch, stack, config, tags, prod):
    # What the engine hands a policy pack (pulumi/pulumi analyzer_plugin.go constructEnv).
    monkeypatch.setenv("PULUMI_STACK", stack)
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(config))
    assert pack._prod(tags) is prod


@pytest.mark.parametrize("stack", ["dev", "prod", "dev-zimdb", "prod-a100"])
def test_program_pack_and_clis_agree_on_every_committed_stack(stack):
    config = stack_config(stack)
    expected = environment_of(config) == "prod"
    assert stack_is_prod(stack) is expected
    if "mlops-eks:platformStack" not in config:
        assert (PlatformConfig.from_mapping(config).environment == "prod") is expected


def test_a_platform_stack_without_the_key_is_validated_as_prod():
    config = {k: v for k, v in stack_config("dev").items() if k != ENVIRONMENT_KEY}
    with pytest.raises(ConfigError, match="systemNodes.capacityType"):  # dev's spot system nodes
        PlatformConfig.from_mapping(config)


# --- config validation refuses what the policies refuse -----------------------------------------

ENDPOINT_REFUSALS = [
    ("dev", ["0.0.0.0/0"]),
    ("prod", ["0.0.0.0/0"]),
    ("prod", ["203.0.0.0/16"]),
    *[("prod" if a.prod else "dev", list(a.inputs["publicAccessCidrs"])) for a in ATTEMPTS if a.type_ == EKS],
]


def _platform(environment: str, cidrs: list[str]) -> dict:
    config = dict(stack_config("prod"))
    config[ENVIRONMENT_KEY] = environment
    config["mlops-eks:endpointPublicAccess"] = True
    config["mlops-eks:publicAccessCidrs"] = cidrs
    return config


def _endpoint_findings(environment: str, cidrs: list[str]) -> list:
    """What the endpoint policies report for a cluster with a public endpoint open to `cidrs`."""
    cluster = {
        "endpointPrivateAccess": True,
        "endpointPublicAccess": True,
        "publicAccessCidrs": cidrs,
        "version": "1.35",
    }
    endpoint_rules = [r for r in RULES if r.name.startswith("eks-") and "endpoint" in r.name]
    assert endpoint_rules
    return evaluate(
        [Resource(type=EKS, name="c", inputs=cluster)], endpoint_rules, prod=environment == "prod"
    )


@pytest.mark.parametrize(("environment", "cidrs"), ENDPOINT_REFUSALS)
def test_config_refuses_every_endpoint_the_policies_refuse(environment, cidrs):
    assert _endpoint_findings(environment, cidrs), f"no endpoint policy refuses {cidrs} in {environment}"
    with pytest.raises(ConfigError, match="publicAccessCidrs"):
        PlatformConfig.from_mapping(_platform(environment, cidrs))


@pytest.mark.parametrize(
    ("environment", "cidrs"),
    [("prod", ["100.64.7.0/25", "100.64.7.128/25"]), ("dev", ["100.64.0.0/17", "100.64.128.0/17"])],
    ids=["prod-one-/24", "dev-one-/16"],
)
def test_config_accepts_the_endpoints_the_policies_accept(environment, cidrs):
    found = _endpoint_findings(environment, cidrs)
    assert found == [], f"the endpoint policies refuse {cidrs} in {environment}: {found}"
    config = PlatformConfig.from_mapping(_platform(environment, cidrs))
    assert config.public_access_cidrs == cidrs


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"imageTag": "latest"}, "imageTag"),
        ({"imageTag": "LATEST"}, "imageTag"),
        ({"imageTag": None, "image": "ghcr.io/example/trainer:latest"}, "image"),
        ({"imageTag": None, "image": "ghcr.io/example/trainer"}, "image"),
    ],
)
def test_job_spec_refuses_the_images_the_policy_refuses(change, key):
    raw = {k: v for k, v in {**stack_config("dev-zimdb")["mlops-eks:job"], **change}.items() if v is not None}
    image = raw.get("image") or f"1.dkr.ecr.us-east-1.amazonaws.com/cuda:{raw['imageTag']}"
    pod = {"kind": "Pod", "spec": {"containers": [{"name": "c", "image": image}]}}
    assert evaluate([Resource(type="kubernetes:core/v1:Pod", name="p", inputs=pod)], RULES)
    with pytest.raises(SpecError, match=key):
        parse_spec(raw)


# --- documentation placeholders ---------------------------------------------------------------


def test_a_real_engine_refuses_the_committed_placeholders():
    for stack in ("dev", "prod"):
        with pytest.raises(ConfigError) as err:
            check_placeholders(stack_config(stack), "refuse")
        assert "123456789012" in str(err.value)
    message = str(pytest.raises(ConfigError, check_placeholders, stack_config("dev"), "refuse").value)
    for placeholder in ("adminPrincipalArns[0]", "203.0.113.0/24", "ami-0123456789abcdef0"):
        assert placeholder in message


def test_offline_synth_of_the_placeholders_only_warns(monkeypatch):
    warnings: list[str] = []
    monkeypatch.setattr("pulumi.log.warn", lambda message, *a, **k: warnings.append(message))
    check_placeholders(stack_config("prod"), "warn")
    assert any("198.51.100.7/32" in w and "accepted offline only" in w for w in warnings)


def test_the_program_refuses_placeholders_unless_the_offline_command_says_warn(pulumi_mocks, monkeypatch):
    """Whoever runs it, the program refuses the committed files' placeholders by default (what `pulumi up`
    runs through __main__.py); only an offline command that says so explicitly gets warnings."""
    warnings: list[str] = []
    monkeypatch.setattr("pulumi.log.warn", lambda message, *a, **k: warnings.append(message))
    pulumi_mocks(config=stack_config("dev"))
    with pytest.raises(ConfigError, match=r"adminPrincipalArns\[0\].*this one is an example"):
        PlatformConfig.from_pulumi()
    assert warnings == []
    assert PlatformConfig.from_pulumi("warn") == PlatformConfig.from_mapping(stack_config("dev"))
    assert any("adminPrincipalArns[0]" in w and "accepted offline only" in w for w in warnings)


def test_the_placeholder_policy_is_mandatory_under_the_engine_and_a_warning_offline():
    entry = Resource(
        type="aws:eks/accessEntry:AccessEntry",
        name="admin",
        inputs={"principalArn": "arn:aws:iam::123456789012:role/platform-admin"},
    )
    assert [f.level for f in evaluate([entry], RULES, engine=True)] == ["mandatory"]
    engine_policy = next(p for p in pack.policies() if p.name == "no-documentation-placeholders")
    assert engine_policy.enforcement_level.value == "mandatory"
    assert [f.level for f in evaluate([entry], RULES)] == ["advisory"]
    real = Resource(
        type=entry.type, name="admin", inputs={"principalArn": "arn:aws:iam::210987654321:role/a"}
    )
    assert evaluate([real], RULES, engine=True) == []
