"""policy/pod_security.py against pod-security-admission's behaviour (kubernetes/pod-security-admission
v0.35.4 policy/check_*.go): each check at the versions it changed, restricted's overrides of baseline
checks, and the user-namespace and Windows relaxations."""

from __future__ import annotations

import pytest

from policy.pod_security import normalized_host_path, violations

RESTRICTED_OK = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "c",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
}


def _with(container: dict | None = None, **pod: object) -> dict:
    base = {k: v for k, v in RESTRICTED_OK.items()}
    c = {**RESTRICTED_OK["containers"][0]}
    ctx = {**c["securityContext"], **((container or {}).pop("securityContext", {}))}
    c.update(container or {}, securityContext=ctx)
    base["containers"] = [c]
    for key, value in pod.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) and key in base else value
    return base


def checks(
    spec: dict, level: str = "restricted", version: str = "latest", metadata: dict | None = None
) -> set:
    return {v.check for v in violations(spec, metadata, level=level, version=version)}


def test_a_restricted_pod_passes_every_level_and_version():
    for version in ("v1.0", "v1.22", "v1.25", "v1.35", "latest"):
        assert checks(RESTRICTED_OK, version=version) == set(), version


@pytest.mark.parametrize(
    ("spec", "level", "refused_at", "allowed_at", "check"),
    [
        # check_hostProbesAndhostLifecycle.go: baseline from 1.34.
        (
            _with({"livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}),
            "baseline",
            "v1.34",
            "v1.33",
            "hostProbesAndHostLifecycle",
        ),
        # check_sysctls.go: tcp_rmem allowed from 1.32.
        (
            _with(
                securityContext={"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]}
            ),
            "baseline",
            "v1.31",
            "v1.32",
            "sysctls",
        ),
        # check_runAsUser.go: restricted from 1.23.
        (_with({"securityContext": {"runAsUser": 0}}), "restricted", "v1.23", "v1.22", "runAsUser"),
        # check_seLinuxOptions.go: container_engine_t allowed from 1.31.
        (
            _with({"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}}),
            "baseline",
            "v1.30",
            "v1.31",
            "seLinuxOptions",
        ),
        # check_procMount_baseline.go: any procMount in a user namespace from 1.35.
        (
            _with({"securityContext": {"procMount": "Unmasked"}}, hostUsers=False),
            "baseline",
            "v1.34",
            "v1.35",
            "procMount",
        ),
        # check_capabilities_restricted.go: before 1.22 restricted used baseline's list (CHOWN allowed).
        (
            _with({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}),
            "restricted",
            "v1.22",
            "v1.21",
            "capabilities_restricted",
        ),
        # check_allowPrivilegeEscalation.go: Windows pods exempt from 1.25.
        (
            _with({"securityContext": {"allowPrivilegeEscalation": None}}, os={"name": "windows"}),
            "restricted",
            "v1.24",
            "v1.25",
            "allowPrivilegeEscalation",
        ),
    ],
)
def test_each_check_at_the_versions_it_changed(spec, level, refused_at, allowed_at, check):
    assert check in checks(spec, level, refused_at)
    assert check not in checks(spec, level, allowed_at)


def test_restricted_overrides_baseline_checks():
    host = _with(volumes=[{"name": "h", "hostPath": {"path": "/"}}])
    assert checks(host, "baseline") == {"hostPathVolumes"}
    assert checks(host, "restricted") == {"restrictedVolumes"}  # restrictedVolumes overrides hostPathVolumes
    unmasked = _with({"securityContext": {"procMount": "Unmasked"}}, hostUsers=False)
    assert checks(unmasked, "baseline") == set()
    assert checks(unmasked, "restricted") == {"procMount_restricted"}


def test_capabilities_are_compared_as_written():
    """check_capabilities_baseline.go compares the strings: CAP_CHOWN and chown are not CHOWN."""
    for cap in ("CAP_CHOWN", "chown", "SYS_ADMIN", "NET_ADMIN"):
        spec = _with({"securityContext": {"capabilities": {"drop": ["ALL"], "add": [cap]}}})
        assert "capabilities_baseline" in checks(spec, "baseline"), cap
    ok = _with({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}})
    assert checks(ok, "baseline") == set()


def test_seccomp_by_annotation_before_1_19_and_by_field_after():
    metadata = {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}
    assert "seccompProfile_baseline" in checks(RESTRICTED_OK, "baseline", "v1.18", metadata)
    assert checks(RESTRICTED_OK, "baseline", "v1.19", metadata) == set()
    unconfined = _with(securityContext={"seccompProfile": {"type": "Unconfined"}})
    assert "seccompProfile_baseline" in checks(unconfined, "baseline")


def test_apparmor_by_field_and_by_annotation():
    field = _with({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}})
    assert checks(field, "baseline") == {"appArmorProfile"}
    annotation = {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}
    assert checks(RESTRICTED_OK, "baseline", metadata=annotation) == {"appArmorProfile"}
    local = {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"}}
    assert checks(RESTRICTED_OK, "baseline", metadata=local) == set()


def test_host_port_and_privileged_and_host_process():
    assert checks(_with({"ports": [{"containerPort": 80, "hostPort": 80}]}), "baseline") == {"hostPorts"}
    assert checks(_with({"ports": [{"containerPort": 80, "hostPort": 0}]}), "baseline") == set()
    assert checks(_with({"securityContext": {"privileged": True}}), "baseline") == {"privileged"}
    host_process = _with(securityContext={"windowsOptions": {"hostProcess": True}})
    assert checks(host_process, "baseline") == {"windowsHostProcess"}


def test_run_as_non_root_on_the_pod_or_every_container():
    unset = _with(securityContext={"runAsNonRoot": None})
    assert "runAsNonRoot" in checks(unset)
    per_container = _with({"securityContext": {"runAsNonRoot": True}}, securityContext={"runAsNonRoot": None})
    assert "runAsNonRoot" not in checks(per_container)
    assert checks(_with(hostUsers=False, securityContext={"runAsNonRoot": None}), version="v1.35") == set()


@pytest.mark.parametrize(
    ("path", "normalized"),
    [("/./etc", "/etc"), ("//etc", "/etc"), ("/var/lib/../../etc/", "/etc"), ("", "/"), ("///", "/")],
)
def test_host_paths_read_as_the_node_resolves_them(path, normalized):
    assert normalized_host_path(path) == normalized
