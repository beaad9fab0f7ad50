#!/usr/bin/env bash
# The main job in one command: set everything up (scripts/setup.sh: packages,
# default model, Release build), then let the default model answer a question
# about the built-in long document, with Kascade attention at a 10% budget.
# Extra arguments go to `kascade generate` (e.g. --attention dense).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec build/kascade generate --demo --attention kascade --budget 10 --max-tokens 64 --threads 2 "$@"
