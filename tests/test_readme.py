"""The README and the pages under docs/ stay true: every `python -m` command they show answers `--help` and
knows the flags they pass it, every `make` target and variable exists in the Makefile, every stack they name
has its `Pulumi.<stack>.yaml`, every `mlops-eks:` key and `pulumi config set` key resolves in the config
models, every `pulumi stack output` name is an export, every repository path they mention exists, every
relative link and its anchor resolve. The README stays a first screen (at most 200 lines, linking every
page), the code layout names every file, the exit-code table is trainer/faults.py's, and a reference to a
README or docs section anywhere in the repository names a heading that exists. The checks are plain
functions over text, so a deliberately wrong line shows each one firing."""

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
from infra.config.stack_files import HUB_TOKEN_KEY
from workloads.spec import TrainingJobSpec

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
DOCS = "\n".join(p.read_text() for p in PAGES)  # everything a user reads, for the checks across pages
README_MAX_LINES = 200

# The launchers take their own flags, then a program (`-m MODULE` or a script) whose flags follow it.
LAUNCHERS = {"torchrun", "torch.distributed.run", "trainer.launch"}
PROGRAMS = {"trainer": "trainer", "trainer.gpu_check": "trainer.gpu_check",
            "trainer/gpu_check.py": "trainer.gpu_check"}  # fmt: skip
