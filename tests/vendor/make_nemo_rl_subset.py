"""Builds tests/vendor/nemo-rl-v0.7.0-config-subset.tar.gz: the part of NeMo-RL v0.7.0's source that its
own config loading and validation import (tests/nemo_rl_check.py), so that the test suite runs NeMo-RL's
validator everywhere. NeMo-RL is not on PyPI (nemo-rl 0.0.0 there is an empty placeholder) and CI reaches
no git host, so the files travel with the repository, unmodified, with NeMo-RL's LICENSE (Apache-2.0).

    python tests/vendor/make_nemo_rl_subset.py NEMO_RL_CHECKOUT EXPORT.yaml [EXPORT.yaml ...]

NEMO_RL_CHECKOUT: a checkout of the tag v0.7.0 (commit 81aa43dda4765b0429cf31dab44441e4e4383911);
EXPORT.yaml: NeMo-RL exports of rlsolve with a reward model, GRPO and PPO (e.g. examples/grpo-70b-64xh100.yaml
and examples/ppo-1.5b-8xh100.yaml solved with --framework nemo-rl), so that the run goes through the reward
model's environment, PPO's setup and its value model too. The script runs the checker on them, keeps every
file of the checkout that the run imported, plus each package's __init__.py, the base configs the exports
inherit (examples/configs/grpo_math_1B.yaml, grpo_rm_1B.yaml, ppo_math_1B.yaml) and LICENSE, and writes
MANIFEST (tag, commit, files).
"""
from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

TAG, COMMIT = "v0.7.0", "81aa43dda4765b0429cf31dab44441e4e4383911"
HERE = Path(__file__).resolve().parent
OUT = HERE / "nemo-rl-v0.7.0-config-subset.tar.gz"
EXTRA = ("LICENSE", "examples/configs/grpo_math_1B.yaml", "examples/configs/grpo_rm_1B.yaml",
         "examples/configs/ppo_math_1B.yaml")
PROBE = """
import atexit, json, runpy, sys
root = sys.argv[1]
def dump():
    print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values())
                             if isinstance(getattr(m, "__file__", None), str) and m.__file__.startswith(root)})),
          file=sys.stderr)
atexit.register(dump)
sys.argv = ["nemo_rl_check.py"] + sys.argv[1:]
runpy.run_path(%r, run_name="__main__")
"""


def imported_files(checkout: Path, exports: list[Path]) -> list[str]:
    probe = PROBE % str(HERE.parent / "nemo_rl_check.py")
    out = subprocess.run([sys.executable, "-c", probe, str(checkout), *map(str, exports)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(out.stderr[-3000:])
    files = json.loads(out.stderr.strip().splitlines()[-1])
    return [str(Path(f).relative_to(checkout)) for f in files]


def main(checkout: Path, exports: list[Path]) -> None:
    files = set(imported_files(checkout, exports))
    for f in list(files):  # every package on the way needs its __init__.py
        for parent in Path(f).parents:
            init = parent / "__init__.py"
            if str(parent) != "." and (checkout / init).exists():
                files.add(str(init))
    files |= set(EXTRA)
    manifest = {"repository": "https://github.com/NVIDIA-NeMo/RL", "tag": TAG, "commit": COMMIT,
                "license": "Apache-2.0 (LICENSE)", "files": sorted(files)}
    with tarfile.open(OUT, "w:gz") as tar:
        for f in sorted(files):
            info = tar.gettarinfo(str(checkout / f), arcname=f)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with open(checkout / f, "rb") as fh:
                tar.addfile(info, fh)
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("MANIFEST.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    print(f"wrote {OUT.name}: {len(files)} files, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), [Path(p).resolve() for p in sys.argv[2:]])
