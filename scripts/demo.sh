#!/usr/bin/env bash
# The main job in one command: set everything up (scripts/setup.sh: packages,
# test model, Release build), fetch the demo model (Qwen2.5-Coder-1.5B-Instruct,
# 1.1 GB, once: the smallest measured model that answers the demo question,
# see README "Models"), then let it answer a question about the built-in
# ~5,500-token document with Kascade attention at a 10% budget.
# Extra arguments go to `kascade generate` (e.g. --attention dense).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
model="$(bash scripts/fetch_model.sh qwen2.5-coder-1.5b)"
exec build/kascade generate --demo -m "$model" --attention kascade --budget 10 --max-tokens 64 "$@"
