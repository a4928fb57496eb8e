#!/bin/sh
# before_serve: build the tiny random Llama used by examples/tiny-cpu, if it is not there yet.
#   make_tiny_model.sh OUT_DIR [--ctx N ...]   (needs lair's engines extra: numpy, tokenizers, gguf;
#   further arguments go to `python -m lair.testing.tiny_model`)
set -eu
out=${1:?usage: make_tiny_model.sh OUT_DIR [ARGS...]}
shift
"${LAIR_PYTHON:-python3}" -m lair.testing.tiny_model "$out" "$@" >/dev/null
echo "tiny model ready in $out"
