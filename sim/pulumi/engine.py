"""The Pulumi engine's side of a preview or update, in-process, for the rehearsal (infra/tools/rehearse.py).

What runs is what `pulumi preview|up --policy-pack policy` runs, minus the cloud:
- the program, started the way pulumi-language-python starts it (sdk/python/cmd/pulumi-language-python
  main.go, `constructArguments`, `constructConfig`): the exec shim
  (sim/pulumi/language_python_exec.py)
  with `--monitor`, `--engine`, `--project`, `--stack`, `--dry_run`, ... and the stack's config in
  PULUMI_CONFIG / PULUMI_CONFIG_SECRET_KEYS. It talks gRPC to `Monitor` below, a real resource monitor
  server (not the SDK's MockMonitor), so the program takes its engine branch;
- the policy pack, started the way the language host's RunPlugin starts an analyzer (`python -u -m
  pulumi.policy <engine> <pack dir>`, working directory the pack, PULUMI_CONFIG/PROJECT/STACK/DRY_RUN),
  then driven as the engine drives it (pkg/engine/update.go LoadLocalPolicyPackAnalyzers: ConfigureStack,
  GetAnalyzerInfo, Configure with each policy's own level (pkg/resource/analyzer/config.go
  ReconcilePolicyPackConfig, no config file), Analyze for every registration, AnalyzeStack at the end).

What stands in for the cloud: a create returns the inputs plus the outputs `PlatformMocks.created` computes
(ARNs in the user's account); a preview returns the inputs only, so every computed output is unknown, as
on a first `pulumi preview`. Invokes are answered by `PlatformMocks.call` (the caller is the rehearsal's
deploy identity; the EKS clusters are those earlier creates made); StackReference reads by the outputs of
the stacks rehearsed before, named as the backend names them: `organization/project/stack` on a
project-scoped backend (Pulumi Cloud, a DIY backend of the current layout); a DIY backend of the legacy
layout knows bare stack names only (pkg/backend/diy: "stack names may not contain slashes" without
project mode) and refuses an `org/project/stack` reference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import (
    analyzer_pb2,
    analyzer_pb2_grpc,
    engine_pb2,
    engine_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)

from infra.config.stack_files import PROJECT
from infra.tools.synth import PlatformMocks

REPO = Path(__file__).resolve().parents[2]
EXEC_SHIM = Path(__file__).with_name("language_python_exec.py")
POLICY_PACK = REPO / "policy"
ORGANIZATION = "organization"  # what a DIY backend calls every stack's organization
STACK_REFERENCE = "pulumi:pulumi:StackReference"
SECRET = {rpc._special_sig_key: rpc._special_secret_sig}
# What the program and the pack may take, at most (a cold start imports pulumi_aws and pulumi_kubernetes).
TIMEOUT_S = 600
# Runs a program's command line in `cwd` with `env` as its whole environment, within `timeout` seconds.
StartProgram = Callable[..., "subprocess.CompletedProcess[str]"]
# Starts the analyzer's command line (cwd=, env=) with stdout and stderr piped as text, as subprocess.Popen.
StartAnalyzer = Callable[..., "subprocess.Popen[str]"]


@dataclass
class Registration:
    """One resource as the engine saw it: inputs as sent, the state it answered, the graph edges."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    inputs: dict[str, Any]
    state: dict[str, Any]
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    id: str = ""
    delete_timeout: str = ""  # the resource's customTimeouts.delete ("" for the provider's default)


@dataclass
class Diagnostic:
    policy: str
    level: str  # "advisory" | "mandatory" | "remediate" | "disabled"
    urn: str
    message: str

    def __str__(self) -> str:
        return f"[{self.level}] {self.policy}: {self.urn.split('::')[-1] or 'stack'}: {self.message}"


@dataclass
class RunResult:
    """A preview or update: what the program registered and exported, logged, and what the pack said."""

    returncode: int
    registrations: list[Registration]
    outputs: dict[str, Any]
    logs: list[tuple[str, str]]  # (severity, message)
    diagnostics: list[Diagnostic]
    output: str  # the program's stdout and stderr
    caller: str = ""  # the identity the run deployed as
    policies: dict[str, str] = field(default_factory=dict)  # the pack's policies at their levels, as it said

    @property
    def errors(self) -> list[str]:
        return [m for s, m in self.logs if s == "error"]

    @property
    def mandatory(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "mandatory"]


