"""`python -m infra images --stack S --account ID`: the images of a platform stack ECR cannot cache itself,
and the commands that copy them into the stack's registry.

The list is what the program registers: the image checks (infra/platform/image_primer.py) it puts before
each release and the startup GPU check, run offline (infra/tools/synth.py) with the stack's config and your
account, so it names exactly the repositories nodes will pull from. Images of registries ECR caches
(registry.k8s.io, Quay, ECR Public; GHCR and Docker Hub with registryCredentials) need no command. The
copies land in repositories ECR creates on the first push from the stack's creation templates, so run the
commands after `make up` created the image cache (its first run stops at the first release whose images are
missing, with the same commands).
"""

from __future__ import annotations

import json
from typing import Any

from infra.pins import IMAGES
from infra.platform.image_cache import copy_command
from infra.platform.registries import ImagePath, upstream_of
from infra.tools.synth import synth


def image_report(stack: str, values: dict[str, Any], account_id: str) -> str:
    config, resources, _ = synth(stack, values, account_id=account_id)
    path = ImagePath(account_id, config.region, stack, config.registry_credentials)
    entries = [
        e
        for r in resources
        if r.type == "command:local:Command" and r.name.endswith("-images")
        for e in json.loads(r.inputs["environment"]["IMAGES"])
    ]
    copies = sorted({e["copy"] for e in entries if e["copy"]})
    cached = sorted({e["ref"] for e in entries if not e["copy"]})
    on_demand = [
        copy_command(path, pin)
        for pin in IMAGES.values()
        if pin.on_demand and (upstream := upstream_of(pin.ref)) and path.route(upstream) == "copy"
    ]
    lines = [
        f"# {stack}: nodes pull every image from {path.registry}",
        f"# {len(cached)} images ECR caches itself (pull-through cache rules); {len(copies)} to copy in:",
        f"aws ecr get-login-password --region {config.region} | "
        f"crane auth login --username AWS --password-stdin {path.registry}",
        *copies,
    ]
    if on_demand:
        lines += ["# Only if a job runs the Trainer runtime's default image instead of its own:"]
        lines += [f"# {c}" for c in on_demand]
    return "\n".join(lines)
