#!/usr/bin/env bash
# Build-stage step shared by docker/{cuda,rocm,cpu}/Dockerfile: create the virtual environment the image
# runs ($VENV) on the base image's Python and install every pin of pyproject.toml's base dependencies and
# image extras into it, each package checked against the sha256 hashes of its lock (generated from
# pyproject.toml by scripts/lock_requirements.py images): `train` from docker/requirements.lock, `ray` (Ray
# Train, for `operator: rayjob`) from docker/requirements-ray.lock, `llm` (transformers and peft, for
# `llm.model`; resolved on top of train and ray, so it comes with both) from docker/requirements-llm.lock,
# `mlflow` (the MLflow client, for `mlflow.tracking_uri`; resolved on top of train, ray and llm) from
# docker/requirements-mlflow.lock.
# IMAGE_EXTRAS="train" leaves Ray out; the cuda image sets "train ray llm mlflow".
# Only pyproject.toml and docker/ need to be present, so this layer is cached until a pin changes.
#
#   install-python-deps.sh PYPROJECT VERSION TORCH_INDEX_URL -- CHECK_TORCH_ARGS...
#
# Needs the base image's python3 (3.11+) with pip 22.3+ (for --python).
# torch: the base image's when it ships the pinned version, as the CUDA and ROCm bases do; otherwise the
# build from TORCH_INDEX_URL (the PyTorch wheel index of the image's platform) that its hash lock
# requirements-torch-<index name>.lock holds (requirements-torch-cpu.lock for .../whl/cpu), hash-checked
# like everything else; without such a lock the build stops. check_torch.py then fails the build unless
# the torch in place is the pinned version built for the expected platform.
set -euo pipefail

usage="usage: $0 PYPROJECT VERSION TORCH_INDEX_URL -- CHECK_TORCH_ARGS..."
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  echo "$usage"
  sed -n '2,/^set -euo/p' "$0" | sed '$d'
  exit 0
fi
if [[ $# -lt 4 || $4 != "--" ]]; then
  echo "$usage" >&2
  exit 2
fi
pyproject=$1
version=$2
torch_index=$3
shift 4
venv=${VENV:-/opt/mlops-eks/venv}
here=$(cd "$(dirname "$0")" && pwd)
requirements=$(mktemp)
locked=$(mktemp)
# Each extra has its lock; the train lock also holds the base dependencies.
read -r -a extras <<<"${IMAGE_EXTRAS:-train ray}"
extra_args=()
locks=()
for extra in "${extras[@]}"; do
  extra_args+=(--extra "$extra")
  if [[ $extra == train ]]; then
    locks+=("$here/requirements.lock")
  else
    locks+=("$here/requirements-$extra.lock")
  fi
done

if [[ " ${extras[*]} " == *" llm "* && " ${extras[*]} " != *" ray "* ]]; then
  echo "error: IMAGE_EXTRAS='${extras[*]}': the llm lock completes the train and ray locks; add ray" >&2
  exit 2
fi
if [[ " ${extras[*]} " == *" mlflow "* && (" ${extras[*]} " != *" ray "* || " ${extras[*]} " != *" llm "*) ]]; then
  echo "error: IMAGE_EXTRAS='${extras[*]}': the mlflow lock completes the train, ray and llm locks; add them" >&2
  exit 2
fi
python3 -c 'import sys; sys.exit(None if sys.version_info >= (3, 11) else
    f"base image Python {sys.version.split()[0]} is older than pyproject.toml requires (>=3.11)")'
python3 "$here/pyproject_requirements.py" "$pyproject" --check-version "$version"
python3 "$here/pyproject_requirements.py" "$pyproject" "${extra_args[@]}" >"$requirements"
torch_pin=$(python3 "$here/pyproject_requirements.py" "$pyproject" --extra train --only torch)
index_args=()
if python3 "$here/pyproject_requirements.py" "$pyproject" --extra train --installed torch; then
  echo "install-python-deps: $torch_pin from the base image"
else
  torch_index=${torch_index%/}
  torch_lock="$here/requirements-torch-${torch_index##*/}.lock"
  if [[ ! -f $torch_lock ]]; then
    echo "error: the base image has no $torch_pin, and $torch_index has no hash lock ($torch_lock):" \
      "generate it with scripts/lock_requirements.py torch --torch-index $torch_index" >&2
    exit 1
  fi
  locks+=("$torch_lock")
  index_args=(--extra-index-url "$torch_index")
  echo "install-python-deps: $torch_pin from $torch_index, checked against $(basename "$torch_lock")"
fi
# The locks must hold pyproject's pins (torch: unless the base image ships it).
cat "${locks[@]}" >"$locked"
python3 "$here/pyproject_requirements.py" "$pyproject" "${extra_args[@]}" --check-lock "$locked"

# No pip (nor, on Python 3.11, setuptools) in the venv: the base image's pip installs into it, and nothing
# in the venv shadows the base's own packages unless pyproject pins it.
python3 -m venv --without-pip "$venv"
pip=(python3 -m pip --python "$venv/bin/python" install --no-cache-dir)
# Let the venv see the base interpreter's packages (the base image's torch build), after its own: pip
# counts them as installed, and a pin that differs from the base's version goes into the venv and wins.
venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import site; print("\n".join(site.getsitepackages()))' >"$venv_site/_base_image_packages.pth"

echo "install-python-deps: pyproject.toml pins: $(tr '\n' ' ' <"$requirements")"
# --no-deps: the locks are the whole closure; --require-hashes: an artifact with another hash fails, from
# whichever index it comes (PyPI, or the torch index for the torch build only it serves).
"${pip[@]}" "${index_args[@]}" --require-hashes --no-deps --requirement "$locked"
# A torchrun that runs the venv's Python: the base image's own (CUDA, ROCm) would start the workers with
# the base interpreter, which does not see the venv's packages.
if [[ ! -e $venv/bin/torchrun ]]; then
  printf '#!%s\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n' "$venv/bin/python" \
    >"$venv/bin/torchrun"
  chmod 755 "$venv/bin/torchrun"
fi
"$venv/bin/python" "$here/check_torch.py" --pin "$torch_pin" "$@"
rm -f "$requirements" "$locked"