SUBCOMMANDS = {"infra", "workloads"}
# Stack outputs of a workload stack (workloads/program.py); a platform stack's are its example outputs.
WORKLOAD_EXPORTS = {"job_name", "namespace", "logs_command", "grafana_dashboard_path"}
PATH_RE = re.compile(
    r"(?<![\w/.-])(?:infra|workloads|trainer|policy|docker|scripts|schemas|tests|upstream|docs)/[\w./*-]*"
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
        if path[0] in ("job", "platformStack", HUB_TOKEN_KEY.removeprefix("mlops-eks:")):
            ok = path[0] != "job" or resolves(TrainingJobSpec, path[1:])
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


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_readme_and_docs_are_true(check, page):
    assert check(page.read_text()) == []


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)  # a `# comment` in a code block is no heading
    return [h.strip() for h in re.findall(r"^#{1,6} (.+)$", prose, re.M)]


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_problems(text: str, page: Path) -> list[str]:
    """Relative links of a page resolve to a file of the repository, and their anchors to a heading there."""
    problems = []
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file() or REPO not in file.parents:
            problems.append(f"{page.name}: link {target}: no such file in the repository")
        elif anchor and anchor not in anchors(file.read_text()):
            problems.append(f"{page.name}: link {target}: no heading with that anchor in {path or page.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_resolve(page):
    assert link_problems(page.read_text(), page) == []


def test_the_readme_is_a_first_screen_that_links_every_page():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"
    linked = {(REPO / t.partition("#")[0]).resolve() for t in re.findall(r"\]\(([^)\s#]+)[^)]*\)", README)}
    unlinked = [page_id(p) for p in PAGES[1:] if p.resolve() not in linked]
    assert unlinked == [], f"docs pages the README does not link: {unlinked}"


def test_the_readme_gives_the_cpu_torch_advice_before_any_install():
    """On Linux a plain torch install pulls the CUDA build (several GB): the first command a reader meets
    already asks for the CPU build, within the first screen."""
    first = code_blocks(README)[0]
    assert first.startswith("make demo") and "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in first
    advice = README.index("pulls the CUDA build")
    assert advice < README.index("CPU-only build") < README.index("```bash")
    assert len(README[: README.index("make demo TORCH_INDEX_URL")].splitlines()) < 40


# Dotfiles, package markers (`__init__.py`) and the pages themselves.
LAYOUT_SKIP = re.compile(r"(^|/)\.[^/]+$|(^|/)__init__\.py$|^README\.md$|^docs/")


def layout_problems(layout: str, files: list[str]) -> list[str]:
    """Every file is named in the code layout by its path, a listed folder, or a `<placeholder>` pattern: the
    names a list item describes (`name`: or `name`,), not a heading's folder or a name in a description."""
    items = "\n".join(line for line in layout.splitlines() if line.startswith("- "))
    named = set(re.findall(r"`([^`\s]+)`[:,]", items))
    folders = tuple(n for n in named if n.endswith("/"))
    patterns = [re.compile(re.sub(r"<[^>]+>", "[^/]+", re.escape(n))) for n in named if "<" in n]
    return [f"{f}: not in the code layout (docs/development.md)" for f in files
            if not LAYOUT_SKIP.search(f) and f not in named and not f.startswith(folders)
            and not any(p.fullmatch(f) for p in patterns)]  # fmt: skip


def test_the_code_layout_names_every_file():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    layout = (REPO / "docs/development.md").read_text().split("## Code layout", 1)[1]
    assert layout_problems(layout, files.split()) == []


def exit_code_rows(markdown: str) -> dict[int, str]:
    """The exit-code table of docs/trainer.md: code -> its retry column."""
    section = markdown.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    return {int(code): retry for code, retry in re.findall(r"^\| (\d+) \|.*\| ([^|]+) \|$", section, re.M)}


def test_the_exit_code_table_is_the_one_in_trainer_faults():
    """docs/trainer.md's table lists exactly the codes of trainer/faults.py's table, and says retry for 128
    and up (what the operators are configured to retry) and no below."""
    import ast

    from trainer import faults

    source = (REPO / "trainer/faults.py").read_text()
    documented = {int(c) for c in re.findall(r"^  (\d+)  ", ast.get_docstring(ast.parse(source)) or "", re.M)}
    constants = {v for k, v in vars(faults).items() if k.isupper() and isinstance(v, int)}
    assert constants <= documented
    rows = exit_code_rows((REPO / "docs/trainer.md").read_text())
    assert set(rows) == documented
    assert all(rows[c].startswith("yes" if c >= 128 else "no") for c in rows), rows


SECTION_REF = re.compile(r"(?<![\w/.-])(README(?:\.md)?|docs/[\w-]+\.md)[,:]? \\?\"([^\"\\\n]+)\\?\"")


def section_reference_problems(text: str, where: str) -> list[str]:
    """`README "Section"` / `docs/page.md "Section"` in code and comments name a heading of that page."""
    problems = []
    for page, section in SECTION_REF.findall(text):
        file = REPO / ("README.md" if page.startswith("README") else page)
        titles = [h.replace("`", "").lower() for h in headings(file.read_text())] if file.is_file() else []
        if not any(t.startswith(re.sub(r"\s+", " ", section.replace("`", "")).lower()) for t in titles):
            problems.append(f'{where}: {page} "{section}": no such heading')
    return problems


def test_section_references_name_existing_headings():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    problems = []
    for name in files.split():
        if name.startswith("upstream/") or name == "tests/test_readme.py" or not (REPO / name).is_file():
            continue  # upstream's own files; this file's deliberately wrong lines
        try:
            problems += section_reference_problems((REPO / name).read_text(), name)
        except UnicodeDecodeError:
            continue
    assert problems == []


def test_readme_commands_are_found():
    """The parser sees the pages' commands, so an empty problem list means they were checked."""
    found = {" ".join(k) for t in commands(DOCS) if (m := python_module(t)) for k, _ in split_program(*m)}
    assert {"infra synth", "infra rehearse", "infra check", "workloads plan", "workloads render",
            "workloads run-local", "workloads status", "workloads logs", "trainer", "trainer.launch",
            "trainer.bench", "policy.scan", "trainer.gpu_check",
            "scripts/build-images.sh"} <= found  # fmt: skip
    assert {"dev", "prod", "dev-zimdb", "dev-gpu-check"} <= stacks_named(DOCS)


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


def test_the_page_checks_find_a_wrong_line():
    readme, trainer = REPO / "README.md", REPO / "docs/trainer.md"
    assert link_problems("[the trainer](docs/trainer.md#exit-codes)", readme) == []
    assert link_problems("[exit codes](#exit-codes)", trainer) == []
    assert link_problems("[deploy](docs/deploy.md)", trainer)  # relative to docs/, not the root
    assert link_problems("[codes](docs/trainer.md#exit-code)", readme)
    assert link_problems("[out](../../etc/passwd)", readme)
    assert layout_problems("- `infra/a.py`: a\n- `tests/infra/`: b", ["infra/a.py", "tests/infra/t.py"]) == []
    in_prose = "**Infra** (`infra/`, ...)\n- `infra/a.py`: a, not `infra/b.py`"
    assert layout_problems(in_prose, ["infra/a.py", "infra/b.py"]) == [
        "infra/b.py: not in the code layout (docs/development.md)"
    ]
    stacks = ["Pulumi.dev-zimdb.yaml", "Pulumi.dev.yaml"]
    assert layout_problems("- `Pulumi.<platform>-<job>.yaml`: jobs", stacks) == [
        "Pulumi.dev.yaml: not in the code layout (docs/development.md)"
    ]
    assert section_reference_problems('# docs/workloads.md "Ray jobs" has the details', "x.py") == []
    assert section_reference_problems('"description": "(README \\"Ray jobs\\")"', "x.json")
    assert section_reference_problems('see docs/workloads.md "Ray job retries"', "x.py")
    assert section_reference_problems('see docs/nowhere.md "Ray jobs"', "x.py")


def test_readme_figures_match_the_code(dev, prod):
    """The figures the README states: the demo's accuracy ceiling and the idle cost per stack (as
    `python -m infra synth --stack <stack>` prints it)."""
    from infra.tools.idle_cost import idle_cost_report
    from trainer import zimdb

    ceiling = re.search(r"ceiling of the default validation split \(1,000 reviews\) is \*\*([\d.]+)", DOCS)
    assert ceiling and float(ceiling.group(1)) == round(zimdb.ceiling(1000, 1000003), 3)
    assert re.search(rf"val_accuracy\s+{ceiling.group(1)}`?,\s+the data's ceiling", README)
    stated = dict(re.findall(r"(dev|prod) about \$([\d.]+)/h", DOCS))
    assert set(stated) == {"dev", "prod"}
    reports = {"dev": idle_cost_report(dev.config), "prod": idle_cost_report(prod.config)}
    for stack, usd in stated.items():
        total = re.search(r"total per hour\s+\$\s*([\d.]+)", reports[stack])
        assert total, reports[stack]
        assert round(float(total.group(1)), 2) == float(usd), f"{stack}: synth {total.group(1)}, README {usd}"


def test_the_deploy_steps_are_the_ones_the_rehearsal_runs_in_order():
    """docs/deploy.md's "Deploy to AWS" commands are `infra/tools/rehearse.py`'s STEPS for dev, in order,
    and the section says what only AWS can confirm."""
    from infra.tools.rehearse import STEPS

    section = (REPO / "docs/deploy.md").read_text().split("## Deploy to AWS", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "no command block in Deploy to AWS"
    shown = [re.sub(r"(^|\s)#.*", "", line).strip() for line in block[1].splitlines()]
    assert [line for line in shown if line] == [step.command.replace("{stack}", "dev") for step in STEPS]
    assert "What only a real `pulumi up` verifies" in section and "python -m infra rehearse" in section


def test_the_workload_deploy_steps_are_the_ones_the_rehearsal_runs_in_order():
    from infra.tools.rehearse import WORKLOAD_STEPS

    section = (REPO / "docs/workloads.md").read_text().split("\n## ", 1)[0]
    lines = code_blocks(section)
    wanted = [step.command.replace("{stack}", "dev-zimdb") for step in WORKLOAD_STEPS]
    positions = [lines.index(command) for command in wanted]
    assert positions == sorted(positions), lines
