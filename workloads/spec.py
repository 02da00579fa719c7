"""TrainingJobSpec: the one description of a training job, read from `mlops-eks:job`.

Validation happens in two steps, both before any resource exists: `parse_spec` checks the spec on
its own (types, ranges, combinations); `place` checks it against the platform's exports (is the
accelerator offered, do its instance types have that many GPUs, does the pool grow that far) and
returns the facts rendering needs. Every error names the config key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import urllib.parse
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infra.config import stack_files
from infra.config.base import allowed_for, number_for_text, number_reason
from infra.contract import KUBERNETES_NAMESPACES, PLATFORM_NAMESPACES, job_prefix
from infra.image_refs import image_problem, tag_problem

# The trainer's own config model: pure Python (no torch, no pulumi), so the spec is checked with the
# checks and messages the trainer gives when its pod starts.
from trainer.config import ConfigError
from trainer.config import build as build_trainer_config
from workloads.s3_keys import TRAINER_S3_KEYS, reads_s3, relative_form, relative_problems, resolve
from workloads.spec_rules import consistency_problems

CONFIG_KEY = stack_files.JOB_KEY
HUB_TOKEN_CONFIG = stack_files.HUB_TOKEN_KEY  # the secret config a job with hubToken: true reads
MLFLOW_CREDENTIAL_CONFIG = stack_files.MLFLOW_CREDENTIAL_KEY  # and one whose mlflow.auth is token or basic
# The port every job's pods already reach outside the private ranges (S3 through its gateway endpoint:
# infra/addons/network_policies.py); a tracking server on another port needs a rule of its own.
OPEN_HTTPS_PORT = 443

DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti)$"
# A StorageClass name: a DNS subdomain (Kubernetes' IsDNS1123Subdomain).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
S3_PATH = r"^[A-Za-z0-9._\-][A-Za-z0-9._\-/]*$"  # relative: a leading '/' would be dropped
VOLUME_PATH = r"^[A-Za-z0-9._\-/]*$"
DnsLabel = Annotated[str, StringConstraints(pattern=DNS_LABEL, max_length=40)]
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY)]
# What each pattern means, for messages (pydantic would print the regular expression).
PATTERN_MEANS = {
    DNS_LABEL: "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
    QUANTITY: "a size with a binary unit, e.g. 50Gi (Ki, Mi, Gi or Ti; not GB)",
    DNS_SUBDOMAIN: "a StorageClass name: lowercase letters, digits, '-' and '.', e.g. efs-sc",
    S3_PATH: "a path under the job's prefix such as checkpoints, without a leading '/' (not an s3:// URL: "
    "the bucket is the platform's)",
    VOLUME_PATH: "a path on the volume: letters, digits, '.', '_', '-' and '/'",
}


class SpecError(ValueError):
    """A job spec that cannot run; the message lists every problem, one per line."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)
    PATTERN_MEANS: ClassVar[dict[str, str]] = PATTERN_MEANS  # what a quoted number must look like instead

    @model_validator(mode="before")
    @classmethod
    def _numbers(cls, data: Any) -> Any:
        if found := number_for_text(cls, data):
            key, value, allowed = found
            raise ValueError(f"{key}: {number_reason(value)}; got {value!r}; allowed: {allowed}")
        return data


class Pvc(_Model):
    """A new volume (`size`) or an existing claim (`claim`)."""

    size: Quantity | None = None
    claim: DnsLabel | None = None
    # New volumes; None: the cluster's default StorageClass.
    storage_class: str | None = Field(default=None, pattern=DNS_SUBDOMAIN, max_length=253)

    @model_validator(mode="after")
    def _new_or_existing(self) -> Pvc:
        if (self.size is None) == (self.claim is None):
            raise ValueError(
                "set exactly one of `size` (a new volume, e.g. 50Gi) or `claim` (an existing PVC)"
            )
        return self


class Storage(_Model):
    """Where data, checkpoints or outputs live: under the job's S3 prefix, or on a volume."""

    s3: str | None = Field(default=None, pattern=S3_PATH)  # relative to s3://<bucket>/jobs/<name>/
    pvc: Pvc | None = None
    path: str = Field(default="", pattern=VOLUME_PATH)  # on the volume (e.g. the data file)

    @model_validator(mode="after")
    def _exactly_one(self) -> Storage:
        if (self.s3 is None) == (self.pvc is None):
            raise ValueError("set exactly one of `s3` (a path under the job's prefix) or `pvc`")
        if self.s3 is not None and self.path:
            raise ValueError("`path` is for volumes; put the S3 path in `s3`")
        for key, value in (("s3", self.s3), ("path", self.path)):
            if value and ".." in value.split("/"):
                raise ValueError(
                    f"`{key}` {value!r} climbs out with '..'; allowed: a path below the job's own prefix "
                    "(s3://<platform bucket>/jobs/<name>/ for `s3`, the volume's root for `path`), no '..'"
                )
        return self


