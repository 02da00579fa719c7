#!/usr/bin/env bash
# Build-stage step shared by docker/{cuda,rocm,cpu}/Dockerfile: create the virtual environment the image
# runs ($VENV) on the base image's Python and install every pin of pyproject.toml's base dependencies and
# image extras into it, each package checked against the sha256 hashes of its lock (generated from
# pyproject.toml by scripts/lock_requirements.py images): `train` from docker/requirements.lock, `ray` (Ray
# Train, for `operator: rayjob`) from docker/requirements-ray.lock. IMAGE_EXTRAS="train" leaves Ray out.
# Only pyproject.toml and docker/ need to be present, so this layer is cached until a pin changes.
#
#   install-python-deps.sh PYPROJECT VERSION TORCH_INDEX_URL -- CHECK_TORCH_ARGS...
#
# Needs the base image's python3 (3.11+) with pip 22.3+ (for --python).
# torch comes from TORCH_INDEX_URL (the PyTorch wheel index of the image's platform) unless the base image
# already ships the pinned version, as the CUDA and ROCm bases do; check_torch.py then fails the build
# unless the torch in place is the pinned version built for the expected platform.
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

python3 -c 'import sys; sys.exit(None if sys.version_info >= (3, 11) else
    f"base image Python {sys.version.split()[0]} is older than pyproject.toml requires (>=3.11)")'
python3 "$here/pyproject_requirements.py" "$pyproject" --check-version "$version"
python3 "$here/pyproject_requirements.py" "$pyproject" "${extra_args[@]}" >"$requirements"
torch_pin=$(python3 "$here/pyproject_requirements.py" "$pyproject" --extra train --only torch)
# The locks must hold pyproject's pins (torch aside: it comes from the base image or the torch index).
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

echo "install-python-deps: $torch_pin from $torch_index (already satisfied when the base image ships it)"
"${pip[@]}" --index-url "$torch_index" "$torch_pin"
echo "install-python-deps: pyproject.toml pins: $(tr '\n' ' ' <"$requirements")"
# --no-deps: the locks are the whole closure; --require-hashes: an artifact with another hash fails.
"${pip[@]}" --require-hashes --no-deps --requirement "$locked"
# A torchrun that runs the venv's Python: the base image's own (CUDA, ROCm) would start the workers with
# the base interpreter, which does not see the venv's packages.
if [[ ! -e $venv/bin/torchrun ]]; then
  printf '#!%s\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n' "$venv/bin/python" \
    >"$venv/bin/torchrun"
  chmod 755 "$venv/bin/torchrun"
fi
"$venv/bin/python" "$here/check_torch.py" --pin "$torch_pin" "$@"
rm -f "$requirements" "$locked"
