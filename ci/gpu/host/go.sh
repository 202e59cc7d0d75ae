#!/usr/bin/env bash
# go.sh STEP... : ddtree_patches/v2 (SGLang 0.5.17) on an offline H200, from a checkout of this repository.
#
#   bash ci/gpu/host/go.sh phases8b phasestoy   # one or more steps (in order), see STEPS_KNOWN
#   bash ci/gpu/host/go.sh setup                # only the setup
#
# The archives (site.tar.xz, sglang-bundle.tgz, sglang-0.5.17-base-src.tar.xz and their SHA256SUMS; see
# README.md beside this file) come from $GO_ARCHIVES (default: .gpu-archives/ in the checkout, an ignored
# folder). patchkit itself is this checkout: the set that runs is the one in it.
# Host setup (once per host; skipped while /tmp/pk/.setup-done matches SHA256SUMS): check the archives,
# unpack them under /tmp/pk, install.sh of the server-triton bundle (its wheels arrive pre-installed as
# site.tar.xz, so it only checks the lock and the imports), the base tree (base_tree.py from the base
# tarball), kept as a pristine copy. Set setup (every call, a few seconds): a fresh copy of the base tree,
# `patchkit base fetch` + `patchkit apply` of this checkout's set, the imports of the patched sglang
# (install.sh's tree check compares a fixed tree id, written when the bundle was built; the bundle's wheels
# do not depend on the set's payload, so the imports are checked here directly). Then every STEP:
# `patchkit bench` as in patchkit's benchmarks/README.md ("v2 in the server"),
# its JSON (`--json`), markdown (`--report`) and a tar.gz of the logs into $OUT, and a compact table on
# stdout. A failing step prints its stderr tail; the next step still runs. Lines `STEP name rc=N seconds=S`.
#
# Environment: PYTHON (python3), OUT ($OUT, else /tmp/pk/out-<time>), GO_BUDGET_S (570: seconds this call
# may use; a bench gets what is left minus 45 s, then SIGTERM, and a step with < 90 s left is skipped),
# SAMPLING_MODELS (default: the default test models; "tree": the tree-friendly ones, as
# ci/gpu/run_bench.py's sampling step uses). Dry runs on a machine without a GPU only: GO_GPUS=0 (patchkit's
# CPU stand-in mode), GO_TARGET (a stand-in tree instead of the patched one), GO_SKIP_SETUP=1.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

T0=$(date +%s)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
ARCH=${GO_ARCHIVES:-$REPO/.gpu-archives}
PY=${PYTHON:-python3}
PK=${GO_PK:-/tmp/pk}   # GO_PK: another place, for dry runs
OUT=${OUT:-$PK/out-$(date +%Y%m%d-%H%M%S)}
BUDGET_S=${GO_BUDGET_S:-570}
DEADLINE=$((T0 + BUDGET_S))
GPUS=${GO_GPUS:-1}
SET=ddtree_patches/v2
BASE_COMMIT=b31f7d2976a382ae0916b8e780ba3f1bcd9a5855   # what `patchkit base fetch` made from the wheel
export PATCHKIT_HOME=$PK/home
unset PATCHKIT_CACHE_DIR
SITE=$PK/site
SRC=$REPO
PRISTINE=$PK/base-pristine
BUNDLE=$PK/sglang-bundle
TREE=$PATCHKIT_HOME/trees/sglang-0.5.17
MARK=$PK/.setup-done
TARGET=${GO_TARGET:-$TREE}
ACCEPT=$SRC/benchmarks/acceptance/ddtree-paper-qwen3-8b-math500.toml
STEPS_KNOWN="fa3check fa3kernels fa3pair8b fa3triton8b fa3dflash8b fa3tree8b fa3flashinfer8b fa3shape17 fa3lossless fa3sampling fa3samplingfixed fa3samplingcontrol kernels shape1 shape2 shape3 shape4 toy16 lossless sampling tree phases8b phasestoy hotpath auto8b autotree samplingauto samplingbroken paritytoy parity17 parity8b auto17 autotoy backends8b losslessauto radix"
TM=(--skip-tokenizer-init --sampling-backend pytorch --grammar-backend none)   # the H200 smoke's flags

now() { date +%s; }
say() { echo "[go $(( $(now) - T0 ))s] $*"; }
tailof() { [ -f "$1" ] && grep -v '^[[:space:]]*$' "$1" | tail -n "${2:-25}" | sed 's/^/    | /'; }

