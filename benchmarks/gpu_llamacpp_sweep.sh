#!/bin/bash
# Open-loop sweeps of lair bench on llama.cpp CUDA, on one NVIDIA GPU with no network (issue 36, GPU part).
#
# What travels (`bash benchmarks/gpu_llamacpp_sweep.sh prepare` here, on a machine with PyPI: the git-ignored .gpu/):
#   .gpu/llamacpp-src.tgz  llama.cpp as vendored by the llama-cpp-python 0.3.36 sdist (llama.cpp 0c1e57098),
#                          stripped of docs, vocab GGUFs, media, benches and every ggml backend but cpu and cuda
#   .gpu/whl/*.whl         cp312 wheels of lair's dependencies the machine's image lacks (pydantic, tomlkit,
#                          asyncssh, cryptography, platformdirs, detect-secrets, cachetools, gguf, optuna...)
#   .gpu/lair.tgz          `git archive HEAD src/lair` (.gpu/lair.commit: the commit)
# On the GPU machine, from the repo root (each step is idempotent; state lives in $W, default /tmp/lairgpu):
#   bash benchmarks/gpu_llamacpp_sweep.sh setup            # build llama-server (sm_90) + wheels + the model
#   bash benchmarks/gpu_llamacpp_sweep.sh serve            # lair launch -d of the recipe written to $W/gpu.toml
#   bash benchmarks/gpu_llamacpp_sweep.sh sanity           # closed-loop ctx 1024 x 1,16 (speeds, validity gate)
#   bash benchmarks/gpu_llamacpp_sweep.sh sweep CTX RATE REQS DUR   # --sweep from RATE, REQS per step
#   bash benchmarks/gpu_llamacpp_sweep.sh warm CTX[,CTX]   # 8 sessions x 4 turns x 256 new tokens
#   bash benchmarks/gpu_llamacpp_sweep.sh tune             # lair tune of --parallel x --ubatch-size (grid)
#   bash benchmarks/gpu_llamacpp_sweep.sh stop | pack NAME # lair stop; tar $W/out into $OUT/NAME.tgz
# Then, here: python benchmarks/gpu_llamacpp_summary.py DIR... > benchmarks/results/gpu_llamacpp_sweep_CARD.json
#
# In one 10-minute command on the GPU machine, .gpu/ beside the repo (the build alone took 5.4 min on 16 cores):
#   S=benchmarks/gpu_llamacpp_sweep.sh; bash $S setup && bash $S serve && bash $S sanity;
#   T=$((555-SECONDS)); timeout $T bash $S sweep 1024 1 32 $((T/2-15));
#   T=$((565-SECONDS)); timeout $T bash $S sweep 8192 0.25 16 $((T-35)); bash $S pack call1
# and then, on the same machine (outputs in $W and the server survive between commands): warm, tune, pack.
#
# The model: benchmarks/gpu_bigmodel.py, a random-weight Llama of Llama-3-8B's shape (GQA 32/8 heads,
# 32 layers, 4096 hidden, 14336 ffn; the writer's BPE vocabulary, 415 tokens) in F16: about 6.98 B parameters
# and 14.0 GB by count. The server: -ngl 999 --parallel $SLOTS -fa on --metrics, -c = $SLOTS x $SLOT_CTX
# (lair adds --ctx-size from the recipe's max_model_len): 32 x 12288 tokens of F16 KV at 128 KiB a token, 48 GiB.
set -u
W=${W:-/tmp/lairgpu}
G=${G:-.gpu}
R=$W/out
PORT=${PORT:-8099}
SLOTS=${SLOTS:-32}
SLOT_CTX=${SLOT_CTX:-12288}
SLO=${SLO:-ttft_p99<=2s,tpot<=50ms}
SPEED=${SPEED:-20}
DECODE=${DECODE:-128}
URL=http://127.0.0.1:$PORT
BIN=$W/llama.cpp/build/bin/llama-server
export HOME=$W/home PYTHONPATH=$W/site PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p "$W" "$R" "$HOME"
L="python3 -m lair"
say() { echo "[$(date +%T) +${SECONDS}s] $*"; }

