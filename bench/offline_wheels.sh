#!/usr/bin/env bash
# What bench/gpu_check.sh needs on a GPU machine with no package index and no model hub, in OUT_DIR:
#   whl/        mcprl's runtime dependencies at this venv's versions, for CPython 3.12 on manylinux
#               (packages such an image usually lacks, or holds at versions SkyRL 0.3.0 does not accept);
#               ray without its Java jars, cluster daemons and dashboard (an embedded run never starts a
#               cluster, and the whole tree must fit the 64 MiB a device call carries);
#   whl-trl/    TRL 1.16 for bench/train_step.py's comparison (it runs on the image's own transformers);
#   tokenizer/  the default model's tokenizer, for bench/random_model.py.
#
#   bench/offline_wheels.sh [OUT_DIR]        (default .gpu; then: WHEELS=.gpu/whl TRL_WHEELS=.gpu/whl-trl
#                                             bench/gpu_check.sh OUT, carrying .gpu)
set -euo pipefail
out=${1:-.gpu}
py=.venv/bin/python
names="annotated-types anyio cffi pycparser cloudpathlib cryptography datasets dill multiprocess httpcore2 httpx2
truststore jsonschema jsonschema-specifications referencing rpds-py loguru mcp mcp-types mcp-server-time tzdata tzlocal
omegaconf opentelemetry-api peft pydantic pydantic_core PyJWT python-multipart ray skyrl skyrl-gym sse-starlette
starlette tenacity tokenizers torchdata transformers typing-inspection typing_extensions uvicorn typer rich click
sniffio h11"
pins=$($py -c "import importlib.metadata as m, sys; print(' '.join(f'{n}=={m.version(n)}' for n in sys.argv[1:]))" $names)
platforms="--platform manylinux_2_28_x86_64
--platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
download() {  # download DIR REQUIREMENT...
  local dir=$1; shift
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
    -d "$dir" "$@"
}
download "$out/whl" $pins
download "$out/whl-trl" 'trl==1.16.*'
$py - "$out"/whl/ray-*.whl <<'PY'
import os, sys, zipfile
drop = ("ray/jars/", "ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server", "ray/dashboard/client/build/")
src = sys.argv[1]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(src + ".tmp", "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.startswith(drop):
            continue
        data = zin.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):  # keep RECORD true to what the wheel holds
            data = b"\n".join(line for line in data.split(b"\n") if not line.decode().startswith(drop))
        zout.writestr(item, data)
os.replace(src + ".tmp", src)
PY
mkdir -p "$out/tokenizer"
model=$($py -c "from mcprl.models.loading import ensure_default_model; print(ensure_default_model())")
cp "$model"/{chat_template.jinja,config.json,generation_config.json,tokenizer.json,tokenizer_config.json} "$out/tokenizer/"
du -sh "$out"
