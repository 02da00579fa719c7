"""Before a release's pods pull: every image it runs is in the platform's ECR registry, at its pinned digest.

Run by `pulumi up` on the deployer's machine (a pulumi-command step before each Helm release and before
the startup GPU check; python3 -m infra.platform.image_primer, the standard library and the AWS CLI only),
with the images in IMAGES (JSON: [{"ref", "digest", "copy"}]). For each image it asks the registry for the
manifest by tag (Docker Registry HTTP API v2, as a node's container runtime does):
- a pull-through cache fetches a tag it does not have yet from upstream on that request. A request by
  digest alone does not (aws/containers-roadmap#2837), and containerd pulls `name:tag@digest` by digest:
  without this step a digest-pinned image would never reach the cache;
- the answer's Docker-Content-Digest must be the pinned digest: a tag moved upstream stops the update
  before any node runs it (the cache's repositories refuse tag overwrites afterwards);
- an image ECR cannot cache (`copy` set) must have been copied in (`python -m infra images`): the step
  fails with the command that copies it.
Exit 2 for what the user must fix (missing copy, moved tag, no credential), 200 for what a retry may fix
(the registry or the network failing).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
FIX, RETRY = 2, 200


@dataclass(frozen=True)
class Entry:
    ref: str  # registry/repository:tag in the platform's registry
    digest: str = ""  # the pinned manifest digest ("" where none is pinned)
    copy: str = ""  # the command that copies it in, for an image ECR cannot cache

    @property
    def location(self) -> tuple[str, str, str]:
        """(registry, repository, tag)."""
        registry, _, rest = self.ref.partition("/")
        repository, _, tag = rest.rpartition(":")
        return registry, repository, tag


class Problem(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def manifest_digest(url: str, token: str, opener: Callable = urllib.request.urlopen) -> str | None:
    """The Docker-Content-Digest of the manifest at `url`, None when the registry has no such tag."""
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}", "Accept": ACCEPT})
    try:
        with opener(request, timeout=60) as response:
            return response.headers.get("Docker-Content-Digest") or ""
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise Problem(
            FIX if err.code in (401, 403) else RETRY, f"{url}: HTTP {err.code} {err.reason}"
        ) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        raise Problem(RETRY, f"{url}: {err}") from None


def check(entry: Entry, token: str, scheme: str = "https", opener: Callable = urllib.request.urlopen) -> str:
    """The digest `entry` resolves to in the registry; Problem when it is missing or not the pinned one."""
    registry, repository, tag = entry.location
    digest = manifest_digest(f"{scheme}://{registry}/v2/{repository}/manifests/{tag}", token, opener)
    if digest is None:
        if entry.copy:
            raise Problem(
                FIX, f"{entry.ref} is not in ECR (ECR cannot cache its registry); copy it: {entry.copy}"
            )
        raise Problem(
            FIX,
            f"{entry.ref}: the pull-through cache could not fetch it (does the tag exist upstream, and the "
            "rule's credential in Secrets Manager, if its registry needs one?)",
        )
    if entry.digest and digest != entry.digest:
        raise Problem(
            FIX,
            f"{entry.ref} is {digest}, not the pinned {entry.digest}: the tag moved upstream; pin the new "
            "digest in infra/pins.py after checking the release",
        )
    return digest


def ecr_token(region: str) -> str:
    """The registry's Basic credential (base64 of AWS:<password>), from the AWS CLI."""
    command = ["aws", "ecr", "get-authorization-token", "--region", region, "--output", "text"]
    command += ["--query", "authorizationData[0].authorizationToken"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise Problem(RETRY, f"aws ecr get-authorization-token: {done.stderr.strip()}")
    token = done.stdout.strip()
    base64.b64decode(token, validate=True)
    return token


def main(environ: dict[str, str] | None = None, scheme: str = "https") -> int:
    environ = dict(os.environ if environ is None else environ)
    entries = [Entry(**e) for e in json.loads(environ["IMAGES"])]
    try:
        token = ecr_token(environ["REGION"])
        for entry in entries:
            print(f"{entry.ref}: {check(entry, token, scheme)}")
    except Problem as problem:
        print(f"image_primer: {problem}", file=sys.stderr)
        return problem.code
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m infra.platform.image_primer",
        usage="%(prog)s  (IMAGES and REGION in the environment)",
        description=__doc__.split("\n", 1)[0],
    )
    parser.parse_args()
    sys.exit(main())