engine_pid() { pgrep -f "^$BIN" | head -1; }

setup() {
  say "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm,clocks.max.mem --format=csv \
    | tee "$R/gpu.csv"
  nvcc --version | tail -2; python3 --version; nproc; free -g | head -2; df -h /tmp | tail -1; cmake --version | head -1
  if [ -x "$BIN" ] && [ -s "$W/model.json" ]; then say "already set up"; return 0; fi
  (
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" "$G"/whl/*.whl \
      && mkdir -p "$W/lairsrc" && tar xzf "$G/lair.tgz" -C "$W/lairsrc" && cp -r "$W/lairsrc/src/lair" "$W/site/" \
      && python3 benchmarks/gpu_bigmodel.py "$W/m" > "$W/model.json" 2> "$W/model.err"
    echo "model rc=$? at ${SECONDS}s" >> "$W/model.err"
  ) &
  local bg=$!
  mkdir -p "$W" && tar xzf "$G/llamacpp-src.tgz" -C "$W"
  cd "$W/llama.cpp" || return 1
  local t0=$SECONDS
  cmake -S . -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_TYPE=Release \
    > "$W/cmake.log" 2>&1 || { tail -40 "$W/cmake.log"; return 1; }
  timeout 480 cmake --build build --target llama-server -j "$(nproc)" > "$W/build.log" 2>&1
  local rc=$?
  echo "build rc=$rc in $((SECONDS - t0)) s" | tee "$W/build.time"
  tail -3 "$W/build.log"
  cd - > /dev/null || return 1
  wait $bg
  cat "$W/model.json" "$W/model.err"; cp "$W/model.json" "$W/build.time" "$R/" 2>/dev/null
  "$BIN" --version 2>&1 | tail -3 | tee "$R/llama-server.version"
  [ $rc -eq 0 ] && [ -s "$W/model.json" ]
}

recipe() {
  local name vram card
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  vram=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  case "$name" in *H200*) card=H200 ;; *) card=H100 ;; esac
  cat > "$W/gpu.toml" <<EOF
# llama.cpp built with CUDA, serving a random-weight Llama-3-8B-shape F16 model on one $card
engine = "llamacpp"
runtime = "native"
name = "gpu-llamacpp-8b-gqa-f16"
model = "$W/m/big.gguf"
served_model_name = "big"
host = "127.0.0.1"
port = $PORT
ready_timeout_s = 300
max_model_len = $((SLOTS * SLOT_CTX))  # --ctx-size, shared by the $SLOTS slots: $SLOT_CTX tokens each
entrypoint = ["$BIN", "-m", "$W/m/big.gguf", "-ngl", "999", "--parallel", "$SLOTS", "--metrics", "-fa", "on"]

[meta]
title = "8B-shape (GQA) F16 on one $card (llama.cpp CUDA)"
slug = "gpu-llamacpp-8b-gqa-f16"

[meta.hardware]
gpu_model = "$card"
gpu_count = 1
vram_gb = $((vram / 1024))
EOF
}

serve() {
  if curl -sf "$URL/health" > /dev/null; then say "already serving"; return 0; fi
  recipe
  say "launch"; cat "$W/gpu.toml"
  $L launch "$W/gpu.toml" --detach --no-doctor --json > "$R/launch.json" 2> "$R/launch.err"
  local rc=$?
  say "launch rc=$rc"; cat "$R/launch.json"; tail -20 "$R/launch.err"
  curl -s "$URL/props" > "$R/props.json"
  python3 -c "import json,sys; d=json.load(open('$R/props.json')); print({k: d.get(k) for k in ('build_info','total_slots','model_path')}, d.get('default_generation_settings',{}).get('n_ctx'))"
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv
  [ $rc -eq 0 ]
}

bench() {  # bench NAME ARGS...: one lair bench into $R/NAME (report folder), its stdout JSON and stderr
  local name=$1; shift
  local pid; pid=$(engine_pid)
  say "bench $name (engine pid ${pid:-unknown}): $*"
  $L bench "$URL" ${pid:+--engine-pid "$pid"} --telemetry auto --out "$R/$name" --json "$@" > "$R/$name.json" 2> "$R/$name.err"
  local rc=$?
  say "bench $name rc=$rc"; grep -v "^\s*$" "$R/$name.err" | tail -25
  return $rc
}

