#!/usr/bin/env bash
# Build the training images (docker/{cuda,rocm,cpu}/Dockerfile) for linux/amd64 with docker buildx, push
# them to the ECR repositories of a platform stack, and print the references a workload stack takes.
#
#   scripts/build-images.sh --stack dev [--only cuda,cpu] [--dry-run]
#
# --dry-run prints the login and build commands instead of running them (stack outputs and ECR are read).
# Needs docker with buildx, the AWS CLI with credentials for the platform's account, the Pulumi CLI logged
# in to the backend holding the platform stack, git and python3 (3.11+). The tag is the commit
# (12 hex digits); a working tree with uncommitted changes is refused because the tag would not say what
# was built (ALLOW_DIRTY=1 builds it anyway, tagged <commit>-dirty-<UTC time>). The platform's ECR tags
# are immutable, so an image whose tag is already there is not built again. SOURCE_URL overrides the
# source label, which is otherwise the `origin` remote.
set -euo pipefail

FLAVORS=(cuda rocm cpu)

usage() {  # --help: exit 0; any other caller passes its status
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

die() {
  echo "build-images: error: $*" >&2
  exit 1
}

stack=""
only=""
dry_run=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --stack | --only)
      [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"
      if [[ $1 == --stack ]]; then stack=$2; else only=$2; fi
      shift 2
      ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1'; allowed: --stack NAME, --only LIST, --dry-run" ;;
  esac
done
[[ -n $stack ]] || die "--stack is required: the platform stack whose ECR repositories receive the images (e.g. --stack dev; make images STACK=dev)"

flavors=("${FLAVORS[@]}")
if [[ -n $only ]]; then
  IFS=',' read -r -a flavors <<<"$only"
  for f in "${flavors[@]}"; do
    [[ " ${FLAVORS[*]} " == *" $f "* ]] || die "--only: '$f' is not an image; allowed: ${FLAVORS[*]}"
  done
fi

# Run a command, or only print it with --dry-run.
run() {
  echo "+ $*"
  if [[ $dry_run -eq 0 ]]; then "$@"; fi
}

cd "$(dirname "$0")/.."
for tool in git python3 pulumi aws docker; do
  command -v "$tool" >/dev/null || die "'$tool' is not on PATH (see the comment at the top of $0)"
done

commit=$(git rev-parse HEAD)
tag=${commit:0:12}
if [[ -n $(git status --porcelain) ]]; then
  [[ ${ALLOW_DIRTY:-0} == 1 ]] || die "the working tree has uncommitted changes, so tag $tag would not identify the build; commit them, or set ALLOW_DIRTY=1"
  tag="$tag-dirty-$(date -u +%Y%m%d%H%M%S)"
fi
version=$(python3 docker/pyproject_requirements.py pyproject.toml --project-version)
source_url=${SOURCE_URL:-$(git remote get-url origin 2>/dev/null || true)}
[[ -n $source_url ]] || die "no 'origin' remote to put in the image's source label; set SOURCE_URL"
source_url=$(sed -E 's#^git@([^:]+):#https://\1/#; s#\.git$##' <<<"$source_url")

echo "build-images: reading ECR repositories and region of platform stack '$stack'"
urls_json=$(pulumi stack output ecr_repository_urls --json --stack "$stack")
region=$(pulumi stack output region --stack "$stack")
declare -A repo
for f in "${flavors[@]}"; do
  repo[$f]=$(python3 -c '
import json, sys
urls, flavor = json.loads(sys.argv[1]), sys.argv[2]
if flavor not in urls:
    sys.exit(f"ecr_repository_urls has no {flavor!r}; it has {sorted(urls)}")
print(urls[flavor])' "$urls_json" "$f") || die "platform stack '$stack': see the line above"
done

declare -A logged_in
for f in "${flavors[@]}"; do
  registry=${repo[$f]%%/*}
  [[ -n ${logged_in[$registry]:-} ]] && continue
  echo "build-images: logging in to $registry"
  if [[ $dry_run -eq 0 ]]; then
    aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry"
  else
    echo "+ aws ecr get-login-password --region $region | docker login --username AWS --password-stdin $registry"
  fi
  logged_in[$registry]=1
done

n=0
for f in "${flavors[@]}"; do
  n=$((n + 1))
  if aws ecr describe-images --region "$region" --repository-name "${repo[$f]#*/}" \
    --image-ids "imageTag=$tag" >/dev/null 2>&1; then
    echo "build-images: [$n/${#flavors[@]}] $f: ${repo[$f]}:$tag is already in ECR (tags are immutable); not rebuilt"
    continue
  fi
  echo "build-images: [$n/${#flavors[@]}] building and pushing $f (docker/$f/Dockerfile, version $version)"
  run docker buildx build \
    --platform linux/amd64 \
    --file "docker/$f/Dockerfile" \
    --build-arg "VERSION=$version" \
    --build-arg "REVISION=$commit" \
    --build-arg "SOURCE=$source_url" \
    --tag "${repo[$f]}:$tag" \
    --push \
    .
done

echo
echo "Images (tag $tag):"
for f in "${flavors[@]}"; do
  echo "  $f  ${repo[$f]}:$tag"
done
echo
echo "A workload stack picks its image under mlops-eks:job in Pulumi.<workload stack>.yaml, either"
echo "  imageTag: $tag     (the repository follows the accelerator: NVIDIA -> cuda, AMD -> rocm;"
echo "                      set imageRepository: cpu for the CPU image)"
echo "or a full reference from the list above:"
echo "  image: ${repo[${flavors[0]}]}:$tag"
echo "e.g. pulumi config set --path 'mlops-eks:job.imageTag' $tag --stack <workload stack>"
