#!/usr/bin/env bash
# Fetches NVIDIA's runtime compiler (libnvrtc, the `nvidia-cuda-nvrtc` wheel from PyPI) into
# target/nvrtc, so machines without a GPU or CUDA toolkit still compile the GPU kernels in
# `make test` (gpudirect's kernels::tests). Prints the library folder. Reused when present.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/nvrtc
if ! ls "$dir"/lib/libnvrtc.so.* >/dev/null 2>&1; then
  rm -rf "$dir"
  mkdir -p "$dir/lib"
  python3 - "$dir" <<'PY'
import io, json, platform, sys, urllib.parse, urllib.request, zipfile
out = sys.argv[1]
arch = {"x86_64": "x86_64", "aarch64": "aarch64"}[platform.machine()]
index = "https://pypi.org/pypi/nvidia-cuda-nvrtc/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
wheel = next(u for u in meta["urls"] if u["filename"].endswith(".whl") and "manylinux" in u["filename"] and arch in u["filename"])
data = urllib.request.urlopen(urllib.parse.urljoin(index, wheel["url"]), timeout=300).read()
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for name in z.namelist():
        if "/lib/libnvrtc" in name:
            with open(f"{out}/lib/" + name.rsplit("/", 1)[1], "wb") as f:
                f.write(z.read(name))
print(f"nvrtc: {wheel['filename']}", file=sys.stderr)
PY
fi
echo "$PWD/$dir/lib"
