"""The README's commands and names stay true: every `python -m` command it shows answers `--help` and knows
the flags the README passes it, every `make` target and variable exists in the Makefile, every stack it
names has its `Pulumi.<stack>.yaml`, every `mlops-eks:` key and `pulumi config set` key resolves in the
config models, every `pulumi stack output` name is an export, and every repository path it mentions exists.
The checks are plain functions over README text, so a deliberately wrong line shows each one firing."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
import typing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel

from infra.config.addons import AddonsConfig
from infra.config.platform import PlatformConfig
from workloads.spec import TrainingJobSpec

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()

# The launchers take their own flags, then a program (`-m MODULE` or a script) whose flags follow it.
LAUNCHERS = {"torchrun", "torch.distributed.run", "trainer.launch"}
PROGRAMS = {"trainer": "trainer", "trainer.gpu_check": "trainer.gpu_check",
            "trainer/gpu_check.py": "trainer.gpu_check"}  # fmt: skip
SUBCOMMANDS = {"infra", "workloads"}
# Stack outputs of a workload stack (workloads/program.py); a platform stack's are its example outputs.
WORKLOAD_EXPORTS = {"job_name", "namespace", "logs_command", "grafana_dashboard_path"}
PATH_RE = re.compile(
    r"(?<![\w/.-])(?:infra|workloads|trainer|policy|docker|scripts|schemas|tests|upstream)/[\w./*-]*"
    r"|(?<![\w/.-])(?:Pulumi\.[\w-]+\.yaml|PulumiPolicy\.yaml|pyproject\.toml|Makefile)(?![\w-])"
)


def code_blocks(text: str) -> list[str]:
    """Lines of the ```bash blocks, comments and continuation lines dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*", "", line).strip()
            if line:
                lines.append(line)
    return lines


def inline_spans(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [re.sub(r"\s+", " ", s).strip() for s in re.findall(r"`([^`]+)`", prose)]


def commands(text: str) -> list[list[str]]:
    """Every shell command of the code blocks and the inline spans, as tokens (pipes and `&&` split)."""
    out = []
    for line in code_blocks(text) + inline_spans(text):
        line = re.sub(r"\$\(([^)]*)\)", r"; \1 ;", line)  # a command substitution is a command too
        for part in re.split(r"\s(?:&&|\||;|>)\s|^;|;$| ; ", line):
            try:
                tokens = shlex.split(part)
            except ValueError:
                continue
            tokens = [t for t in tokens if not re.fullmatch(r"\w+=\S*", t) or tokens[0] == "make"]
            if tokens:
                out.append(tokens)
    return out


def python_module(tokens: list[str]) -> tuple[str, list[str]] | None:
    """`python -m MOD args` / `torchrun args` / `scripts/X.sh args` -> (MOD or script, args)."""
    head = Path(tokens[0]).name
    if re.fullmatch(r"scripts/[\w-]+\.sh", tokens[0]):
        return tokens[0], tokens[1:]
    if head == "torchrun":
        return "torch.distributed.run", tokens[1:]
    if re.fullmatch(r"python3?", head) and len(tokens) > 2 and tokens[1] == "-m":
        return tokens[2], tokens[3:]
    return None


def split_program(module: str, args: list[str]) -> list[tuple[tuple[str, ...], list[str]]]:
    """(help command key, flags it must accept) for a module and, for launchers and `run-local --`, for the
    program it runs."""
    args = [a.strip("[]") for a in args if a not in ("...", "…")]
    key: tuple[str, ...] = (module,)
    if module in SUBCOMMANDS and args and not args[0].startswith("-"):
        key, args = (module, args[0]), args[1:]
    parts = [(key, args)]
    if "--" in args:  # run-local: trainer flags after `--`
        i = args.index("--")
        parts = [(key, args[:i]), (("trainer",), args[i + 1 :])]
    elif module in LAUNCHERS:
        for i, a in enumerate(args):
            target = args[i + 1] if a == "-m" and i + 1 < len(args) else a
            if target in PROGRAMS and (a == "-m" or a.endswith(".py")):
                rest = args[i + 2 :] if a == "-m" else args[i + 1 :]
                parts = [(("torch.distributed.run",), args[:i]), ((PROGRAMS[target],), rest)]
                break
    return [(k, [a.split("=")[0] for a in flags if a.startswith("-") and a != "-"]) for k, flags in parts]


@functools.cache
def help_text(key: tuple[str, ...]) -> tuple[int, str]:
    command = [str(REPO / key[0])] if key[0].endswith(".sh") else [sys.executable, "-m", *key]
    try:
        proc = subprocess.run([*command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return -1, "no answer in 30 s: it started work instead of printing its usage"
    return proc.returncode, proc.stdout + proc.stderr


def cli_problems(text: str) -> list[str]:
    wanted = []
    for tokens in commands(text):
        if found := python_module(tokens):
            wanted += [(k, f, " ".join(tokens)) for k, f in split_program(*found)]
    with ThreadPoolExecutor(8) as pool:  # the --help runs are independent; 2 cores, mostly imports
        list(pool.map(help_text, {k for k, _, _ in wanted}))
    problems = []
    for key, flags, line in wanted:
        rc, out = help_text(key)
        if rc != 0 or not re.search(r"usage:|^\s+" + re.escape(key[0]), out, re.M):
            problems.append(f"`{line}`: `{' '.join(key)} --help` exits {rc}, no usage: {out[-300:]}")
            continue
        problems += [
            f"`{line}`: {' '.join(key)} has no flag {flag}"
            for flag in flags
            if not re.search(rf"(?<![\w.-]){re.escape(flag)}(?![\w-])", out)
        ]
    return problems


def make_problems(text: str) -> list[str]:
    makefile = (REPO / "Makefile").read_text()
    targets = {t for line in re.findall(r"^([\w .-]+):(?!=)", makefile, re.M) for t in line.split()}
    problems = []
    for tokens in commands(text):
        if tokens[0] != "make":
            continue
        for arg in tokens[1:]:
            if "=" in arg:
                var = arg.split("=")[0]
                if f"$({var})" not in makefile:
                    problems.append(f"`{' '.join(tokens)}`: the Makefile does not use {var}")
            elif not arg.startswith("-") and arg not in targets:
                problems.append(f"`{' '.join(tokens)}`: no make target {arg!r} (have {sorted(targets)})")
    return problems


def stacks_named(text: str) -> set[str]:
    named = set()
    for tokens in commands(text):
        for i, t in enumerate(tokens):
            value = None
            if t in ("--stack", "-s") and i + 1 < len(tokens):
                value = tokens[i + 1]
            elif t.startswith("STACK="):
                value = t.split("=", 1)[1]
            elif i == 3 and tokens[:2] == ["pulumi", "stack"] and tokens[2] in ("select", "rm"):
                value = t
            if value and not re.search(r"[<$]", value):
                named |= set(value.split("|"))
    return named


def stack_problems(text: str) -> list[str]:
    return [f"stack {s!r}: no Pulumi.{s}.yaml" for s in sorted(stacks_named(text))
            if not (REPO / f"Pulumi.{s}.yaml").is_file()]  # fmt: skip


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def resolves(model: type[BaseModel], path: list[str]) -> bool:
    """Whether a key path (camelCase aliases, `[i]` list indexes dropped) names a field of the model."""
    if not path:
        return True
    for name, field in model.model_fields.items():
        if path[0] in (name, field.alias):
            rest = path[1:]
            subs = _models_in(field.annotation)
            return not rest or any(resolves(m, rest) for m in subs)
    return False


def key_path(key: str) -> list[str]:
    return [p for p in re.sub(r"\[[^\]]*\]", "", key).split(".") if p]


def config_key_problems(text: str) -> list[str]:
    keys = set(re.findall(r"mlops-eks:([A-Za-z][\w.\[\]<>*]*)(?![\w-])", text))
    for tokens in commands(text):
        if tokens[:3] == ["pulumi", "config", "set"]:
            key = next((t for t in tokens[3:] if not t.startswith("-")), None)
            if key is None:
                continue
            if ":" not in key:
                keys.add(key)  # the project's own namespace
            elif key.startswith("mlops-eks:"):
                keys.add(key.removeprefix("mlops-eks:"))
    problems = []
    for key in sorted(keys):
        path = key_path(key)
        if path[0] in ("job", "platformStack"):
            ok = path[0] == "platformStack" or resolves(TrainingJobSpec, path[1:])
        else:
            ok = resolves(PlatformConfig, path)
        if not ok:
            problems.append(f"mlops-eks:{key}: not a key of the config models")
    return problems


TRAINER_SECTIONS = {"data", "model", "train", "checkpoint", "output"}
FILE_EXT = r"\.(pt|json|jsonl|ya?ml|py|parquet|csv|toml)$"  # `model.pt` is a file, not a key


def dotted_key_problems(text: str) -> list[str]:
    """Backticked add-on keys relative to `addons` (`training.gangScheduler`) resolve in AddonsConfig,
    trainer keys (`train.max_steps`) are flags of `python -m trainer` or keys of the job spec."""
    sections = {name for name, f in AddonsConfig.model_fields.items()} | {
        f.alias for f in AddonsConfig.model_fields.values() if f.alias
    }
    problems = []
    for span in set(inline_spans(text)):
        key = span.split(":")[0].strip()
        if not re.fullmatch(r"(addons\.)?[a-z]\w*\.[A-Za-z][\w.]*", key) or re.search(FILE_EXT, key):
            continue
        path = key_path(key.removeprefix("addons."))
        if key_path(key)[0] in sections | {"addons"}:
            if not resolves(AddonsConfig, path) and not resolves(TrainingJobSpec, path):
                problems.append(f"`{span}`: {key} is not a key of AddonsConfig")
        elif path[0] in TRAINER_SECTIONS and len(path) == 2:
            flag = re.compile(rf"--{re.escape(key)}(?![\w.])")
            if not flag.search(help_text(("trainer",))[1]) and not resolves(TrainingJobSpec, path):
                problems.append(f"`{span}`: {key} is neither a trainer config key nor a job spec key")
    return problems


def output_problems(text: str) -> list[str]:
    import json

    platform = set(json.loads((REPO / "workloads/examples/platform-dev.json").read_text()))
    problems = []
    for tokens in commands(text):
        if tokens[:3] == ["pulumi", "stack", "output"]:
            names = [t for t in tokens[3:] if not t.startswith("-") and t not in stacks_named(text)]
            problems += [f"`{' '.join(tokens)}`: no stack output {n!r}" for n in names
                         if n not in platform | WORKLOAD_EXPORTS]  # fmt: skip
    return problems


def path_problems(text: str) -> list[str]:
    problems = []
    text = re.sub(r"/\s*\n\s*", "/", re.sub(r"https?://\S+", "", text))  # a path wrapped after a slash
    for match in PATH_RE.finditer(text):
        path = match.group(0).rstrip(".")
        if text[match.end() : match.end() + 1] in ("<", "{") or path.startswith("Pulumi.<"):
            continue  # a placeholder: workloads/examples/platform-<platform stack>.json
        if not list(REPO.glob(path.rstrip("/"))):
            problems.append(f"{path}: no such file in the repository")
    return problems


CHECKS = [cli_problems, make_problems, stack_problems, config_key_problems, dotted_key_problems,
          output_problems, path_problems]  # fmt: skip


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_readme_is_true(check):
    assert check(README) == []


def test_readme_commands_are_found():
    """The parser sees the README's commands, so an empty problem list means they were checked."""
    found = {" ".join(k) for t in commands(README) if (m := python_module(t)) for k, _ in split_program(*m)}
    assert {"infra synth", "workloads render", "workloads run-local", "workloads status", "workloads logs",
            "trainer", "trainer.launch", "trainer.bench", "policy.scan", "trainer.gpu_check",
            "scripts/build-images.sh"} <= found  # fmt: skip
    assert {"dev", "prod", "dev-zimdb", "dev-gpu-check"} <= stacks_named(README)


WRONG = {
    cli_problems: ["```bash\nscripts/build-images.sh --stack dev --dry\n```",
                   "```bash\npython -m workloads render --stack dev-zimdb --platform-output dev.json\n```",
                   "Run `python -m workloads deploy --stack dev-zimdb`.",
                   "```bash\npython -m workloads run-local --stack dev-zimdb -- --train.max_step 20\n```",
                   "`python -m trainer.launch --shutdown-timeout=160 -m trainer --checkpoint.every 5`"],
    make_problems: ["```bash\nmake deploy STACK=dev\n```", "`make demo TORCH_INDEX=https://x`"],
    stack_problems: ["```bash\npython -m infra synth --stack staging\n```", "`make up STACK=dev-imdb`"],
    config_key_problems: ["`mlops-eks:natGateway`",
                          "```bash\npulumi config set --path 'mlops-eks:job.imageTags' abc\n```",
                          "```bash\npulumi config set --secret grafanaPassword x\n```"],
    dotted_key_problems: ["(`training.gangSchedulers`)", "`addons.karpenter.amiAliases: x`",
                          "`train.warmup_step` defaults to a tenth", "`checkpoint.s4`"],
    output_problems: ["```bash\npulumi stack output cluster --stack dev\n```"],
    path_problems: ["see `infra/clusters.py`", "the table in trainer/fault.py",
                    "`tests/infra/\ntest_nope.py`"],
}  # fmt: skip


@pytest.mark.parametrize("check", WRONG, ids=lambda c: c.__name__)
def test_each_check_finds_a_wrong_line(check):
    for line in WRONG[check]:
        assert check(line), f"{check.__name__} let through: {line}"


def test_readme_figures_match_the_code(dev, prod):
    """The figures the README states: the demo's accuracy ceiling and the idle cost per stack (as
    `python -m infra synth --stack <stack>` prints it)."""
    from infra.tools.idle_cost import idle_cost_report
    from trainer import zimdb

    ceiling = re.search(r"ceiling of the default validation split \(1,000 reviews\) is \*\*([\d.]+)", README)
    assert ceiling and float(ceiling.group(1)) == round(zimdb.ceiling(1000, 1000003), 3)
    stated = dict(re.findall(r"(dev|prod) about \$([\d.]+)/h", README))
    assert set(stated) == {"dev", "prod"}
    reports = {"dev": idle_cost_report(dev.config), "prod": idle_cost_report(prod.config)}
    for stack, usd in stated.items():
        total = re.search(r"total per hour\s+\$\s*([\d.]+)", reports[stack])
        assert total, reports[stack]
        assert round(float(total.group(1)), 2) == float(usd), f"{stack}: synth {total.group(1)}, README {usd}"


def test_the_deploy_steps_are_the_ones_the_rehearsal_runs_in_order():
    """The README's "Deploy to AWS" commands are `infra/tools/rehearse.py`'s STEPS for dev, in order, and
    the section says what only AWS can confirm."""
    from infra.tools.rehearse import STEPS

    section = README.split("## Deploy to AWS", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no command block in Deploy to AWS"
    shown = [re.sub(r"(^|\s)#.*", "", line).strip() for line in block[1].splitlines()]
    assert [line for line in shown if line] == [step.command.replace("{stack}", "dev") for step in STEPS]
    assert "What only a real `pulumi up` verifies" in section and "python -m infra rehearse" in section


def test_the_workload_deploy_steps_are_the_ones_the_rehearsal_runs_in_order():
    from infra.tools.rehearse import WORKLOAD_STEPS

    section = README.split("## Workload stacks", 1)[1].split("\n## ", 1)[0]
    lines = code_blocks(section)
    wanted = [step.command.replace("{stack}", "dev-zimdb") for step in WORKLOAD_STEPS]
    positions = [lines.index(command) for command in wanted]
    assert positions == sorted(positions), lines