sanity() { bench sanity --contexts 1024 --concurrency 1,16 --decode-tokens "$DECODE" --repeat 1 --order fixed; }

sweep() {  # sweep CTX RATE REQS DUR
  bench "sweep-$1" --contexts "$1" --sweep --rate "$2" --rate-requests "$3" --max-duration "$4" --max-requests 2000 \
    --decode-tokens "$DECODE" --slo "$SLO" --user-speed "$SPEED"
}

warm() { bench warm --contexts "${1:-1024,8192}" --sessions 8 --turns 4 --turn-tokens 256 --decode-tokens "$DECODE"; }

stop() { $L stop --all 2>&1 | tail -3; sleep 2; curl -sf "$URL/health" > /dev/null && say "still up" || say "stopped"; }

tune() {
  stop
  say "tune"
  mkdir -p "$R/tune"
  $L tune "$W/gpu.toml" --param=--parallel=16,32 --param=--ubatch-size=512,1024 --sampler grid --trials 4 \
    --objective "max decode_tok_s_aggregate@ctx=1024,c=16" --decode-tokens 64 --repeat 1 --budget "${TUNE_BUDGET:-6m}" \
    --no-confirm --out "$R/tune" --write "$R/tune/gpu.tuned.toml" --json > "$R/tune.json" 2> "$R/tune.err"
  local rc=$?
  say "tune rc=$rc"; grep -v "^\s*$" "$R/tune.err" | tail -30
  return $rc
}

pack() {  # pack NAME: the raw reports of this machine so far (no model, no build) into $OUT/NAME.tgz
  cp "$W"/*.log "$R/" 2>/dev/null
  rm -f "$R"/tune/study.db-journal
  tar czf "${OUT:-/tmp}/${1:-raw}.tgz" -C "$W" out && ls -la "${OUT:-/tmp}"
}

prepare() {  # here, on a machine with PyPI and this checkout's git: fill $G (default .gpu/, git-ignored)
  local pip="${PIP:-python3 -m pip}" tmp; tmp=$(mktemp -d)
  mkdir -p "$G/whl"
  $pip download -q --no-deps --no-binary llama-cpp-python -d "$tmp" llama-cpp-python==0.3.36 || return 1
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp" || return 1
  (
    cd "$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp" || exit 1
    rm -rf docs media benches models/*.gguf models/*.inp models/*.out
    for d in ggml/src/ggml-*/; do case $d in *ggml-cpu/ | *ggml-cuda/) ;; *) rm -rf "$d" ;; esac; done
    # no .git in the sdist: name the commit its CHANGELOG gives for 0.3.36, so /props reports it
    sed -i 's/^set(BUILD_COMMIT "unknown")/set(BUILD_COMMIT "0c1e57098")/' cmake/build-info.cmake
  ) || return 1
  tar czf "$G/llamacpp-src.tgz" -C "$tmp/llama_cpp_python-0.3.36/vendor" llama.cpp && rm -rf "$tmp"
  $pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_24_x86_64 -d "$G/whl" pydantic==2.14.4 pydantic_core==2.50.5 annotated-types \
    typing-inspection typing-extensions tomlkit==0.15.3 asyncssh==2.24.1 cryptography==51.0.1 cffi==2.1.1 \
    pycparser==3.12 platformdirs==4.14.9 detect-secrets cachetools==8.0.3 gguf==0.19.0 optuna==5.1.0 \
    alembic==1.20.1 SQLAlchemy==2.1.9 colorlog==6.12.0 Mako==1.4.3 greenlet==3.5.6 || return 1
  git archive HEAD src/lair | gzip > "$G/lair.tgz" && git rev-parse HEAD > "$G/lair.commit"
  du -sh "$G"; ls -la "$G"
}

cmd=${1:-}; shift || true
case "$cmd" in
  prepare | setup | serve | sanity | sweep | warm | stop | tune | pack | recipe) "$cmd" "$@" ;;
  *) sed -n 2,25p "$0"; exit 2 ;;
esac
