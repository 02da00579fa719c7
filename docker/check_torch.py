"""Check that the installed torch is the build an image needs, and (on a GPU node) that it computes.

Build time, no GPU present (docker/install-python-deps.sh runs it; a mismatch fails the build):
    python check_torch.py --pin torch==2.13.0 --backend cuda --cuda-version 12.6 --archs sm_75,sm_80
On a node, inside the image (docs/images.md "The V520": what to run on a new GPU type, e.g. g4ad's V520):
    python /opt/mlops-eks/check_torch.py --backend rocm --on-device
"""

from __future__ import annotations

import argparse
import os
import sys


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pin", help="the pyproject pin, e.g. torch==2.13.0 (public version must match)")
    p.add_argument("--backend", choices=["cuda", "rocm", "cpu"], required=True)
    p.add_argument("--cuda-version", help="CUDA major.minor the build must target, e.g. 12.6")
    p.add_argument("--archs", default="", help="comma-separated sm_XY targets the build must run on")
    p.add_argument("--on-device", action="store_true", help="also compute on every visible GPU vs the CPU")
    return p


if __name__ == "__main__":
    parser().parse_args()  # --help and bad arguments answer here, before torch is imported (seconds)

import torch  # noqa: E402


class CheckFailed(RuntimeError):
    pass


def _parse_target(target: str) -> tuple[int, int]:
    """'sm_75' -> (7, 5), 'sm_120' -> (12, 0); 'compute_80' likewise."""
    digits = target.split("_", 1)[1].rstrip("a").rstrip("f")
    return int(digits[:-1]), int(digits[-1])


def arch_covered(target: str, compiled: list[str]) -> bool:
    """Whether a GPU of compute capability `target` runs kernels of a build compiled for `compiled`.

    A cubin for sm_XY runs on sm_XZ with Z >= Y (same major); PTX (compute_XY) JIT-compiles for any
    later capability.
    """
    major, minor = _parse_target(target)
    for arch in compiled:
        a_major, a_minor = _parse_target(arch)
        if arch.startswith("sm_") and a_major == major and a_minor <= minor:
            return True
        if arch.startswith("compute_") and (a_major, a_minor) <= (major, minor):
            return True
    return False


def check_build(pin: str | None, backend: str, cuda_version: str | None, archs: list[str]) -> list[str]:
    """Static checks that need no GPU; returns lines describing the build."""
    if pin is not None:
        wanted = pin.split("==", 1)[1]
        public = torch.__version__.split("+", 1)[0]
        if public != wanted:
            raise CheckFailed(f"torch {torch.__version__} installed, but pyproject.toml pins {pin}")
    hip, cuda = torch.version.hip, torch.version.cuda
    if backend == "cpu" and (hip or cuda):
        raise CheckFailed(
            f"torch {torch.__version__} is a GPU build (cuda={cuda}, hip={hip}); expected CPU-only"
        )
    if backend == "rocm" and not hip:
        raise CheckFailed(f"torch {torch.__version__} is not a ROCm build (torch.version.hip is None)")
    if backend == "cuda":
        if not cuda:
            raise CheckFailed(f"torch {torch.__version__} is not a CUDA build (torch.version.cuda is None)")
        if cuda_version and not (cuda == cuda_version or cuda.startswith(cuda_version + ".")):
            raise CheckFailed(
                f"torch {torch.__version__} is built for CUDA {cuda}; expected CUDA {cuda_version}"
            )
        # The compiled arch list, readable without a GPU (torch.cuda.get_arch_list() needs a device).
        get_arch_flags = getattr(torch._C, "_cuda_getArchFlags", None)
        if get_arch_flags is None:
            raise CheckFailed(f"torch {torch.__version__}: cannot read its compiled CUDA arch list")
        compiled = (get_arch_flags() or "").split()
        missing = [a for a in archs if not arch_covered(a, compiled)]
        if missing:
            raise CheckFailed(
                f"torch {torch.__version__} has kernels for {compiled}, none usable on {missing}"
            )
    lines = [f"torch {torch.__version__} (cuda={cuda}, hip={hip}) matches backend {backend!r}"]
    if backend == "cuda":
        lines.append(f"kernels for {' '.join(compiled)}; runs on {' '.join(archs) or '(none required)'}")
    if backend != "cpu":
        # For the build log: the NCCL (RCCL on ROCm) that ships with this torch. Informational only.
        try:
            lines.append(f"{'RCCL' if hip else 'NCCL'} {'.'.join(map(str, torch.cuda.nccl.version()))}")
        except (AttributeError, RuntimeError) as err:
            lines.append(f"NCCL version not readable without a GPU here: {err}")
    return lines