def _unwrap(value: Any) -> Any:
    """Wire values as a provider receives them: secrets unwrapped, resource references as their id."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return _unwrap(value.get("value"))
        if sig == rpc._special_resource_sig:
            return value.get("id") or value.get("urn")
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


def _for_analyzer(value: Any) -> Any:
    """Properties as the engine marshals them for an analyzer
    (sdk/go/common/resource/plugin/analyzer_plugin.go,
    Analyze: KeepUnknowns, KeepSecrets, no KeepResources, SkipInternalKeys): a resource reference becomes
    its id (a component's: its URN), keys starting with "__" are dropped."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return value.get("id") or value.get("urn")
        return {k: _for_analyzer(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [_for_analyzer(v) for v in value]
    return value


def _struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(dict(value))
    return message


class Engine(engine_pb2_grpc.EngineServicer):
    """Collects the program's log messages (pulumi.log.warn/error, RunError)."""

    def __init__(self) -> None:
        self.logs: list[tuple[str, str]] = []
        self.root = ""

    def Log(self, request, context):  # noqa: N802 (gRPC method names)
        severity = {engine_pb2.WARNING: "warning", engine_pb2.ERROR: "error", engine_pb2.INFO: "info"}
        self.logs.append((severity.get(request.severity, "debug"), request.message))
        return empty_pb2.Empty()

    def GetRootResource(self, request, context):  # noqa: N802
        return engine_pb2.GetRootResourceResponse(urn=self.root)

    def SetRootResource(self, request, context):  # noqa: N802
        self.root = request.urn
        return engine_pb2.SetRootResourceResponse()

    def RequirePulumiVersion(self, request, context):  # noqa: N802
        return empty_pb2.Empty()


class Monitor(resource_pb2_grpc.ResourceMonitorServicer):
    """The resource monitor a program connects to with `--monitor`."""

    def __init__(
        self,
        *,
        stack: str,
        preview: bool,
        cloud: PlatformMocks,
        stack_outputs: Mapping[str, Mapping[str, Any]],
        analyzer: Analyzer | None,
        legacy_backend: bool = False,
    ) -> None:
        self.stack, self.preview, self.cloud = stack, preview, cloud
        self.legacy_backend = legacy_backend
        self.stack_outputs = stack_outputs
        self.analyzer = analyzer
        self.registrations: list[Registration] = []
        self.outputs: dict[str, Any] = {}
        self.root_urn = ""
        self._lock = threading.Lock()

    def _urn(self, parent: str, type_: str, name: str) -> str:
        if parent:
            type_ = parent.split("::")[2].split("$")[-1] + "$" + type_
        return f"urn:pulumi:{self.stack}::{PROJECT}::{type_}::{name}"

    def SupportsFeature(self, request, context):  # noqa: N802
        # Output values stay off, as under the engine for programs that do not ask for them.
        return resource_pb2.SupportsFeatureResponse(hasSupport=request.id != "outputValues")

    def GetDeploymentInfo(self, request, context):  # noqa: N802
        return resource_pb2.DeploymentInfo(
            supportedFeatures=[
                resource_pb2.RESOURCE_MONITOR_FEATURE_SECRETS,
                resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES,
                resource_pb2.RESOURCE_MONITOR_FEATURE_ALIAS_SPECS,
                resource_pb2.RESOURCE_MONITOR_FEATURE_DELETED_WITH,
                resource_pb2.RESOURCE_MONITOR_FEATURE_INVOKE_TRANSFORMS,
                resource_pb2.RESOURCE_MONITOR_FEATURE_TRANSFORMS,
            ]
        )

    def RegisterPackage(self, request, context):  # noqa: N802
        return resource_pb2.RegisterPackageResponse(ref=f"{request.name}-{request.version}")

    def Invoke(self, request, context):  # noqa: N802
        if request.tok == "pulumi:pulumi:getResource":
            # How the SDK rehydrates a resource reference it finds in an answer (the engine's builtin).
            urn = json_format.MessageToDict(request.args)["urn"]
            with self._lock:
                found = next((r for r in self.registrations if r.urn == urn), None)
            if found is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"unknown resource {urn}")
            answer = {"urn": urn, "id": found.id, "state": found.state}
            return resource_pb2.ResourceInvokeResponse(**{"return": _struct(answer)})
        args = _unwrap(json_format.MessageToDict(request.args))
        try:
            result = self.cloud.call(_CallArgs(request.tok, args))
        except NotImplementedError as err:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(err))
        return resource_pb2.ResourceInvokeResponse(**{"return": _struct(result)})

    def ReadResource(self, request, context):  # noqa: N802
        urn = self._urn(request.parent, request.type, request.name)
        if request.type != STACK_REFERENCE:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the rehearsal reads no {request.type}")
        name = request.id
        if self.legacy_backend and "/" in name:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"stack reference {name!r}: a DIY backend of the legacy layout has no organization or "
                "project "
                "in stack names",
            )
        if name not in self.stack_outputs and not name.endswith(f"/{self.stack}"):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no stack {name} was rehearsed before this one")
        # A stack that has not been updated yet (its own first deploy) has no outputs.
        outputs = dict(self.stack_outputs.get(name, {}))
        state = {"name": name, "outputs": outputs, "secretOutputNames": []}
        return resource_pb2.ReadResourceResponse(urn=urn, properties=_struct(state))

    def RegisterResource(self, request, context):  # noqa: N802
        urn = self._urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            self.root_urn = urn
            return resource_pb2.RegisterResourceResponse(urn=urn)
        inputs = json_format.MessageToDict(request.object)
        registration = Registration(
            urn=urn,
            type=request.type,
            name=request.name,
            parent=request.parent,
            custom=request.custom,
            inputs=inputs,
            state={},
            dependencies=list(request.dependencies),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            delete_timeout=request.customTimeouts.delete,
        )
        if self.analyzer is not None:
            self.analyzer.analyze(registration)
        id_, state = "", dict(inputs)
        if not self.preview and (request.custom or request.remote):
            try:
                id_, created = self.cloud.created(request.type, request.name, _unwrap(inputs))
            except CreateFailed as err:
                context.abort(grpc.StatusCode.UNKNOWN, str(err))
            secret_inputs = {
                k
                for k, v in inputs.items()
                if isinstance(v, dict) and v.get(rpc._special_sig_key) == rpc._special_secret_sig
            }
            for key, value in created.items():
                if key in inputs and key not in secret_inputs and _unwrap(inputs[key]) == value:
                    continue
                secret = key in PlatformMocks.SECRET_OUTPUTS or key in secret_inputs
                state[key] = {**SECRET, "value": value} if secret else value
        registration.state, registration.id = state, id_
        with self._lock:
            self.registrations.append(registration)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=_struct(state))

    def RegisterResourceOutputs(self, request, context):  # noqa: N802
        if request.urn == self.root_urn:
            self.outputs = json_format.MessageToDict(request.outputs)
        return empty_pb2.Empty()

    def SignalAndWaitForShutdown(self, request, context):  # noqa: N802
        return empty_pb2.Empty()


