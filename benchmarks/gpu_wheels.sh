#!/usr/bin/env bash
# Fetch benchmarks/gpu_wheels.txt as wheels for the GPU machine (Python 3.12, x86-64, no network) into .whl/.
# Then, there:  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && PYTHONPATH=/tmp/site:. python3 benchmarks/gpu.py
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
grep -v '^#' benchmarks/gpu_wheels.txt | grep -v '^$' | while read -r spec; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux_2_12_x86_64 --platform manylinux2010_x86_64 -d .whl "$spec"
done
ls .whl | wc -l
