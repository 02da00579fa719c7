"""What a workload stack needs to know about its platform stack: the platform's exports, typed.

The pool, device-plugin and queue models are the platform's own (infra.contract, pure data), so both sides
of the StackReference read one contract. The same model reads a live StackReference's outputs
(workloads.program), a `--platform-outputs` JSON file, the facts derived from the platform's stack file
(infra.exports: the user's own pools and queues, offline), or the example outputs shipped beside this
module (`examples/platform-<stack>.json`, generated from the platform program under mocks by
`python -m scripts.platform_examples`) when no stack file exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infra.config.errors import ConfigError
from infra.config.platform import PlatformConfig
from infra.config.stack_files import StackFileError, read_config
from infra.contract import AcceleratorPool, DevicePlugin, QueueQuota
from infra.exports import platform_facts
from infra.platform.registries import ImagePath
from workloads.spec import SpecError

EXAMPLES = Path(__file__).resolve().parent / "examples"


class ImagePathFacts(BaseModel):
    """The platform's image path (infra/platform/registries.py): where its nodes pull every image from."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    account_id: str
    region: str
    stack: str

    def path(self) -> ImagePath:
        return ImagePath(self.account_id, self.region, self.stack)


class PlatformFacts(BaseModel):
    """The platform stack's exports that rendering a job uses (extra exports are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    cluster_name: str
    region: str
    bucket_name: str
    ecr_repository_urls: dict[str, str]
    # Every GPU node source, with its device plugins and queues: the scheduling contract (infra.contract).
    accelerator_pools: dict[str, AcceleratorPool]
    device_plugins: tuple[DevicePlugin, ...] = ()
    queue_quotas: tuple[QueueQuota, ...] = ()
    # Absent on a platform without the add-ons.
    training_operators: dict[str, bool] = Field(default_factory=dict)
    gang_scheduler: Literal["kueue", "volcano"] | None = None
    kueue_queues: tuple[str, ...] = ()
    # The PriorityClasses the platform created (addons.training.priorityClasses).
    priority_classes: tuple[str, ...] = ()
    # Absent from the outputs of a platform deployed before it was exported.
    image_path: ImagePathFacts | None = None

    def queue(self, name: str) -> QueueQuota | None:
        return next((q for q in self.queue_quotas if q.name == name), None)


def example_outputs_path(platform_stack: str) -> Path:
    """`organization/mlops-eks/dev` -> examples/platform-dev.json."""
    return EXAMPLES / f"platform-{platform_stack.rsplit('/', 1)[-1]}.json"


class PlatformOutputsError(SpecError):
    """A platform-outputs file that is not `pulumi stack output --json` of a platform stack."""


_ALLOWED = "allowed: `pulumi stack output --json --show-secrets -s <platform stack>` saved to a file"


def read_platform_outputs(path: Path) -> dict:
    """The outputs file as a JSON object, or a PlatformOutputsError naming the file."""
    try:
        outputs = json.loads(path.read_text())
    except OSError as err:
        raise PlatformOutputsError(f"{path}: cannot read it ({err.strerror}); {_ALLOWED}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlatformOutputsError(f"{path}: not valid JSON ({err}); {_ALLOWED}") from None
    if not isinstance(outputs, dict):
        raise PlatformOutputsError(f"{path}: got a JSON {type(outputs).__name__}, not an object; {_ALLOWED}")
    return outputs


def load_platform_outputs(path: Path) -> PlatformFacts:
    allowed = _ALLOWED
    outputs = read_platform_outputs(path)
    try:
        return PlatformFacts.model_validate(outputs)
    except ValidationError as err:
        problems = [
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            + ("" if e["type"] == "missing" else f" (got {e.get('input')!r:.60})")
            for e in err.errors()
        ]
        found = "; ".join(problems)
        raise PlatformOutputsError(f"{path}: not a platform stack's outputs: {found}; {allowed}") from None


def derived_facts(stack_file: Path) -> PlatformFacts:
    """The facts of the platform stack `stack_file` holds, from its config alone (infra.exports); a file
    the platform would refuse is a PlatformOutputsError naming it."""
    stack = stack_file.name.removeprefix("Pulumi.").removesuffix(".yaml")
    try:
        config = PlatformConfig.from_mapping(read_config(stack_file))
    except (ConfigError, StackFileError) as err:
        raise PlatformOutputsError(
            f"platform stack {stack}: {stack_file} is invalid, so its facts cannot be derived:\n{err}\n"
            f"fix it (`python -m infra check --stack {stack}`), or pass a deployed stack's outputs with "
            "--platform-outputs FILE"
        ) from None
    return PlatformFacts.model_validate(platform_facts(config, stack))
