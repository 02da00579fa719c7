"""Write the JSON schemas of the stack files' values, generated from the config models, so editors
complete and check keys (docs/workloads.md "Editing stack files"):

  schemas/platform-stack.schema.json   Pulumi.<platform stack>.yaml: infra.config.platform.PlatformConfig
  schemas/workload-stack.schema.json   Pulumi.<workload stack>.yaml: platformStack, TrainingJobSpec

`python schemas/generate.py` rewrites them; `--check` exits 1 when a committed file differs (a test runs it).
The models stay the authority: they also check what a schema cannot express (CIDR overlap, pool vs
accelerator, the job against the platform's pools).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from infra.config import stack_files
from infra.config.platform import PlatformConfig
from infra.config.stack_files import JOB_KEY, PROJECT, PROVIDER_NAMESPACES, REGION_KEY, WORKLOAD_STACK_KEY
from workloads.spec import TrainingJobSpec
from workloads.stacks import PLATFORM_STACK_PATTERN

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Keys of the providers and of Pulumi itself, in a stack file beside the project's own.
OTHER_NAMESPACES = f"^({'|'.join(sorted(PROVIDER_NAMESPACES))}):"
# `pulumi config set --secret` stores {secure: <ciphertext>} in place of the value.
SECRET = {
    "type": "object",
    "properties": {"secure": {"type": "string"}},
    "required": ["secure"],
    "additionalProperties": False,
}
# `pulumi config set KEY 3` stores the string "3"; the program reads both spellings alike.
SCALAR_STRINGS = {"integer": "^-?[0-9]+$", "number": "^-?[0-9.eE+-]+$", "boolean": "^(true|false)$"}


def descriptions() -> dict[str, str]:
    config = stack_files.read_config(REPO / "Pulumi.yaml")  # the project file's key declarations
    return {k: " ".join(v["description"].split()) for k, v in config.items() if isinstance(v, dict)}


def stack_value(schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    """One top-level config value: its model schema, its string spelling, or a secret."""
    options = [schema]
    kinds = [o.get("type") for o in schema.get("anyOf", [schema])]
    options += [{"type": "string", "pattern": SCALAR_STRINGS[k]} for k in kinds if k in SCALAR_STRINGS]
    value: dict[str, Any] = {"anyOf": [*options, {"$ref": "#/$defs/PulumiSecret"}]}
    if description:
        value["description"] = description
    return value


def file_schema(title: str, values: dict[str, Any], required: list[str], defs: dict[str, Any]) -> dict:
    return {
        "$schema": DIALECT,
        "title": title,
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": values,
                "required": required,
                "patternProperties": {OTHER_NAMESPACES: {}},
                # A misspelled key or namespace (mlopseks:, mlops_eks:) is an error, not a silent default.
                "additionalProperties": False,
            }
        },
        "$defs": {**defs, "PulumiSecret": SECRET},
    }


def platform_schema() -> dict[str, Any]:
    model = PlatformConfig.model_json_schema(by_alias=True)
    docs = descriptions()
    values = {}
    for alias, schema in model["properties"].items():
        key = alias if alias == REGION_KEY else f"{PROJECT}:{alias}"
        schema = {k: v for k, v in schema.items() if k != "title"}
        values[key] = stack_value(schema, docs.get(alias, "the AWS provider's region, e.g. us-east-1"))
    required = [REGION_KEY if a == REGION_KEY else f"{PROJECT}:{a}" for a in model.get("required", [])]
    title = "mlops-eks platform stack file (Pulumi.<stack>.yaml); generated from infra/config/platform.py"
    return file_schema(title, values, required, model.get("$defs", {}))


def workload_schema() -> dict[str, Any]:
    model = TrainingJobSpec.model_json_schema(by_alias=True)
    docs = descriptions()
    defs = model.pop("$defs", {})
    model.pop("title", None)
    values = {
        WORKLOAD_STACK_KEY: stack_value(
            {"type": "string", "pattern": PLATFORM_STACK_PATTERN},
            docs.get("platformStack"),
        ),
        JOB_KEY: stack_value(model, docs.get("job")),
    }
    title = "mlops-eks workload stack file (Pulumi.<stack>.yaml); generated from workloads/spec.py"
    return file_schema(title, values, [WORKLOAD_STACK_KEY, JOB_KEY], defs)


def schemas() -> dict[Path, str]:
    return {
        HERE / "platform-stack.schema.json": json.dumps(platform_schema(), indent=2) + "\n",
        HERE / "workload-stack.schema.json": json.dumps(workload_schema(), indent=2) + "\n",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python schemas/generate.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed schema is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in schemas().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run `python schemas/generate.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