class CreateFailed(Exception):
    """What a cloud stand-in raises for a create the provider would fail (the update stops there)."""


@dataclass
class _CallArgs:
    """What PlatformMocks.call reads of an invoke (the SDK's MockCallArgs shape)."""

    token: str
    args: dict[str, Any]
    provider: str = ""


LEVELS = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.REMEDIATE: "remediate",
    analyzer_pb2.DISABLED: "disabled",
}


@dataclass
class Analyzer:
    """The policy pack's analyzer process, configured as the engine configures it."""

    process: subprocess.Popen
    stub: analyzer_pb2_grpc.AnalyzerStub
    channel: grpc.Channel
    diagnostics: list[Diagnostic] = field(default_factory=list)
    levels: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(
        cls,
        *,
        engine_address: str,
        stack: str,
        preview: bool,
        config: Mapping[str, str],
        secret_keys: list[str],
        start: StartAnalyzer | None = None,
    ) -> Analyzer:
        env = {
            **os.environ,
            "PULUMI_CONFIG": json.dumps(dict(config)),
            "PULUMI_PROJECT": PROJECT,
            "PULUMI_STACK": stack,
            "PULUMI_DRY_RUN": "true" if preview else "false",
            "PULUMI_ORGANIZATION": ORGANIZATION,
        }
        command = [sys.executable, "-u", "-m", "pulumi.policy", engine_address, str(POLICY_PACK)]
        process = (start or _popen)(command, cwd=POLICY_PACK, env=env)
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            process.kill()
            _, err = process.communicate(timeout=30)
            raise RuntimeError(f"the policy pack did not start (no port on stdout): {err[-3000:]}")
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        analyzer = cls(process, analyzer_pb2_grpc.AnalyzerStub(channel), channel)
        analyzer._configure(stack, preview, config, secret_keys)
        return analyzer

    def _configure(
        self, stack: str, preview: bool, config: Mapping[str, str], secret_keys: list[str]
    ) -> None:
        self.stub.ConfigureStack(
            analyzer_pb2.AnalyzerStackConfigureRequest(
                stack=stack,
                project=PROJECT,
                organization=ORGANIZATION,
                dry_run=preview,
                config=dict(config),
                config_secret_keys=secret_keys,
            )
        )
        info = self.stub.GetAnalyzerInfo(empty_pb2.Empty())
        # createConfigWithDefaults: every policy at the level the pack declares for it; no config file.
        policy_config = {
            p.name: analyzer_pb2.PolicyConfig(enforcementLevel=p.enforcementLevel) for p in info.policies
        }
        self.levels = {p.name: LEVELS[p.enforcementLevel] for p in info.policies}
        self.stub.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config))

    def _record(self, response: analyzer_pb2.AnalyzeResponse, urn: str) -> None:
        with self._lock:
            for d in response.diagnostics:
                self.diagnostics.append(
                    Diagnostic(d.policyName, LEVELS[d.enforcementLevel], d.urn or urn, d.message)
                )

    def analyze(self, r: Registration) -> None:
        request = analyzer_pb2.AnalyzeRequest(
            type=r.type,
            properties=_struct(_for_analyzer(r.inputs)),
            urn=r.urn,
            name=r.name,
            options=analyzer_pb2.AnalyzerResourceOptions(parent=r.parent),
        )
        self._record(self.stub.Analyze(request), r.urn)

    def analyze_stack(self, registrations: list[Registration]) -> None:
        resources = [
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=_struct(_for_analyzer(r.state if r.state else r.inputs)),
                urn=r.urn,
                name=r.name,
                parent=r.parent,
                dependencies=r.dependencies,
                propertyDependencies={
                    k: analyzer_pb2.AnalyzerPropertyDependencies(urns=v)
                    for k, v in r.property_dependencies.items()
                },
            )
            for r in registrations
        ]
        self._record(self.stub.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=resources)), "")

    def stop(self) -> None:
        self.channel.close()
        self.process.kill()
        self.process.communicate(timeout=30)


