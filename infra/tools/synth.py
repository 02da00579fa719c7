"""Evaluate the platform program offline: Pulumi mocks stand in for AWS, no CLI, no credentials.

`PlatformMocks` answers resource registrations and data-source calls with plausible outputs (the
camelCase outputs pulumi-eks components would return); `RecordingMonitor` keeps what the program
registered, with each resource's parent and its inputs as sent (secrets stay masked). Tests use both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as runtime_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings

from infra.config import stack_files
from infra.config.platform import ConfigError, PlatformConfig
from infra.config.stack_files import PROJECT
from sim.pulumi.language_host import engine_values, handed_over

ACCOUNT_ID = "123456789012"
REPO = Path(__file__).resolve().parents[2]
# Instance types EC2 offers in some of a region's AZs only (DescribeInstanceTypeOfferings, location type
# availability-zone); every other type is offered in each regular AZ. Tests pass their own table.
OFFERINGS: dict[str, dict[str, list[str]]] = {
    "us-east-1": {"p4d.24xlarge": ["us-east-1b", "us-east-1d"], "p4de.24xlarge": ["us-east-1b"]},
}


def zones_of(region: str) -> list[tuple[str, str, str]]:
    """(name, opt-in status, zone type) as DescribeAvailabilityZones lists a region's zones for an account
    that opted into a Local Zone: its name sorts before the regular AZs'."""
    regular = [(f"{region}{letter}", "opt-in-not-required", "availability-zone") for letter in "abcdef"]
    return [(f"{region}-bos-1a", "opted-in", "local-zone"), *regular]


def _kubeconfig(cluster_name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": "https://mock.eks.amazonaws.com"}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [{"name": cluster_name, "user": {"exec": {"command": "aws"}}}],
    }