class Program(_Model):
    """What runs in the container under torchrun, and how it gets there."""

    # image: `-m <module>` from the image; configmap: a local script file mounted from a ConfigMap;
    # volume: a script already on an existing PVC (`claim`).
    delivery: Literal["image", "configmap", "volume"] = "image"
    module: str = Field(default="trainer", pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
    file: str | None = None
    claim: DnsLabel | None = None
    args: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _delivery_fields(self) -> Program:
        if self.delivery == "image" and (self.file or self.claim):
            raise ValueError(
                "delivery `image` runs `-m <module>`: `file` and `claim` are for configmap/volume"
            )
        if self.delivery in ("configmap", "volume") and not self.file:
            raise ValueError(f"delivery `{self.delivery}` needs `file` (the script to run)")
        if self.delivery == "volume" and not self.claim:
            raise ValueError("delivery `volume` needs `claim` (an existing PVC holding `file`)")
        if self.delivery == "configmap" and self.claim:
            raise ValueError("delivery `configmap` takes `file` only, not `claim`")
        return self

    @property
    def runs_trainer(self) -> bool:
        return self.delivery == "image" and self.module == "trainer"


class MlflowEgress(_Model):
    """Where the job's pods may reach the tracking server (a rule of the job's NetworkPolicy, which can
    name addresses or pods, not host names): `cidr`, the server's address range (an EC2 host, an internal
    load balancer's subnets), or `namespace`, an in-cluster server's (narrowed to its pods by `podLabels`).
    `port`: the server's port as the pod connects to it (an in-cluster Service's targetPort); by default
    the tracking URI's."""

    cidr: str | None = None
    namespace: DnsLabel | None = None
    pod_labels: dict[str, str] = Field(default_factory=dict)
    port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _one_peer(self) -> MlflowEgress:
        # Each message is led by its key and shows the value: TrainingJobSpec's error lines prefix the path.
        if (self.cidr is None) == (self.namespace is None):
            raise ValueError(
                f"cidr: set exactly one of cidr and namespace; got cidr {self.cidr!r}, namespace "
                f"{self.namespace!r}; allowed: `cidr` (the server's address range, e.g. 10.0.12.0/24) or "
                "`namespace` (an in-cluster server's)"
            )
        if self.pod_labels and self.namespace is None:
            raise ValueError(
                f"podLabels: they narrow `namespace`'s pods; got {self.pod_labels!r} with cidr "
                f"{self.cidr!r}; allowed: none with `cidr`"
            )
        if self.cidr is None:
            return self
        try:
            network = ipaddress.IPv4Network(self.cidr)
        except ValueError as err:
            network_of = _network_of(self.cidr)
            hint = f" (its network: {network_of})" if network_of else ""
            raise ValueError(
                f"cidr: not an IPv4 network ({err}){hint}; got {self.cidr!r}; allowed: e.g. 10.0.12.0/24 or "
                "10.0.12.7/32"
            ) from None
        if network.prefixlen == 0:
            raise ValueError(
                f"cidr: would open every address and port to the job; got {self.cidr!r}; allowed: the "
                "server's own range"
            )
        return self


def _network_of(cidr: str) -> str | None:
    try:
        return str(ipaddress.IPv4Network(cidr, strict=False))
    except ValueError:
        return None


class Mlflow(_Model):
    """The MLflow tracking server the trainer sends the run to (trainer/tracking.py): its URI and
    experiment reach the trainer's config, its credential (the stack's secret config mlflowCredential) the
    pods' environment through a Kubernetes Secret, and `egress` the job's NetworkPolicy."""

    tracking_uri: str  # http(s)://host[:port][/path]
    experiment: str | None = Field(default=None, min_length=1)  # default: the job's name
    # token: MLFLOW_TRACKING_TOKEN; basic: MLFLOW_TRACKING_USERNAME (`username`) and _PASSWORD.
    auth: Literal["none", "token", "basic"] = "none"
    username: str | None = Field(default=None, min_length=1)
    egress: MlflowEgress | None = None

    @model_validator(mode="after")
    def _reachable(self) -> Mlflow:
        uri = urllib.parse.urlsplit(self.tracking_uri)
        if uri.username is not None or uri.password is not None:  # the message shows the URI without it
            netloc = uri.netloc.rpartition("@")[2]
            shown = urllib.parse.urlunsplit(uri._replace(netloc=f"<user:password>@{netloc}"))
            raise ValueError(
                "trackingUri: a user or password in the URL would land in the job's ConfigMap; got "
                f"{shown!r}; allowed: `auth: basic` with `username`, the password in `pulumi config set "
                f"--secret {MLFLOW_CREDENTIAL_CONFIG.split(':')[1]} <password>`"
            )
        if uri.scheme not in ("http", "https") or not uri.hostname:
            raise ValueError(
                f"trackingUri: not a tracking server's URL; got {self.tracking_uri!r}; allowed: "
                "http(s)://host[:port][/path] (a file store or a database is the server's backend, not "
                "the job's)"
            )
        if (self.username is not None) != (self.auth == "basic"):
            raise ValueError(
                f"username: goes with `auth: basic`, and only with it; got username {self.username!r} and "
                f"auth {self.auth!r}; allowed: both or neither"
            )
        if self.egress is None and self.port != OPEN_HTTPS_PORT:
            raise ValueError(
                f"egress: the job's NetworkPolicy lets its pods reach port {OPEN_HTTPS_PORT} outside the "
                f"private ranges only, and {self.tracking_uri} is port {self.port}; got no egress; allowed: "
                "`egress: {cidr: <the server's address range>}` or `egress: {namespace: <an in-cluster "
                "server's>, port: <its pods' port>}`"
            )
        if self.egress and self.egress.cidr and self.egress.port not in (None, self.port):
            raise ValueError(
                f"egress.port: not {self.tracking_uri}'s port {self.port}, so the rule would not match the "
                f"connection; got {self.egress.port}; allowed: leave it out (the URI's port)"
            )
        return self

    @property
    def port(self) -> int:
        uri = urllib.parse.urlsplit(self.tracking_uri)
        return uri.port or (443 if uri.scheme == "https" else 80)

    @property
    def egress_port(self) -> int:
        return self.egress.port if self.egress and self.egress.port else self.port


class Elastic(_Model):
    min_nodes: int = Field(ge=1)
    max_nodes: int = Field(ge=1)


class TrainingJobSpec(_Model):
    name: DnsLabel
    namespace: DnsLabel | None = None  # default: the job's name (one namespace per job)
    # false: the namespace (with its LocalQueue) exists already, e.g. a team's, owned by another stack
    create_namespace: bool = True
    image: str | None = None  # a full reference; or imageTag in the platform's ECR repository
    image_tag: str | None = None
    image_repository: Literal["cuda", "rocm", "cpu"] | None = None  # default: from the GPU vendor
    accelerator: str
    pool: str | None = None  # default: the first platform pool offering the accelerator that fits
    gpus_per_node: int = Field(default=1, ge=1)
    nodes: int = Field(default=1, ge=1)
    procs_per_node: int | None = Field(default=None, ge=1)  # default: one process per GPU
    cpu_per_node: float | None = Field(default=None, gt=0)  # default: 3/4 of the smallest fitting type
    memory_gib_per_node: int | None = Field(default=None, ge=1, alias="memoryGiBPerNode")
    shm_gib: int | None = Field(
        default=None, ge=1, alias="shmGiB"
    )  # /dev/shm; default: a quarter of the memory
    # mpijob: Training Operator v1's MPIJob, the trainer under Open MPI's mpirun (workloads/mpijob.py)
    operator: Literal["trainjob", "pytorchjob", "mpijob", "rayjob"] = "trainjob"
    program: Program = Program()
    trainer_config: dict[str, Any] = Field(default_factory=dict)
    data: Storage | None = None
    checkpoint: Storage | None = Storage(s3="checkpoints")
    output: Storage | None = Storage(s3="output")
    env: dict[str, str] = Field(default_factory=dict)  # wins over the NCCL settings derived here
    # The pods get HF_TOKEN (gated Hub models) from a Kubernetes Secret made from the stack's secret config
    # `hfToken` (`pulumi config set --secret hfToken ...`), never from a plain value.
    hub_token: bool = False
    mlflow: Mlflow | None = None  # the tracking server the trainer sends its run to
    restart_budget: int = Field(default=3, ge=0)
    spot_tolerant: bool = True
    priority: DnsLabel | None = None  # a PriorityClass name
    queue: DnsLabel | None = None  # a Kueue ClusterQueue (gets a LocalQueue) or a Volcano queue
    ttl_seconds_after_finished: int = Field(default=86400, ge=0)
    # How long the job may be active before its operator stops it (activeDeadlineSeconds): a hung or
    # runaway job ends instead of holding GPUs. TrainJob restarts the clock on resume from suspension.
    max_runtime_hours: float = Field(default=72, gt=0, le=24 * 90)
    suspend: bool = False
    elastic: Elastic | None = None  # PyTorchJob only: nodes may vary in [minNodes, maxNodes]

    @model_validator(mode="after")
    def _combinations(self) -> TrainingJobSpec:
        problems = self._combination_problems()
        if problems:  # every problem at once, one per line, each led by its key
            raise ValueError("\n".join(problems))
        return self

    def _combination_problems(self) -> list[str]:
        problems = []
        if not self.image and not self.image_tag:
            problems.append(
                "image: missing; set `image` (a full image reference) or `imageTag` (a tag in the platform's "
                "ECR repository)"
            )
        if self.image and (self.image_tag or self.image_repository):
            problems.append("image: set either `image` or `imageTag`/`imageRepository`, not both")
        # The policy pack's k8s-images-pinned refuses the rendered object; refuse the spec first.
        if self.image and (problem := image_problem(self.image)):
            problems.append(f"image: {problem}; allowed: a version tag or an @sha256 digest")
        if self.image_tag and (problem := tag_problem(self.image_tag)):
            problems.append(f"imageTag: {problem}; allowed: the tag scripts/build-images.sh printed")
        if self.procs_per_node is not None and self.procs_per_node > self.gpus_per_node:
            problems.append(
                f"procsPerNode: {self.procs_per_node} is more than gpusPerNode ({self.gpus_per_node}); "
                f"allowed: 1-{self.gpus_per_node}, one process per GPU"
            )
        if self.trainer_config and not self.program.runs_trainer:
            problems.append(
                "trainerConfig: only the image's `trainer` module reads it; this job runs "
                f"{self.program.file or self.program.module}"
            )
        elif relative := relative_problems(self.trainer_config, job_prefix(self.name)):
            problems += relative  # the trainer's own check needs them resolved
        elif self.trainer_config and (error := trainer_config_error(self._config_with_data())):
            problems.append(f"trainerConfig: {error}")
        if self.data and self.data.pvc and self.data.pvc.size:
            problems.append(
                f"data: a new, empty volume holds no data; got pvc.size {self.data.pvc.size!r}; allowed: "
                "`pvc: {claim: <existing>}` with `path`, or `s3`"
            )
        for role, storage in (("checkpoint", self.checkpoint), ("output", self.output)):
            pvc = storage.pvc if storage else None
            if pvc and pvc.size and not pvc.storage_class and self.max_nodes > 1:
                problems.append(
                    f"{role}.pvc.storageClass: a new volume shared by {self.max_nodes} nodes needs a "
                    "ReadWriteMany class (e.g. EFS); EBS attaches to one node"
                )
        problems += self._foreign_s3_problems()
        problems += consistency_problems(self)
        problems += self._mpi_image_problems()
        problems += self._restart_problems()
        problems += self._namespace_problems()
        for role, key in (("data", "source"), ("checkpoint", "dir"), ("output", "dir")):
            section = self.trainer_config.get(role)
            if getattr(self, role) is not None and isinstance(section, dict) and key in section:
                problems.append(f"trainerConfig.{role}.{key}: also set by `{role}`; remove one of them")
        if self.elastic is not None:
            if self.operator != "pytorchjob":
                problems.append(
                    "elastic: only operator `pytorchjob` runs elastic jobs; allowed: remove `elastic` or set "
                    "operator: pytorchjob"
                )
            if not self.elastic.min_nodes <= self.nodes <= self.elastic.max_nodes:
                problems.append(
                    f"elastic: nodes ({self.nodes}) must lie in [minNodes {self.elastic.min_nodes}, maxNodes "
                    f"{self.elastic.max_nodes}]"
                )
        return problems

    def _config_with_data(self) -> dict[str, Any]:
        """trainerConfig with the file `data` names as data.source (its format is checked; it is read in
        the pod) and `{s3: <path>}` values as URLs, as rendering fills them in."""
        config = resolve(self.trainer_config, PLATFORM_BUCKET, job_prefix(self.name))
        if self.data is None or not isinstance(config.get("data", {}), dict):
            return config
        path = self.data.s3 if self.data.s3 is not None else self.data.path
        data = {**config.get("data", {}), "source": POD_FILESYSTEM + path.lstrip("/")}
        return {**config, "data": data}

    def _namespace_problems(self) -> list[str]:
        reserved = KUBERNETES_NAMESPACES | PLATFORM_NAMESPACES
        if self.namespace_name not in reserved:
            return []
        key = "namespace" if self.namespace else "name"
        whose = "Kubernetes'" if self.namespace_name in KUBERNETES_NAMESPACES else "the platform's"
        return [
            f"{key}: {self.namespace_name!r} is {whose} own namespace: the job would put its ResourceQuota, "
            "LocalQueue and NetworkPolicies on the pods already there; allowed: any other namespace (by "
            f"default the job's name), not {', '.join(sorted(reserved))}"
        ]

    def _restart_problems(self) -> list[str]:
        if self.operator != "pytorchjob" or self.restart_budget == 0 or self.counts_restarts:
            return []
        missing = "checkpoint location" if self.program.runs_trainer else "trainer (it runs a script)"
        return [
            f"restartBudget: {self.restart_budget} cannot be kept for this PyTorchJob: Training Operator v1 "
            "recreates failed pods without counting them, and the trainer's launcher counts them in the "
            f"job's checkpoint location; this job has no {missing}; allowed: restartBudget 0 (runs once), "
            "operator trainjob (its JobSet counts restarts), or the trainer with `checkpoint` set"
        ]

    @property
    def counts_restarts(self) -> bool:
        """Whether a PyTorchJob's restarts can be counted (trainer/attempts.py): the trainer runs under its
        launcher and has a checkpoint location to keep the count in."""
        return self.program.runs_trainer and self.checkpoint is not None

    def _mpi_image_problems(self) -> list[str]:
        """An MPIJob's launcher and workers run one image, which must have Open MPI: the cpu image (the
        default for operator mpijob; torch without CUDA) or a full `image` the user built with it."""
        if self.operator != "mpijob" or self.image:
            return []
        if self.image_repository not in (None, "cpu"):
            return [
                f"imageRepository: {self.image_repository!r} has no Open MPI (its Dockerfile installs none) "
                "and operator mpijob runs mpirun from the job's image; allowed: cpu (the default for "
                "mpijob), or `image` with Open MPI and the trainer"
            ]
        train = self.trainer_config.get("train")
        device = train.get("device") if isinstance(train, dict) else None
        if device == "cuda":
            return [
                "trainerConfig.train.device: 'cuda': operator mpijob runs the cpu image, whose torch has no "
                "CUDA; allowed: cpu (the default here: gloo, the job's GPUs stay unused), or `image` with "
                "Open MPI and a CUDA torch"
            ]
        return []

    def _foreign_s3_problems(self) -> list[str]:
        """S3 URLs in trainerConfig the job's role cannot read: it reaches only its own prefix."""
        problems = []
        prefix = f"{job_prefix(self.name)}/"
        for section, keys in TRAINER_S3_KEYS:
            values = self.trainer_config.get(section)
            for key in keys:
                url = values.get(key) if isinstance(values, dict) else None
                if not isinstance(url, str) or not url.startswith("s3://"):
                    continue
                path = url.removeprefix("s3://").partition("/")[2]
                if not path.startswith(prefix) or ".." in path.split("/"):
                    instead = f"{relative_form(section, key, prefix)} (copy it there first)"
                    problems.append(
                        f"trainerConfig.{section}.{key}: {url!r} is outside the job's prefix; its IAM role "
                        f"reads only s3://<platform bucket>/{prefix}; allowed: {instead}"
                    )
        return problems

    @property
    def namespace_name(self) -> str:
        return self.namespace or self.name

    @property
    def processes_per_node(self) -> int:
        return self.procs_per_node or self.gpus_per_node

    @property
    def max_nodes(self) -> int:
        return self.elastic.max_nodes if self.elastic else self.nodes

    @property
    def uses_s3(self) -> bool:
        storages = (self.data, self.checkpoint, self.output)
        return any(s is not None and s.s3 is not None for s in storages) or reads_s3(self.trainer_config)


POD_FILESYSTEM = "s3://pod-filesystem/"
PLATFORM_BUCKET = "<platform bucket>"  # what a spec's checks put for the bucket, known only after deploy
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


def _pod_stand_ins(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The config with what only the pod can check replaced by values that pass just that check: a file
    in the image or on a volume (its existence; its format is still checked), an `hf:` dataset or model
    and TensorBoard (packages of the image, not of the machine that deploys). Returns the stand-ins and
    {stand-in: original}, to put the original back into a message."""
    values = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    originals: dict[str, str] = {}
    data, model, output, llm = (values.get(k) for k in ("data", "model", "output", "llm"))
    if isinstance(data, dict):
        for key in ("source", "val_source"):
            src = data.get(key)
            if not isinstance(src, str) or src in ("", "synthetic") or _URL.match(src):
                continue  # the trainer's own checks judge a URL (s3:// or another scheme) as it is
            if src.startswith("hf:"):
                if key == "source" and src != "hf:":  # the trainer refuses "hf:" alone, and as val_source
                    data[key] = "synthetic"
            else:
                data[key] = POD_FILESYSTEM + src.lstrip("/")
                originals[data[key]] = src
    for role in ("checkpoint", "output"):  # a path in the pod (spec_rules.pod_path_problems judges it)
        section = values.get(role)
        path = section.get("dir") if isinstance(section, dict) else None
        if isinstance(section, dict) and isinstance(path, str) and path and not _URL.match(path):
            section["dir"] = POD_FILESYSTEM + path.lstrip("/")
            originals[section["dir"]] = path
    if isinstance(model, dict) and isinstance(model.get("name"), str) and model["name"].startswith("hf:"):
        model["name"] = model["name"] if model["name"] == "hf:" else "transformer"
    if isinstance(llm, dict):  # a model directory or a cache in the pod (an image path, a volume)
        for key, stand_in in (("model", "tiny"), ("model_cache", None)):
            path = llm.get(key)
            if not isinstance(path, str) or path in ("", "tiny") or path.startswith("hf:"):
                continue
            if not _URL.match(path):
                llm[key] = stand_in or POD_FILESYSTEM + path.lstrip("/")
                originals[llm[key]] = path
    if isinstance(output, dict) and str(output.get("tensorboard")).lower() == "true":
        output["tensorboard"] = False
    return values, originals


def trainer_config_error(config: dict[str, Any]) -> str | None:
    """What the trainer (trainer.config.build) says of this config at start, or None if it accepts it."""
    values, originals = _pod_stand_ins(config)
    try:
        build_trainer_config(values)
    except ConfigError as err:
        message = str(err)
        for stand_in, original in originals.items():
            message = message.replace(repr(stand_in), repr(original))
        return message
    return None


def _error_lines(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        # A field's own error shows the value; model-level checks put their key first and the value
        # in the message ("procsPerNode: 8 is more than ...").
        if not loc or (e["type"] == "value_error" and _LED_BY_KEY.match(msg) and "; got " in msg):
            for problem in msg.split("\n"):
                key, _, text = problem.partition(": ")
                lines.append(f"{CONFIG_KEY}.{f'{loc}.' if loc else ''}{key}: {text}")
            continue
        value = "" if e["type"] == "missing" else f" (got {e.get('input')!r:.80})"
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(e["loc"][:-1])
            close = difflib.get_close_matches(str(e["loc"][-1]), allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            msg = f"unknown key; {hint}allowed keys: {', '.join(allowed)}"
        msg += allowed_for(e, PATTERN_MEANS)
        lines.append(f"{CONFIG_KEY}.{loc}: {msg}{value}")
    return lines


_LED_BY_KEY = re.compile(r"^[A-Za-z][\w.]*: ")


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at `loc` (a path of aliases) accepts."""
    model: Any = TrainingJobSpec
    for part in loc:
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        inner = (
            [
                a
                for a in (getattr(field.annotation, "__args__", ()) or (field.annotation,))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ]
            if field
            else []
        )
        if not inner:
            return []
        model = inner[0]
    return [f.alias or n for n, f in model.model_fields.items()]


def parse_spec(raw: Any) -> TrainingJobSpec:
    """`mlops-eks:job` (a mapping, as Pulumi's Config.get_object returns it) -> a validated spec."""
    if not isinstance(raw, dict):
        raise SpecError(
            f"{CONFIG_KEY}: expected an object with at least name, accelerator and image, got {raw!r:.80}"
        )
    try:
        return TrainingJobSpec.model_validate(raw)
    except ValidationError as err:
        raise SpecError("\n".join(_error_lines(err))) from None