def _popen(command: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    pipe = subprocess.PIPE
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=True)


def run_program(
    *,
    stack: str,
    preview: bool,
    config: Mapping[str, str],
    secret_keys: list[str],
    cloud: PlatformMocks,
    stack_outputs: Mapping[str, Mapping[str, Any]],
    policy_pack: bool = True,
    legacy_backend: bool = False,
    start: StartProgram | None = None,
    start_analyzer: StartAnalyzer | None = None,
) -> RunResult:
    """One `pulumi preview` (preview=True) or the update step of `pulumi up` of `stack`. `legacy_backend`:
    the state lives in a DIY backend of the legacy layout (see the module docstring). `start`: what runs the
    program's command line instead of a fresh interpreter (the tests fork it from one that imported the SDKs,
    tests/infra/warm_interpreter.py); its answer is subprocess.run's. `start_analyzer`: what starts the policy
    pack's analyzer instead of a fresh interpreter (the tests fork it, tests/warm_fork.py)."""
    engine = Engine()
    monitor = Monitor(
        stack=stack,
        preview=preview,
        cloud=cloud,
        stack_outputs=stack_outputs,
        analyzer=None,
        legacy_backend=legacy_backend,
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    engine_pb2_grpc.add_EngineServicer_to_server(engine, server)
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(monitor, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    address = f"127.0.0.1:{port}"
    analyzer = None
    try:
        if policy_pack:
            analyzer = Analyzer.start(
                engine_address=address,
                stack=stack,
                preview=preview,
                config=config,
                secret_keys=secret_keys,
                start=start_analyzer,
            )
            monitor.analyzer = analyzer
        # The language host's constructArguments, in its order; the entry point "." is run in --pwd.
        args = [sys.executable, str(EXEC_SHIM), "--monitor", address, "--engine", address]
        args += ["--project", PROJECT, "--root_directory", str(REPO), "--stack", stack, "--pwd", str(REPO)]
        args += [
            "--dry_run",
            "true" if preview else "false",
            "--parallel",
            "16",
            "--organization",
            ORGANIZATION,
        ]
        args += ["."]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        env |= {
            "PULUMI_CONFIG": json.dumps(dict(config)),
            "PULUMI_CONFIG_SECRET_KEYS": json.dumps(secret_keys),
        }
        if start is None:
            done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        else:
            done = start(args, cwd=REPO, env=env, timeout=TIMEOUT_S)
        if analyzer is not None and done.returncode == 0:
            analyzer.analyze_stack(monitor.registrations)
        return RunResult(
            returncode=done.returncode,
            registrations=list(monitor.registrations),
            outputs=monitor.outputs,
            logs=engine.logs,
            diagnostics=analyzer.diagnostics if analyzer else [],
            policies=dict(analyzer.levels) if analyzer else {},
            output=done.stdout + done.stderr,
            caller=cloud.caller_arn,
        )
    finally:
        if analyzer is not None:
            analyzer.stop()
        server.stop(0)