def _reference_step(device: torch.device) -> list[torch.Tensor]:
    """A matmul, a convolution and one optimiser step of a small MLP, from fixed seeds."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    image, kernel = torch.randn(4, 3, 32, 32, generator=gen), torch.randn(8, 3, 3, 3, generator=gen)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 2))
    x, y = torch.randn(32, 64, generator=gen), torch.randint(0, 2, (32,), generator=gen)
    model.to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    optimiser.step()
    outputs = [
        a.to(device) @ b.to(device),
        torch.nn.functional.conv2d(image.to(device), kernel.to(device)),
        loss.detach(),
        *[p.detach() for p in model.parameters()],
    ]
    return [t.cpu() for t in outputs]


def gfx_target(override: str) -> str:
    """HSA_OVERRIDE_GFX_VERSION 'major.minor.stepping' -> the gfx target it selects: 10.3.0 -> gfx1030."""
    major, minor, stepping = (int(part) for part in override.split("."))
    return f"gfx{major}{minor}{stepping:x}"


def _check_gfx_override(override: str | None, compiled: list[str]) -> str:
    """With the override, the GPU runs kernels built for its target: the build must contain them."""
    if not override:
        return f"HSA_OVERRIDE_GFX_VERSION unset; compiled gfx targets: {compiled}"
    target = gfx_target(override)
    if target not in {arch.split(":", 1)[0] for arch in compiled}:
        raise CheckFailed(
            f"HSA_OVERRIDE_GFX_VERSION={override} selects {target}, but this torch has kernels for {compiled}"
        )
    return f"HSA_OVERRIDE_GFX_VERSION={override}: runs {target} kernels, which this torch has"


def check_devices(device_type: str) -> list[str]:
    """Run the reference step on every visible device and compare it with the CPU result."""
    if device_type != "cpu" and not torch.cuda.is_available():
        raise CheckFailed(
            "torch.cuda.is_available() is False: no GPU is visible (device plugin resources requested? "
            "/dev/kfd and /dev/dri readable for ROCm? driver loaded?)"
        )
    # TF32 would make an fp32 comparison with the CPU meaningless on A100.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    expected = _reference_step(torch.device("cpu"))
    devices = ["cpu"] if device_type == "cpu" else [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    lines = []
    if torch.version.hip and device_type != "cpu":
        # Before any kernel runs: kernels for a target the GPU does not present fail or hang.
        override = os.environ.get("HSA_OVERRIDE_GFX_VERSION")
        lines.append(_check_gfx_override(override, torch.cuda.get_arch_list()))
    for name in devices:
        device = torch.device(name)
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            arch = props.gcnArchName if torch.version.hip else f"sm_{props.major}{props.minor}"
            lines.append(f"{name}: {props.name} arch={arch} memory={props.total_memory / 2**30:.1f} GiB")
        got = _reference_step(device)
        worst = max(
            float((g - e).abs().max() / (e.abs().max() + 1e-6)) for g, e in zip(got, expected, strict=True)
        )
        if not worst < 1e-3:
            raise CheckFailed(
                f"{name}: results differ from the CPU by {worst:.2e} (relative); this build is unusable here"
            )
        lines.append(
            f"{name}: matmul, conv2d and an AdamW step agree with the CPU (max relative error {worst:.1e})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    archs = [a for a in args.archs.replace(" ", ",").split(",") if a]
    try:
        lines = check_build(args.pin, args.backend, args.cuda_version, archs)
        if args.on_device:
            lines += check_devices("cpu" if args.backend == "cpu" else "cuda")
    except CheckFailed as err:
        print(f"check_torch: FAILED: {err}", file=sys.stderr)
        return 1
    print("\n".join(f"check_torch: {line}" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