usage() {
  echo "usage: bash FOLDER/go.sh STEP...   (STEP: setup $STEPS_KNOWN)" >&2
}
[ $# -ge 1 ] || { usage; exit 2; }
for s in "$@"; do
  case " setup $STEPS_KNOWN " in *" $s "*) ;; *) echo "go.sh: unknown step '$s'" >&2; usage; exit 2 ;; esac
done
mkdir -p "$PK" "$OUT" || exit 2

# ------------------------------------------------------------------------------------------ setup
SETUP_LOG=$PK/setup.log
SETUP_FAILED=0
SETUP_RAN=0
phase() {  # phase NAME CMD... : run, log, time; print rc and seconds, the phase's log tail on failure
  local name=$1 t rc log=$PK/setup-phase.log; shift
  t=$(now)
  "$@" > "$log" 2>&1
  rc=$?
  { echo "=== $name: $*"; cat "$log"; echo "=== $name: rc=$rc seconds=$(( $(now) - t ))"; } >> "$SETUP_LOG"
  echo "setup $name: rc=$rc seconds=$(( $(now) - t ))"
  if [ $rc -ne 0 ]; then tailof "$log" 25; fi
  return $rc
}

untar_xz() {  # untar_xz FILE DEST  (Python's tarfile: needs no xz binary on the host)
  "$PY" - "$1" "$2" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    if hasattr(tarfile, "tar_filter"):
        t.extractall(sys.argv[2], filter="tar")
    else:
        t.extractall(sys.argv[2])
EOF
}

unpack() {
  rm -rf "$SITE" "$BUNDLE" "$PATCHKIT_HOME" "$MARK" "$PRISTINE"
  mkdir -p "$SITE" "$PATCHKIT_HOME" || return 1
  tar -xzf "$ARCH/sglang-bundle.tgz" -C "$PK" || return 1
  untar_xz "$ARCH/site.tar.xz" "$SITE" || return 1
  echo "unpacked: $(du -sh "$SITE" | cut -f1) site"
  if [ -f "$ARCH/$FA3" ]; then  # over the site: sgl_kernel/flash_ops.abi3.so (trimmed) and its .trim.json
    untar_xz "$ARCH/$FA3" "$SITE" || return 1
    echo "unpacked: $FA3 over the site (FA3 trimmed: $(kept_units))"
  fi
}

# The optional fa3 archive (make_fa3_archive.sh): the site's sgl_kernel gets FA3's library, trimmed to
# the sm90 bf16 kernels of head dims 64 and 128 (what it kept: sgl_kernel/flash_ops.abi3.so.trim.json).
FA3=fa3-sm90-bf16.tar.xz
fa3_listed() {  # present archives must be checked: one that SHA256SUMS does not list is refused
  [ ! -f "$ARCH/$FA3" ] || grep -q "[[:space:]]\*\?$FA3\$" "$ARCH/SHA256SUMS" || {
    echo "$ARCH/$FA3 is not listed in SHA256SUMS: add its line (sha256sum $FA3 >> SHA256SUMS) or remove it"; return 1; }
}
kept_units() {
  "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(len(r["kept_units"]), "units, sm",
            r["archs"], "; wheel", r["wheel"])' "$SITE/sgl_kernel/flash_ops.abi3.so.trim.json" 2>&1
}
fa3_imports() {  # FA3's Python entry points load the library (a GPU is needed: sgl_kernel picks sm90/)
  PYTHONPATH="$SITE" "$PY" -c "from sgl_kernel import flash_ops; import sgl_kernel.flash_attn; print('fa3 imports ok:', flash_ops.__file__)"
}

base_tree() {  # the base commit's content, rebuilt by patchkit's own code (tree id checked), kept pristine
  (cd "$SRC" && PYTHONPATH="$SRC:$SITE" "$PY" "$HERE/base_tree.py" "$ARCH/sglang-0.5.17-base-src.tar.xz" \
      "$SET" "$BASE_COMMIT") && rm -rf "$PRISTINE" && cp -a "$TREE" "$PRISTINE"
}

set_tree() {  # a fresh copy of the base, then this checkout's set applied; sglang's imports checked
  rm -rf "$TREE" && cp -a "$PRISTINE" "$TREE" && fetch_apply && git -C "$TREE" log --oneline -3 \
    && PYTHONPATH="$TREE/python:$SITE" "$PY" -c \
       "import sglang, sglang.launch_server, sglang.srt.speculative.ddtree_worker_v2; print('sglang imports ok')"
}

fetch_apply() {
  (cd "$SRC" && PYTHONPATH="$SITE" "$PY" -m patchkit base fetch --set "$SET" \
     && PYTHONPATH="$SITE" "$PY" -m patchkit apply --set "$SET")
}

