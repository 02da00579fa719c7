"""The ledger of admission (sim/admission/ledger.yaml) names every webhook and ValidatingAdmissionPolicy the
platform registers, as the charts render (the session's `rendered`: dev and prod) and as the kustomize
overlays and the platform program create them, with the match facts they render with, and says for each
how it is judged or why it needs no port."""

from __future__ import annotations

import importlib

import pytest
import yaml

from infra.addons import training_operator_v1
from infra.contract import KUEUE_NAMESPACE_LABEL
from sim.admission import chain

LEDGER = chain.ledger()
FIX = "add an entry to sim/admission/ledger.yaml (its header says what each field means); as rendered:"
POLICY_TYPE = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"


def _facts(webhook: dict, kind: str, installed_by: str, kueue_selector: dict) -> dict:
    """A rendered webhook in the ledger's terms."""
    selector = webhook.get("namespaceSelector")
    if selector and selector != kueue_selector:
        raise AssertionError(f"{webhook['name']}: a namespaceSelector the ledger has no word for: {selector}")
    order = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"]
    return {
        "installed_by": installed_by,
        "type": "mutating" if kind.startswith("Mutating") else "validating",
        "resources": sorted(
            {
                f"{g}/{r}" if g else r
                for rule in webhook["rules"]
                for g in rule["apiGroups"]
                for r in rule["resources"]
            }
        ),
        "operations": sorted({o for r in webhook["rules"] for o in r["operations"]}, key=order.index),
        "namespaces": "kueue-managed" if selector else "all",
        "objects": webhook.get("objectSelector") or "all",
        "failure_policy": webhook.get("failurePolicy") or "Fail",
    }


@pytest.fixture(scope="module")
def registered(rendered, dev, prod) -> dict[str, dict]:
    """Every webhook the platform registers: name -> its facts (the same in dev and prod, else a failure)."""
    found: dict[str, dict] = {}

    def add(name: str, facts: dict) -> None:
        assert found.setdefault(name, facts) == facts, f"{name} renders differently across stacks"

    for stack, synth in (("dev", dev), ("prod", prod)):
        # "kueue-managed": the managedJobsNamespaceSelector the platform gives Kueue (training.py).
        (kueue,) = [r for r in synth.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "kueue"]
        config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
        kueue_selector = config["managedJobsNamespaceSelector"]
        assert kueue_selector["matchLabels"] == {KUEUE_NAMESPACE_LABEL: "true"}
        for release, objects in rendered[stack].objects.items():
            for obj in objects:
                if obj["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
                    for webhook in obj["webhooks"]:
                        add(webhook["name"], _facts(webhook, obj["kind"], f"{release} chart", kueue_selector))
    for directory in (training_operator_v1.OVERLAY, training_operator_v1.VOLCANO_OVERLAY):
        for obj in training_operator_v1.build(directory).objects:
            if obj["kind"] == "ValidatingWebhookConfiguration":
                for webhook in obj["webhooks"]:
                    add(webhook["name"], _facts(webhook, obj["kind"], training_operator_v1.OVERLAY, {}))
    return found


@pytest.fixture(scope="module")
def policies(rendered, dev, prod) -> set[str]:
    """Every ValidatingAdmissionPolicy: from the charts and from the platform program itself."""
    names = {
        o["metadata"]["name"]
        for stack in ("dev", "prod")
        for objs in rendered[stack].objects.values()
        for o in objs
        if o["kind"] == "ValidatingAdmissionPolicy"
    }
    for synth in (dev, prod):
        names |= {(r.inputs.get("metadata") or {}).get("name") or r.name for r in synth.of_type(POLICY_TYPE)}
    return names


def test_the_ledger_names_every_registered_webhook_and_nothing_else(registered):
    missing = sorted(set(registered) - set(LEDGER["webhooks"]))
    stale = sorted(set(LEDGER["webhooks"]) - set(registered))
    shown = yaml.safe_dump(
        {n: registered[n] | {"sees": [], "not_modelled": "..."} for n in missing}, width=110
    )
    assert not missing, f"webhooks not in the ledger: {missing}; {FIX}\n{shown}"
    assert not stale, f"the ledger names webhooks nothing registers: {stale}; remove their entries"


def test_each_entry_matches_what_the_render_registers(registered):
    for name, facts in registered.items():
        entry = {k: LEDGER["webhooks"][name].get(k) for k in facts}
        assert entry == facts, f"{name}: the ledger says {entry}, the render {facts}; update its entry"


def test_the_ledger_names_every_validating_admission_policy(policies):
    missing = sorted(policies - set(LEDGER["policies"]))
    assert not missing, f"ValidatingAdmissionPolicies not in the ledger: {missing}; {FIX} (under `policies:`)"
    assert not sorted(set(LEDGER["policies"]) - policies), "the ledger names policies nothing creates"


@pytest.mark.parametrize("name", sorted({**LEDGER["webhooks"], **LEDGER["policies"]}))
def test_each_entry_says_how_it_is_judged(name):
    entry = {**LEDGER["webhooks"], **LEDGER["policies"]}[name]
    assert isinstance(entry["sees"], list)
    if "judged_by" in entry:
        assert entry["sees"] and entry["upstream"].count("@") == 1, name
        module, _, function = entry["judged_by"].rpartition(".")
        assert callable(getattr(importlib.import_module(module), function)), name
        # The chain runs it: every port is wired, as the webhook calls it.
        assert entry["judged_by"] in {**chain.VALIDATE, **chain.MUTATE}, name
        assert (entry["type"] == "mutating") == (entry["judged_by"] in chain.MUTATE), name
    else:
        assert entry.get("not_modelled"), f"{name}: give `judged_by` and `upstream`, or `not_modelled`"
