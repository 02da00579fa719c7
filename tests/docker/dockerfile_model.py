"""Reading Dockerfiles and .dockerignore without a Docker engine (none exists where tests run)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLAVORS = ("cuda", "rocm", "cpu")


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str  # continuation lines joined with single spaces
    stage: int  # index of the FROM it belongs to (-1: before the first FROM)


@dataclass(frozen=True)
class Dockerfile:
    path: Path
    instructions: tuple[Instruction, ...]

    def arg_default(self, name: str) -> str | None:
        """The default of a global or stage ARG (first one wins), quotes stripped."""
        for ins in self.instructions:
            if ins.keyword == "ARG" and ins.args.split("=", 1)[0] == name:
                return ins.args.split("=", 1)[1].strip('"') if "=" in ins.args else None
        return None

    def stage(self, index: int) -> list[Instruction]:
        return [i for i in self.instructions if i.stage == index]

    @property
    def stages(self) -> int:
        return sum(1 for i in self.instructions if i.keyword == "FROM")

    def final_stage(self) -> list[Instruction]:
        return self.stage(self.stages - 1)

    def base_images(self) -> list[str]:
        """Each FROM's image with ${ARG} defaults substituted; stage names stay as they are."""
        images = []
        for ins in self.instructions:
            if ins.keyword == "FROM":
                image = [w for w in ins.args.split() if not w.startswith("--")][0]
                images.append(re.sub(r"\$\{(\w+)\}", lambda m: self.arg_default(m[1]) or "", image))
        return images

    def cmd(self) -> list[str]:
        cmds = [i for i in self.final_stage() if i.keyword == "CMD"]
        assert len(cmds) == 1, f"{self.path}: expected one CMD in the final stage"
        return json.loads(cmds[0].args)


def parse_dockerfile(path: Path) -> Dockerfile:
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comments may sit between continuation lines too
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        keyword, _, args = pending.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(keyword, args.strip(), stage))
        pending = ""
    return Dockerfile(path, tuple(instructions))


def _pattern_regex(pattern: str) -> str:
    """moby/patternmatcher semantics: `*` and `?` stay within a path segment, `**` spans segments."""
    regex, i = "", 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex, i = regex + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            regex, i = regex + ".*", i + 2
        elif pattern[i] == "*":
            regex, i = regex + "[^/]*", i + 1
        elif pattern[i] == "?":
            regex, i = regex + "[^/]", i + 1
        else:
            regex, i = regex + re.escape(pattern[i]), i + 1
    return regex


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Whether Docker leaves `path` (relative, '/'-separated) out of the build context.

    As in Docker: patterns apply in order, the last one matching decides, a `!` pattern lets a path back
    in, and a pattern matching a parent directory matches everything under it.
    """
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if any(re.fullmatch(_pattern_regex(body), c) for c in candidates):
            excluded = not negated
    return excluded


def read_dockerignore() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