setup() {
  local fingerprint t
  fingerprint=$(sha256sum "$ARCH/SHA256SUMS" 2>/dev/null | cut -c1-64)
  if [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$fingerprint" ] && [ -d "$PRISTINE/.git" ] && [ -d "$SITE" ]; then
    say "setup: host part already done ($MARK); applying this checkout's set"
    phase set_tree set_tree || { SETUP_FAILED=1; return 1; }
    return 0
  fi
  t=$(now)
  SETUP_RAN=1
  : > "$SETUP_LOG"
  say "setup: python $("$PY" -c 'import sys; print(sys.version.split()[0], sys.executable)' 2>&1);" \
      "gpu $(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version \
             --format=csv,noheader 2>&1 | head -1 || echo 'nvidia-smi not found')"
  phase check  bash -c "cd '$ARCH' && sha256sum -c --quiet SHA256SUMS" || { SETUP_FAILED=1; return 1; }
  phase fa3_listed fa3_listed || { SETUP_FAILED=1; return 1; }
  phase unpack unpack || { SETUP_FAILED=1; return 1; }
  # 1st install.sh: pip is skipped (site.tar.xz holds exactly requirements.lock), imports sgl_kernel,
  # flashinfer, transformers checked. A failure here is reported; fetch/apply still run (diagnostics).
  phase install sh "$BUNDLE/install.sh" "$PY" "$SITE" || SETUP_FAILED=1
  # fa3 is optional: without the archive (or with imports that fail) only fa3 servers are refused, by
  # patchkit's preflight, so the setup goes on
  if [ -f "$ARCH/$FA3" ]; then phase fa3 fa3_imports || say "setup: fa3 imports FAILED (fa3 servers will be refused)"
  else say "setup: no $FA3 in $ARCH: fa3 servers will be refused (make it with ci/gpu/host/make_fa3_archive.sh)"; fi
  phase base_tree base_tree || { SETUP_FAILED=1; return 1; }
  phase set_tree set_tree || SETUP_FAILED=1
  say "setup: $(( $(now) - t )) s in all, $([ $SETUP_FAILED = 0 ] && echo ok || echo FAILED)"
  [ $SETUP_FAILED = 0 ] || return 1
  echo "$fingerprint" > "$MARK"
}

# ------------------------------------------------------------------------------------------ steps
W=""           # the running step's work folder
STEP_RC=0
STEP_FILES=()  # bench JSON files of the running step

models() {  # models DIR [testmodels options]: write the pair unless DIR holds a complete one
  local d=$1 left rc; shift
  if [ -f "$d/target/model.safetensors" ] && [ -f "$d/draft/model.safetensors" ]; then
    say "models $d: present, reused"; return 0
  fi
  left=$(( DEADLINE - $(now) - 45 ))
  rm -rf "$d" "$d.partial"
  say "models $d: patchkit testmodels --out $d $*"
  (cd "$SRC" && PYTHONPATH="$SITE" timeout -s TERM -k 30 "$left" "$PY" -m patchkit testmodels --out "$d.partial" "$@" --json) \
    > "$W/testmodels-$(basename "$d").json" 2> "$W/testmodels-$(basename "$d").err"
  rc=$?
  if [ $rc -eq 0 ]; then
    mv "$d.partial" "$d"
    say "models $d: written ($(du -sh "$d" | cut -f1))"
  else
    rm -rf "$d.partial"
    say "models $d: FAILED rc=$rc"; tailof "$W/testmodels-$(basename "$d").err" 15
  fi
  return $rc
}

bench() {  # bench TAG MODEL_DIR PORT [bench options] -- [server args]
  local tag=$1 m=$2 port=$3 left rc t; shift 3
  left=$(( DEADLINE - $(now) - 45 ))
  if [ $left -lt 45 ]; then
    say "bench $tag: not started, only $((left + 45)) s of GO_BUDGET_S left"; STEP_RC=124; return 124
  fi
  local argv=(bench --set "$SET" --target "$TARGET" --gpus "$GPUS" --model "$m/target" --draft-model "$m/draft"
              --port "$port" --logs "$W/$tag-logs" --report "$W/$tag.md" --json "$@")
  local pypath=$SITE
  if [ "${GO_DIAG:-0}" = 1 ]; then   # host-side round diagnostics in the servers (diag/sitecustomize.py)
    mkdir -p "$W/diag-$tag"; pypath="$HERE/diag:$SITE"; export PK_DIAG_DIR="$W/diag-$tag"
  fi
  say "bench $tag (limit ${left} s): patchkit ${argv[*]}"
  t=$(now)
  (cd "$SRC" && PYTHONPATH="$pypath" timeout -s TERM -k 30 "$left" "$PY" -m patchkit "${argv[@]}") \
    > "$W/$tag.json" 2> "$W/$tag.err"
  rc=$?
  unset PK_DIAG_DIR
  [ ! -d "$W/diag-$tag" ] || "$PY" "$HERE/diag/rounds.py" "$W/diag-$tag"
  say "bench $tag: rc=$rc after $(( $(now) - t )) s"
  if [ $rc -ne 0 ]; then
    [ $rc -ne 124 ] || echo "  $tag: stopped by SIGTERM at its limit (GO_BUDGET_S=$BUDGET_S)"
    if grep -q '[^[:space:]]' "$W/$tag.err" 2>/dev/null; then echo "  stderr tail ($tag.err):"; tailof "$W/$tag.err" 20; fi
    [ $STEP_RC -ne 0 ] || STEP_RC=$rc
  fi
  STEP_FILES+=("$W/$tag.json")
  return $rc
}

sampling_models() { [ "${SAMPLING_MODELS:-default}" = tree ] && echo "$PK/mtree" || echo "$PK/mt"; }

step_shape1() {
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench shape1 "$PK/m8" 30131 --variants dflash,ddtree --budgets 64 --concurrency 1,8 --repeats 1 \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 8
}
step_shape2() {
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench shape2 "$PK/m8" 30132 --variants dflash-sync,ddtree --budgets 16,128 --concurrency 1,8,16 --repeats 1 \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 16
}
step_shape3() {
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench shape3 "$PK/m8" 30133 --variants dflash,ddtree --budgets 32 --concurrency 1,8,16,32 --repeats 1 \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 32
}
step_shape4() {
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench shape4 "$PK/m8" 30138 --variants ddtree-sync --budgets 16 --concurrency 1,8,16 --repeats 1 \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 16
}
step_toy16() {
  models "$PK/mt" || { STEP_RC=1; return; }
  bench toy16 "$PK/mt" 30139 --variants dflash,ddtree --budgets 16 --concurrency 1,8,16 --repeats 1 \
    --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}
step_lossless() {
  models "$PK/mt" || { STEP_RC=1; return; }
  bench lossless "$PK/mt" 30135 --variants baseline,dflash,ddtree --budgets 64 --concurrency 1,8 --repeats 1 \
    -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 8
}
step_sampling() {  # ci/gpu/run_bench.py's sampling step: baseline vs DDTREE B=64, 256 x 4 tokens at T=1, 32 at once
  local m; m=$(sampling_models)
  if [ "$m" = "$PK/mtree" ]; then models "$m" --profile tree || { STEP_RC=1; return; }
  else models "$m" || { STEP_RC=1; return; }; fi
  bench sampling "$m" 30136 --sampling --variants baseline,ddtree --budgets 64 --samples 256 --concurrency 32 \
    -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 32
}
step_tree() {
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  bench tree "$PK/mtree" 30137 --variants dflash,ddtree --budgets 64 --concurrency 1,8 --repeats 1 \
    --expect-tree-gain 1.3 -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 8
}

step_phases8b() {  # where the round's time goes at the Qwen3-8B shape: DFLASH vs DDTREE B=16, 1..32 requests
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench phases8b "$PK/m8" 30141 --variants dflash,ddtree --budgets 16 --concurrency 1,8,16,32 --repeats 1 --phases \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 32
}
step_phasestoy() {  # the same on the tiny test models (almost no GPU work: host costs show)
  models "$PK/mt" || { STEP_RC=1; return; }
  bench phasestoy "$PK/mt" 30142 --variants dflash,ddtree --budgets 16 --concurrency 1,8,16 --repeats 1 --phases \
    --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}
step_auto8b() {  # DDTREE auto against DFLASH at the Qwen3-8B shape, 1..32 requests, phases, the paper's acceptance
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  bench auto8b "$PK/m8" 30143 --variants dflash,ddtree --budgets auto --concurrency 1,8,16,32 --repeats 1 --phases \
    --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 32
}
step_autotree() {  # lossless (greedy, outputs against the baseline's), tree gain and measured speed of auto
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  bench autotree "$PK/mtree" 30144 --variants baseline,dflash,ddtree --budgets auto --concurrency 1,8 --repeats 1 \
    --phases --expect-tree-gain 1.3 -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 8
}
step_samplingauto() {  # T=1: token and log-prob tests at every position, auto against the baseline
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  bench samplingauto "$PK/mtree" 30145 --sampling --variants baseline,ddtree --budgets auto \
    --concurrency 32 -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 32
}
step_samplingbroken() {  # the same with the set's test-only broken acceptance rule: the test must FAIL
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  SGLANG_DDTREE_TEST_BROKEN_ACCEPT=1 bench samplingbroken "$PK/mtree" 30146 --sampling --variants baseline,ddtree \
    --budgets auto --concurrency 32 -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 32
}
prompt_file() {  # prompt_file FILE COUNT LENGTH [SHARED]: token-id prompts (ids < 256); the first SHARED ids common
  "$PY" - "$@" <<'EOF'
import json, random, sys
path, count, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shared = int(sys.argv[4]) if len(sys.argv) > 4 else 0
rng = random.Random(0)
prefix = [rng.randrange(1, 256) for _ in range(shared)]
with open(path, "w") as out:
    for i in range(count):
        ids = prefix + [rng.randrange(1, 256) for _ in range(length - shared)]
        out.write(json.dumps({"id": f"ids-{i:02d}-len{length}-shared{shared}", "input_ids": ids}) + "\n")
EOF
}

# Same-width parity: DDTREE at DFLASH's verify width (B = L - 1 = 15, 16 tokens) beside DFLASH, by phase.
step_kernels() {  # the commit kernels against their torch ops (no server), before any server relies on them
  (cd "$SRC" && PYTHONPATH="$SITE" timeout -s TERM 120 "$PY" "$HERE/check_commit.py" "$TREE") > "$W/kernels.log" 2>&1
  STEP_RC=$?
  tailof "$W/kernels.log" 10
}
step_paritytoy() {  # the tiny test models, where host costs show; batch sizes where the commit spiked. Greedy
                    # outputs checked against the baseline's (lossless at B = 15 and auto)
  models "$PK/mt" || { STEP_RC=1; return; }
  GO_DIAG=1 PK_DIAG_PROFILE=0 bench paritytoy "$PK/mt" 30151 --variants baseline,dflash,ddtree --budgets 15,auto \
    --concurrency 1,3,4,5,8,15,16 --repeats 1 --phases -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}
step_parity17() {  # the Qwen3-1.7B shape: DFLASH, DDTREE at its width, DDTREE auto
  models "$PK/m17" --shape qwen3-1.7b || { STEP_RC=1; return; }
  GO_DIAG=1 PK_DIAG_PROFILE=0 bench parity17 "$PK/m17" 30152 --variants dflash,ddtree --budgets 15,auto \
    --concurrency 1,8,16,32 --repeats 1 --phases --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" \
    --mem-fraction-static 0.8 --max-running-requests 32
}
step_parity8b() {  # the Qwen3-8B shape: DFLASH, DDTREE at its width, DDTREE auto
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  GO_DIAG=1 PK_DIAG_PROFILE=0 bench parity8b "$PK/m8" 30153 --variants dflash,ddtree --budgets 15,auto \
    --concurrency 1,8,16,32 --repeats 1 --phases --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" \
    --mem-fraction-static 0.8 --max-running-requests 32
}
step_auto17() {  # DDTREE auto against DFLASH at the Qwen3-1.7B shape, 1..32 requests
  models "$PK/m17" --shape qwen3-1.7b || { STEP_RC=1; return; }
  bench auto17 "$PK/m17" 30154 --variants dflash,ddtree --budgets auto --concurrency 1,2,4,8,16,32 --repeats 1 \
    --phases --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 32
}
step_autotoy() {  # auto on the default test models, where a tree accepts no more than the chain: it must cost nothing
  models "$PK/mt" || { STEP_RC=1; return; }
  bench autotoy "$PK/mt" 30155 --variants dflash,ddtree --budgets auto --concurrency 1,2,4,8,16,32 --repeats 1 \
    --phases --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 32
}
step_backends8b() {  # the DFLASH a user runs (fa3 is Hopper's default; flashinfer; triton) and DDTREE auto (triton),
                     # short prompts and 4,096-token prompts, one server at a time
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  prompt_file "$W/long.jsonl" 8 4096
  local b p popt
  for p in short long; do
    popt=(); [ $p = long ] && popt=(--prompts "$W/long.jsonl")
    for b in fa3 flashinfer triton; do
      bench "dflash-$b-$p" "$PK/m8" 30156 --variants dflash --concurrency 1,8,32 --repeats 1 --phases "${popt[@]}" \
        --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 --max-running-requests 32 --attention-backend "$b"
    done
    bench "ddtree-auto-$p" "$PK/m8" 30157 --variants ddtree --budgets auto --concurrency 1,8,32 --repeats 1 --phases \
      "${popt[@]}" --acceptance "$ACCEPT" --no-check-outputs -- "${TM[@]}" --mem-fraction-static 0.8 \
      --max-running-requests 32
  done
}
step_losslessauto() {  # greedy: DDTREE auto's outputs equal the baseline's (default test models), 1/8/16 requests
  models "$PK/mt" || { STEP_RC=1; return; }
  bench losslessauto "$PK/mt" 30158 --variants baseline,dflash,ddtree --budgets auto --concurrency 1,8,16 --repeats 1 \
    -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}
step_radix() {  # SGLang's radix cache on, prompts sharing a 192-token prefix: the commit's KV move beside shared KV
  models "$PK/mt" || { STEP_RC=1; return; }
  prompt_file "$W/shared.jsonl" 16 256 192
  bench radix "$PK/mt" 30159 --variants baseline,ddtree --budgets auto --concurrency 1,8,16 --repeats 2 --radix-cache \
    --prompts "$W/shared.jsonl" -- "${TM[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}

# DDTREE on fa3 (Hopper's default backend) against the DFLASH a user runs. Every server of a bench here runs
# the short prompts and 4,096-token prompts (--long-prompts) at each level; prefill CUDA graphs are off
# (they only time prefill, and flashinfer spent minutes capturing them).
FA3X=("${TM[@]}" --disable-prefill-cuda-graph)
fa3_kernels() {  # fa3_kernels TAG [fa3_tree_bench.py options]: FA3 alone, no server
  local tag=$1 left=$(( DEADLINE - $(now) - 30 )); shift
  (cd "$SRC" && PYTHONPATH="$SITE" timeout -s TERM -k 10 "$left" "$PY" "$HERE/fa3_tree_bench.py" \
     --tree-attention "$TREE/python/sglang/srt/layers/attention/ddtree_tree_attention.py" --json "$W/$tag.json" "$@") \
     > "$W/$tag.log" 2>&1
  STEP_RC=$?
  tailof "$W/$tag.log" 60
  cp "$W/$tag.json" "$OUT/$tag.json" 2>/dev/null
}
step_fa3check() { fa3_kernels fa3check --check-only; }  # the trimmed FA3 and the tree kernel against a reference (bf16)
step_fa3kernels() { fa3_kernels fa3kernels; }  # chain verify vs the tree (prefix pass + the fused tree kernel), timed
fa3_bench() {  # fa3_bench TAG MODELS PORT CONCURRENCY VARIANTS [BUDGETS]
  local tag=$1 m=$2 port=$3 conc=$4 variants=$5 budgets=${6:-}
  local b=(); [ -z "$budgets" ] || b=(--budgets "$budgets")
  # GO_DIAG: every round's host time and Triton compilations (none may happen after start-up)
  GO_DIAG=1 PK_DIAG_PROFILE=0 bench "$tag" "$m" "$port" --variants "$variants" "${b[@]}" --concurrency "$conc" \
    --repeats 1 --phases \
    --long-prompts 4096 --start-timeout 240 --acceptance "$ACCEPT" --no-check-outputs -- "${FA3X[@]}" \
    --mem-fraction-static 0.8 --max-running-requests 32
}
step_fa3dflash8b() {  # the DFLASH a user runs at the Qwen3-8B shape (fa3, triton), and DDTREE auto on fa3
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  fa3_bench fa3dflash8b "$PK/m8" 30161 1,8,32 dflash-fa3,dflash-triton,ddtree-fa3 auto
}
step_fa3pair8b() {  # DFLASH on fa3 (Hopper's default) against DDTREE auto on fa3, the Qwen3-8B shape
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  fa3_bench fa3pair8b "$PK/m8" 30169 1,8,32 dflash-fa3,ddtree-fa3 auto
}
step_fa3triton8b() {  # DFLASH on triton, the same models and prompts
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  fa3_bench fa3triton8b "$PK/m8" 30170 1,8,32 dflash-triton
}
step_fa3tree8b() {  # DDTREE on fa3 at DFLASH's width (B = 15), the same models and prompts
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  fa3_bench fa3tree8b "$PK/m8" 30162 1,8,32 ddtree-fa3 15
}
step_fa3flashinfer8b() {  # DFLASH on flashinfer (JIT, slow start: bounded by --start-timeout)
  models "$PK/m8" --shape qwen3-8b || { STEP_RC=1; return; }
  fa3_bench fa3flashinfer8b "$PK/m8" 30163 1,8,32 dflash-flashinfer
}
step_fa3shape17() {  # the Qwen3-1.7B shape: DFLASH on fa3 and DDTREE auto on fa3
  models "$PK/m17" --shape qwen3-1.7b || { STEP_RC=1; return; }
  fa3_bench fa3shape17 "$PK/m17" 30164 1,8,32 dflash-fa3,ddtree-fa3 auto
}
step_fa3lossless() {  # greedy on fa3 with the radix cache on (smoke and bench's default): DDTREE at B = 15 and auto
                      # equals the baseline, on the set's prompts and on --radix-prompts (prompts sharing a
                      # 192-token prefix, and a chain of prompts each a prefix of the next)
  models "$PK/mt" || { STEP_RC=1; return; }
  bench fa3lossless "$PK/mt" 30165 --variants baseline-fa3,ddtree-fa3 --budgets "${FA3_LOSSLESS_BUDGETS:-15,auto}" \
    --concurrency 1,8,16 \
    --repeats 2 --radix-prompts -- "${FA3X[@]}" --mem-fraction-static 0.25 --max-running-requests 16
}
fa3_sampling() {  # fa3_sampling TAG BUDGETS PORT: the T = 1 check on fa3 (tree-friendly models) must PASS and its
                  # broken control FAIL, back to back. 384 samples: power 0.99 at p < 1e-6 from position 1 alone
                  # (docs/sampling-power.md)
  local tag=$1 budgets=$2 port=$3 check control
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  bench "$tag" "$PK/mtree" "$port" --sampling --variants baseline-fa3,ddtree-fa3 --budgets "$budgets" \
    --samples 384 --concurrency 32 -- "${FA3X[@]}" --mem-fraction-static 0.25 --max-running-requests 32
  check=$STEP_RC
  STEP_RC=0
  SGLANG_DDTREE_TEST_BROKEN_ACCEPT=1 bench "${tag}broken" "$PK/mtree" $((port + 1)) --sampling \
    --variants baseline-fa3,ddtree-fa3 --budgets "$budgets" --samples 384 --concurrency 32 -- "${FA3X[@]}" \
    --mem-fraction-static 0.25 --max-running-requests 32
  control=$STEP_RC
  # The check passes (rc 0) and the control fails (rc 1: its distribution test fails); anything else
  # (a crash, a timeout, a control that passes) fails the step.
  if [ "$check" -eq 0 ] && [ "$control" -eq 1 ]; then
    echo "  T=1 ($budgets): check PASS and broken control FAIL, as required"; STEP_RC=0
  else
    echo "  T=1 ($budgets): check rc=$check, broken control rc=$control: the control must fail and the check pass"
    STEP_RC=1
  fi
}
step_fa3sampling() { fa3_sampling fa3sampling auto 30166; }        # DDTREE auto
step_fa3samplingfixed() { fa3_sampling fa3samplingfixed 15 30168; }  # DDTREE at a fixed B = 15
step_fa3samplingcontrol() {  # the broken control alone (auto): it must FAIL (rc 1), for a call too short for both
  models "$PK/mtree" --profile tree || { STEP_RC=1; return; }
  SGLANG_DDTREE_TEST_BROKEN_ACCEPT=1 bench fa3samplingcontrol "$PK/mtree" 30167 --sampling \
    --variants baseline-fa3,ddtree-fa3 --budgets auto --samples 384 --concurrency 32 -- "${FA3X[@]}" \
    --mem-fraction-static 0.25 --max-running-requests 32
  if [ "$STEP_RC" -eq 1 ]; then echo "  T=1 (auto): broken control FAIL, as required"; STEP_RC=0
  else echo "  T=1 (auto): broken control rc=$STEP_RC: it must fail (rc 1)"; STEP_RC=1; fi
}

step_hotpath() {  # the DDTree kernels alone (no server), at the batch sizes of the bench
  local left=$(( DEADLINE - $(now) - 30 ))
  (cd "$SRC" && timeout -s TERM -k 10 "$left" "$PY" benchmarks/ddtree_hot_path.py --tree "$TREE" --batches 1 8 16 32 \
     --budgets 16 64 --no-verify --no-reference --no-profile --out "$W/hotpath.md" --json "$W/hotpath.json") \
     > "$W/hotpath.log" 2>&1
  STEP_RC=$?
  tailof "$W/hotpath.md" 40
  [ -f "$W/hotpath.md" ] && cp "$W/hotpath.md" "$OUT/hotpath.md"
}

pack_step() {  # STEP: <step>.json and <step>.md into $OUT, everything else of the step into <step>-logs.tgz
  local s=$1 f
  if [ ${#STEP_FILES[@]} -eq 1 ]; then
    cp "${STEP_FILES[0]}" "$OUT/$s.json"
    [ -f "$W/$s.md" ] && cp "$W/$s.md" "$OUT/$s.md"
  elif [ ${#STEP_FILES[@]} -gt 1 ]; then  # several bench runs: one JSON {"runs": {tag: envelope}}, one markdown
    "$PY" - "$OUT/$s.json" "${STEP_FILES[@]}" <<'EOF'
import json, sys
from pathlib import Path
runs = {}
for name in sys.argv[2:]:
    try:
        runs[Path(name).stem] = json.loads(Path(name).read_text())
    except (OSError, ValueError) as error:
        runs[Path(name).stem] = {"no_json": str(error)}
Path(sys.argv[1]).write_text(json.dumps({"runs": runs}, indent=2) + "\n")
EOF
    : > "$OUT/$s.md"
    for f in "${STEP_FILES[@]}"; do
      [ -f "${f%.json}.md" ] && { echo "# $(basename "${f%.json}")"; cat "${f%.json}.md"; echo; } >> "$OUT/$s.md"
    done
    [ -s "$OUT/$s.md" ] || rm -f "$OUT/$s.md"
  fi
  tar -czf "$OUT/$s-logs.tgz" -C "$(dirname "$W")" "$(basename "$W")" 2>/dev/null
}

run_step() {
  local s=$1 t rc
  t=$(now)
  if [ $(( DEADLINE - t )) -lt 90 ]; then
    echo "STEP $s rc=SKIPPED seconds=0 (only $(( DEADLINE - t )) s of GO_BUDGET_S=$BUDGET_S left)"
    RECAP+=("STEP $s rc=SKIPPED"); return
  fi
  W=$PK/runs/$s-$(date +%H%M%S)
  mkdir -p "$W"
  STEP_RC=0
  STEP_FILES=()
  say "===== step $s"
  "step_$s"
  rc=$STEP_RC
  pack_step "$s"
  if [ ${#STEP_FILES[@]} -gt 0 ]; then "$PY" "$HERE/summary.py" "$s" "${STEP_FILES[@]}"; fi
  echo "STEP $s rc=$rc seconds=$(( $(now) - t ))"
  RECAP+=("STEP $s rc=$rc seconds=$(( $(now) - t ))")
  leftover=$(pgrep -f 'sglang.launch_server|sglang::' 2>/dev/null | tr '\n' ' ')
  [ -z "$leftover" ] || echo "  warning: processes still running after $s: $leftover"
}

fit_out() {  # at most 8 files come back: fold the logs, then the reports, then everything, while more
  count() { find "$OUT" -maxdepth 1 -type f | wc -l; }
  local n; n=$(count)
  if [ "$n" -gt 8 ] && ls "$OUT"/*-logs.tgz >/dev/null 2>&1; then
    (cd "$OUT" && tar -cf logs.tar ./*-logs.tgz && rm -f ./*-logs.tgz)
    say "$n files in \$OUT: the steps' *-logs.tgz folded into \$OUT/logs.tar"
  fi
  n=$(count)
  if [ "$n" -gt 8 ] && ls "$OUT"/*.md >/dev/null 2>&1; then
    (cd "$OUT" && for f in ./*.md; do echo "# ===== ${f#./}"; cat "$f"; echo; done > "$PK/reports.md" \
       && rm -f ./*.md && mv "$PK/reports.md" reports.md)
    say "$n files in \$OUT: the markdown reports folded into \$OUT/reports.md"
  fi
  n=$(count)
  if [ "$n" -gt 8 ]; then
    tar -czf "$PK/all.tgz" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "$PK/all.tgz" "$OUT/all.tgz"
    say "$n files in \$OUT: everything folded into \$OUT/all.tgz"
  fi
}

# ------------------------------------------------------------------------------------------ main
RECAP=()
if [ "${GO_SKIP_SETUP:-0}" = 1 ]; then
  say "setup: skipped (GO_SKIP_SETUP=1, dry runs only)"; SETUP_RC=0
else
  setup
  SETUP_RC=$?
fi
[ $SETUP_RAN = 0 ] || cp "$SETUP_LOG" "$OUT/setup.log"
if [ $SETUP_RC -ne 0 ]; then
  echo "STEP setup rc=1 seconds=$(( $(now) - T0 )) (the steps need it; see setup.log)"
  fit_out
  exit 1
fi
for s in "$@"; do
  [ "$s" = setup ] || run_step "$s"
done
fit_out
echo "===== recap ($(( $(now) - T0 )) s; files in \$OUT: $(cd "$OUT" && ls | tr '\n' ' '))"
for line in "${RECAP[@]}"; do echo "$line"; done
for line in "${RECAP[@]}"; do case "$line" in *"rc=0 "*) ;; *) exit 1 ;; esac; done
exit 0
