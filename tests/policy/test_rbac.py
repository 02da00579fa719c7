"""RBAC judged by effect (policy/rbac.py, policy/k8s_rbac.py): which rule grants what, where a binding
holds it, and Training Operator v1's grants, which the engine sees at `pulumi up` (kustomize's children)
though no offline render has them."""

from __future__ import annotations

import pytest

from policy.core import Resource
from policy.k8s_rbac import check_effective_privileges, effective_grants, subjects
from policy.rbac import CLUSTER, dangers, grants

# Training Operator v1's ClusterRole and binding at the commit infra/pins.py pins, the grants that escalate
# (kubeflow/trainer@bde9c20903ad9b54af1f3883e4fa764a3c0db797 manifests/base/rbac/role.yaml and
# cluster-role-binding.yaml; the standalone overlay puts the service account in `kubeflow`).
TRAINING_OPERATOR_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "update", "watch"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations"],
        "verbs": ["get", "list", "update", "watch"],
    },
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["rolebindings"],
        "verbs": ["create", "list", "update", "watch"],
    },
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles"],
        "verbs": ["create", "list", "update", "watch"],
    },
]
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"


def _training_operator() -> list[Resource]:
    role = {"metadata": {"name": "training-operator"}, "rules": TRAINING_OPERATOR_RULES}
    binding = {
        "metadata": {"name": "training-operator"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "training-operator",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}],
    }
    return [
        Resource(type=f"{RBAC}:ClusterRole", name="training-operator", inputs=role),
        Resource(type=f"{RBAC}:ClusterRoleBinding", name="training-operator", inputs=binding),
    ]


def test_training_operator_v1_passes_only_through_its_accepted_grants():
    found = {(b, s, w) for _, b, s, w, _ in effective_grants(_training_operator())}
    assert {w for _, _, w in found} == {
        "pods/exec: commands in any pod",
        "reads Secrets (every service account token and credential)",
        "writes admission configuration: sees or rewrites every object, or lifts the admission policies",
    }
    assert list(check_effective_privileges(_training_operator())) == []
    # The same grants for another subject are not accepted.
    other = [
        r
        if r.type.endswith("Role")
        else Resource(
            type=r.type,
            name=r.name,
            inputs={**r.inputs, "subjects": [{"kind": "ServiceAccount", "name": "x", "namespace": "team-a"}]},
        )
        for r in _training_operator()
    ]
    assert len(list(check_effective_privileges(other))) == 3


@pytest.mark.parametrize(
    ("rule", "resource", "verb", "granted"),
    [
        ({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["create"]}, "pods/exec", "create", True),
        ({"apiGroups": [""], "resources": ["*/exec"], "verbs": ["*"]}, "pods/exec", "create", True),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}, "secrets", "get", True),
        ({"apiGroups": ["apps"], "resources": ["secrets"], "verbs": ["get"]}, "secrets", "get", False),
        (
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["a"]},
            "secrets",
            "get",
            False,
        ),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}, "pods/exec", "create", False),
    ],
)
def test_a_rule_grants_by_its_lists_and_wildcards(rule, resource, verb, granted):
    assert grants(rule, "", resource, verb) is granted


def test_where_a_grant_holds_decides_what_it_is_worth():
    exec_ = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]
    assert dangers(exec_, "team-a") == []
    assert dangers(exec_, "kube-system") == dangers(exec_, CLUSTER) == ["pods/exec: commands in any pod"]
    nodes = [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    assert dangers(nodes, "kube-system") == []  # nodes are cluster-scoped: a RoleBinding grants nothing
    assert dangers(nodes, CLUSTER)


def test_a_user_named_as_a_service_account_is_that_service_account():
    binding = {"subjects": [{"kind": "User", "name": "system:serviceaccount:team-a:runner"}]}
    assert subjects(binding) == [("ServiceAccount", "runner", "team-a")]