class PlatformMocks(pulumi.runtime.Mocks):
    """`account_id` and `caller_arn`: whose account the outputs (ARNs, ECR URLs) name and who runs
    `pulumi up` (the rehearsal passes a user's; synth keeps the documentation account)."""

    # Outputs a provider returns as secrets (pulumi-eks's kubeconfig): the mock and the rehearsal's
    # monitor (sim/pulumi/engine.py) mark them alike, so what reads them sees them masked.
    SECRET_OUTPUTS = frozenset({"kubeconfigJson"})

    def __init__(
        self,
        region: str,
        account_id: str = ACCOUNT_ID,
        caller_arn: str | None = None,
        clusters: dict[str, dict[str, str]] | None = None,
        offerings: Mapping[str, Mapping[str, list[str]]] | None = None,
    ):
        self.region = region
        self.account_id = account_id
        self.caller_arn = caller_arn or f"arn:aws:iam::{account_id}:user/mock"
        # The EKS clusters of the account, name -> tags: what creates made (a caller's dict outlives the
        # mocks, as the cloud outlives one update).
        self.clusters = clusters if clusters is not None else {}
        self.offerings = OFFERINGS if offerings is None else offerings

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]:
        id_, state = self.created(args.typ, args.name, dict(args.inputs))
        secrets = {k: pulumi.Output.secret(v) for k, v in state.items() if k in self.SECRET_OUTPUTS}
        return id_, {**state, **secrets}

    def created(self, typ: str, name: str, inputs: dict) -> tuple[str, dict]:
        """The id and state a create returns: the inputs and the outputs AWS (or pulumi-eks) computes."""
        account, region = self.account_id, self.region
        arn = f"arn:aws:mock:{region}:{account}:{name}"
        outputs: dict[str, Any] = {"arn": arn, "name": inputs.get("name", name)}
        if typ == "eks:index:Cluster":
            cluster_name = inputs.get("name", name)
            # pulumi-eks tags the cluster with Name, then clusterTags, then tags (cluster.ts).
            tags = {
                "Name": f"{name}-eksCluster",
                **(inputs.get("clusterTags") or {}),
                **(inputs.get("tags") or {}),
            }
            self.clusters[cluster_name] = tags
            issuer = f"oidc.eks.{region}.amazonaws.com/id/MOCK{cluster_name.upper()}"
            outputs = {
                "kubeconfig": _kubeconfig(cluster_name),
                "kubeconfigJson": json.dumps(_kubeconfig(cluster_name)),
                "oidcProviderArn": f"arn:aws:iam::{account}:oidc-provider/{issuer}",
                "oidcProviderUrl": issuer,
                "clusterSecurityGroupId": "sg-0cluster",
                "nodeSecurityGroupId": "sg-0node",
            }
        elif typ == "aws:iam/role:Role":
            outputs = {"arn": f"arn:aws:iam::{account}:role/{name}", "name": name}
        elif typ == "aws:iam/policy:Policy":
            outputs = {"arn": f"arn:aws:iam::{account}:policy/{name}", "name": name}
        elif typ == "aws:kms/key:Key":
            outputs = {"arn": f"arn:aws:kms:{region}:{account}:key/{name}", "keyId": f"{name}-key-id"}
        elif typ == "aws:s3/bucket:Bucket":
            bucket = inputs.get("bucket") or f"{inputs.get('bucketPrefix', name)}mock"
            outputs = {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}
        elif typ == "aws:cloudwatch/logGroup:LogGroup":
            outputs = {"arn": f"arn:aws:logs:{region}:{account}:log-group:{inputs['name']}"}
        elif typ == "aws:ecr/repository:Repository":
            repo = inputs.get("name", name)
            outputs = {"repositoryUrl": f"{account}.dkr.ecr.{region}.amazonaws.com/{repo}", "arn": arn}
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            outputs = {"latestVersion": 1, "arn": arn}
        return f"{name}-id", {**inputs, **outputs}

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:  # type: ignore[override]  # a dict is accepted
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": self.account_id, "arn": self.caller_arn, "userId": "MOCK", "id": "x"}
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            return self._availability_zones(args.args)
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            return self._instance_type_offerings(args.args)
        if args.token == "aws:eks/getClusters:getClusters":
            return {"names": sorted(self.clusters), "id": self.region}
        if args.token == "aws:eks/getCluster:getCluster":
            return {
                "name": args.args["name"],
                "endpoint": "https://mock.eks.amazonaws.com",
                "certificateAuthorities": [{"data": "TU9DSy1DQQ=="}],
                "vpcConfig": {"clusterSecurityGroupId": "sg-0cluster"},
                "kubernetesNetworkConfigs": [{"serviceIpv4Cidr": "172.20.0.0/16"}],
                "tags": self.clusters.get(args.args["name"], {}),
            }
        # An empty answer would let the program build on outputs no real invoke returns: name the gap.
        raise NotImplementedError(f"the offline mock has no answer for invoke {args.token}; add one here")

    def _availability_zones(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """DescribeAvailabilityZones: every zone the account sees, narrowed by `filters` as EC2 does
        (opt-in-status, zone-type); `state` "available" keeps them all."""
        zones = zones_of(self.region)
        for f in request.get("filters") or []:
            column = {"opt-in-status": 1, "zone-type": 2}[f["name"]]
            zones = [z for z in zones if z[column] in f["values"]]
        names = [z[0] for z in zones]
        return {"names": names, "zoneIds": names, "groupNames": names, "id": self.region}

    def _instance_type_offerings(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """DescribeInstanceTypeOfferings by AZ: a (type, AZ) pair per offering, filtered by instance-type."""
        if request.get("locationType") != "availability-zone":
            raise NotImplementedError("the offline mock answers locationType availability-zone only")
        table = self.offerings.get(self.region, {})
        regular = [z[0] for z in zones_of(self.region) if z[2] == "availability-zone"]
        filters = request.get("filters") or []
        wanted: list[str] = next((f["values"] for f in filters if f["name"] == "instance-type"), [])
        pairs = [(t, z) for t in wanted for z in table.get(t, regular)]
        return {
            "instanceTypes": [t for t, _ in pairs],
            "locations": [z for _, z in pairs],
            "locationTypes": ["availability-zone"] * len(pairs),
            "locationType": "availability-zone",
            "id": self.region,
        }


class ImmediateExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs the SDK's blocking RPC calls inline on the event loop's thread (pulumi/pulumi#7663): the mock
    monitor then resolves resource references in inputs on the loop that awaits them."""

    def submit(self, fn, /, *args, **kwargs):
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to the awaiting coroutine, as a thread pool would
            future.set_exception(e)
        return future


def install_mocks(
    mocks: pulumi.runtime.Mocks,
    stack: str,
    monitor: runtime_mocks.MockMonitor | None = None,
    organization: str | None = None,
) -> None:
    """set_mocks on a fresh event loop whose executor runs RPCs inline, with a root Stack of its own: one
    left from an earlier install would hold futures of that install's loop."""
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ImmediateExecutor())
    asyncio.set_event_loop(loop)
    runtime_settings.ROOT.set(None)
    pulumi.runtime.set_mocks(
        mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor, organization=organization
    )


@dataclass
class Registered:
    type: str
    name: str
    parent: str | None
    inputs: dict
    # Input name -> the names of the resources it was computed from (the registration's property
    # dependencies, as the engine hands them to the policy pack's stack rules).
    deps: dict[str, list[str]] = field(default_factory=dict)


class RecordingMonitor(runtime_mocks.MockMonitor):
    """The mock monitor, also keeping every registration in order with its parent and raw inputs."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.registered: list[Registered] = []

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        parent = None
        if request.parent and request.parent.split("::")[2].split("$")[-1] != "pulumi:pulumi:Stack":
            parent = request.parent.split("::")[-1]
        inputs = _masked(json_format.MessageToDict(request.object))
        deps = {
            prop: [urn.split("::")[-1] for urn in dependencies.urns]
            for prop, dependencies in request.propertyDependencies.items()
            if dependencies.urns
        }
        self.registered.append(Registered(request.type, request.name, parent, inputs, deps))
        return super().RegisterResource(request)


def _masked(value: Any) -> Any:
    """Replace Pulumi's wire sentinels: secrets by "[secret]", unknowns by "[unknown]"."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return "[secret]"
        if sig == rpc._special_resource_sig:
            return f"[resource {value.get('urn', '').split('::')[-1]}]"
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the wire format has only doubles
    return "[unknown]" if value == rpc.UNKNOWN else value


def stack_config(stack: str, path: Path | None = None) -> dict[str, Any]:
    """The `config:` mapping of Pulumi.<stack>.yaml (or of the stack file at `path`)."""
    path = path or stack_files.stack_file(REPO, stack)
    if not path.exists():
        names = available_stacks()
        hint = stack_files.did_you_mean(stack, names)
        allowed = f"allowed: a platform stack here ({', '.join(names)})"
        raise FileNotFoundError(f"no stack file {path}{hint}; {allowed}")
    return read_stack_file(path)


def platform_stack_config(stack: str, path: Path | None = None) -> dict[str, Any]:
    """stack_config for a command that runs the platform program: a workload stack is refused by name."""
    config = stack_config(stack, path)
    if stack_files.is_workload_stack(config):
        problem = (
            f"{stack!r} is a workload stack (it sets {stack_files.WORKLOAD_STACK_KEY}); allowed: a "
            f"platform stack ({', '.join(available_stacks())}); a workload stack is checked with "
            f"`python -m workloads plan --stack {stack}`"
        )
        raise ConfigError([problem])
    return config


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file; ConfigError (file, line, what is wrong) if it is not YAML
    or not shaped like a stack file."""
    try:
        return stack_files.read_config(path)
    except stack_files.StackFileError as err:
        raise ConfigError([str(err)]) from None


def available_stacks() -> list[str]:
    """Platform stacks only: a stack file that sets platformStack belongs to a workload stack. An unreadable
    file is listed too (its synth reports the problem), so one broken file does not hide the others."""
    return sorted(stack_files.platform_stacks(REPO))


def synth(
    stack: str,
    values: dict[str, Any],
    monitor_type: type[RecordingMonitor] | None = None,
    clusters: dict[str, dict[str, str]] | None = None,
    offerings: Mapping[str, Mapping[str, list[str]]] | None = None,
    account_id: str = ACCOUNT_ID,
) -> tuple[PlatformConfig, list[Registered], dict[str, Any]]:
    """Run the real platform program for `stack` under mocks. Raises ConfigError on invalid config.
    `monitor_type`: a RecordingMonitor subclass that keeps more of each registration (tests).
    `clusters`: the account's EKS clusters and their tags (default: none, the stack's first deploy);
    `offerings`: EC2's instance type offerings by region (default: `OFFERINGS`); `account_id`: whose
    account the outputs name (ECR's registry among them). Leaves an
    empty config and a fresh event loop behind, so a caller that synthesizes again (tests) starts clean."""
    from infra.program import program

    config = PlatformConfig.from_mapping(values)  # fail with the config message before any mock runs
    config.check_deployable()
    mocks = PlatformMocks(config.region, account_id=account_id, clusters=clusters, offerings=offerings)
    monitor = (monitor_type or RecordingMonitor)(mocks)
    install_mocks(mocks, stack, monitor)
    exports: dict[str, Any] = {}

    async def resolve(outputs: dict[str, pulumi.Output]) -> None:
        for key, output in outputs.items():
            exports[key] = "[secret]" if await output.is_secret() else await output.future()

    @pulumi.runtime.test
    def run():
        # The committed stack files' documentation placeholders are warned about here, refused by a deploy.
        platform = program(placeholders="warn")
        outputs = {k: pulumi.Output.from_input(v) for k, v in platform.exports.items()}
        return asyncio.ensure_future(resolve(outputs))

    try:
        with handed_over(*engine_values(values)):
            run()
    finally:
        asyncio.set_event_loop(asyncio.new_event_loop())
    return config, monitor.registered, exports
