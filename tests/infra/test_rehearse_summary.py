"""`infra rehearse` ends by naming every step it counts: the config steps print no progress line of their
own, so a count alone ("7 steps passed" after three `==>` lines) left the user guessing."""

from __future__ import annotations

from infra.__main__ import main as infra_main
from infra.tools import rehearse

STEPS = [
    "pulumi stack select dev --create",
    "pulumi config set --path 'mlops-eks:adminPrincipalArns[0]' arn:aws:iam::111122223333:role/admin",
    "make preview STACK=dev",
    "make up STACK=dev",
]


class _Rehearsal:
    def __init__(self, **_):
        pass

    def run(self, stack, path):
        return STEPS


def test_rehearse_names_each_step_it_counts(monkeypatch, capsys):
    monkeypatch.setattr(rehearse, "Rehearsal", _Rehearsal)
    assert infra_main(["rehearse", "--stack", "dev"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "rehearsed dev: 4 steps passed"
    assert out[1:] == [f"  {n}. {step}" for n, step in enumerate(STEPS, 1)]
