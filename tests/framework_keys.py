"""The real frameworks' own key lists, read from their released files (never imported).

`fetch(name)` downloads the pinned release of a framework with `pip download --no-deps` (the
releases the exporters state, from `rlsolve.export.PINS`), keeps only the files that define its
configuration surface, and caches them under ~/.cache/rlsolve-frameworks (override with
$RLSOLVE_FRAMEWORKS_CACHE). It raises `Unavailable` when the package cannot be had (offline);
the tests turn that into a skip with the reason. The extractors below read those files as text,
YAML or Python AST:

- verl: the flattened trainer configs `_generated_ppo_trainer.yaml` (FSDP engine) and
  `_generated_ppo_megatron_trainer.yaml` (Megatron engine);
- OpenRLHF: the `add_argument` calls of `openrlhf/cli/train_ppo_ray.py` (f-string flags expanded
  over their `for prefix in (...)` loops);
- Megatron-LM: the literal `add_argument` flags of `megatron/training/arguments.py` plus the flags
  `ArgumentGroupFactory` generates from config-dataclass field names (`--` + name with `-`;
  `--no-`/`--disable-` for booleans that default to true; `argparse_meta.arg_names` overrides;
  the factory's `exclude` lists honoured), and the DDP / Transformer config fields;
- vLLM: the `add_argument` flags of `vllm/engine/arg_utils.py` and the `vllm serve` parser;
- SGLang: `sglang/srt/server_args.py`'s `add_argument` flags and the server-argument dataclass
  fields of `sglang/srt/arg_groups/fields/*.py` (`A[T, "help"]` / `A[T, Arg(cli_name=, aliases=,
  no_cli=)]`);
- DeepSpeed: top-level keys from `deepspeed/runtime/constants.py` and the config parser, nested
  keys from the pydantic config models (field names and aliases) and the AutoEP parser.
"""
from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import yaml

from rlsolve.export import PINS

CACHE = Path(os.environ.get("RLSOLVE_FRAMEWORKS_CACHE", "~/.cache/rlsolve-frameworks")).expanduser()


class Unavailable(RuntimeError):
    """The pinned release could not be downloaded (offline, or PyPI refused)."""


@dataclass(frozen=True)
class Source:
    key: str                 # rlsolve.export.PINS key
    binary: bool             # wheel (True) or sdist
    keep: tuple[str, ...]    # path prefixes inside the package to keep
    pip_extra: tuple[str, ...] = ()

    @property
    def pin(self):
        return PINS[self.key]

    @property
    def dirname(self) -> str:
        return f"{self.pin.pypi}-{self.pin.release}"


SOURCES: dict[str, Source] = {
    "verl": Source("verl", True, ("verl/trainer/config/",)),
    "openrlhf": Source("openrlhf", True, ("openrlhf/cli/train_ppo_ray.py",)),
    # megatron-core >= 0.17 ships wheels for Python >= 3.12 only; its sdist (which, unlike the
    # wheel, holds megatron/training/arguments.py) is fetched without building it.
    "megatron": Source("megatron", False, ("megatron/training/", "megatron/core/"),
                       ("--python-version", "3.12")),
    "vllm": Source("vllm", True, ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py")),
    "sglang": Source("sglang", True, ("sglang/srt/server_args.py", "sglang/srt/arg_groups/")),
    "deepspeed": Source("deepspeed", False, ("deepspeed/runtime/", "deepspeed/module_inject/auto_ep_config.py")),
}


def _normalize(member: str) -> str:
    parts = member.split("/")
    if parts and parts[0].endswith(".data") and len(parts) > 2:  # wheel: name-ver.data/purelib/...
        return "/".join(parts[2:])
    return member


def _extract(archive: Path, src: Source, dest: Path) -> int:
    count = 0

    def want(path: str) -> bool:
        return path.endswith((".py", ".yaml")) and any(path.startswith(k) for k in src.keep)

    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                path = _normalize(info.filename)
                if want(path):
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    (dest / path).write_bytes(z.read(info))
                    count += 1
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if not m.isfile():
                    continue
                path = m.name.split("/", 1)[1] if "/" in m.name else m.name
                if want(path):
                    (dest / path).parent.mkdir(parents=True, exist_ok=True)
                    (dest / path).write_bytes(t.extractfile(m).read())
                    count += 1
    return count


def fetch(name: str) -> Path:
    """The cached, extracted key files of framework `name` (downloading them once)."""
    src = SOURCES[name]
    root = CACHE / src.dirname
    if (root / ".complete").exists():
        return root
    if os.environ.get("RLSOLVE_OFFLINE"):
        raise Unavailable(f"{src.pin.pypi}=={src.pin.release} is not cached and RLSOLVE_OFFLINE is set")
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        dl = Path(tmp) / "dl"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--timeout", "20", "--retries", "1", "--dest", str(dl),
               "--only-binary" if src.binary else "--no-binary", ":all:", *src.pip_extra,
               f"{src.pin.pypi}=={src.pin.release}"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download {src.pin.pypi}=={src.pin.release} timed out") from None
        archives = sorted(dl.glob("*.whl")) + sorted(dl.glob("*.tar.gz"))
        if proc.returncode != 0 or not archives:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise Unavailable(f"cannot download {src.pin.pypi}=={src.pin.release} from PyPI (offline?): {last}")
        out = Path(tmp) / "out"
        out.mkdir()
        if _extract(archives[0], src, out) == 0:
            raise Unavailable(f"{archives[0].name} holds none of {src.keep}")
        (out / ".complete").write_text(f"{archives[0].name}\n")
        if root.exists():
            shutil.rmtree(root)
        out.rename(root)
    return root


def fetch_all(names: Iterable[str]) -> dict[str, Path | Unavailable]:
    """Fetch several frameworks at once (downloads run in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(n: str):
        try:
            return fetch(n)
        except Unavailable as e:
            return e
    names = list(names)
    with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
        return dict(zip(names, pool.map(one, names)))


# --- AST helpers --------------------------------------------------------------------------------

def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _str_list(node: ast.AST | None) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def literal_flags(tree: ast.AST, env: dict[str, list[str]] | None = None) -> set[str]:
    """Option strings of every `*.add_argument(...)` call; f-strings are expanded over the values
    of enclosing `for NAME in (<constants>)` loops."""
    out: set[str] = set()

    def visit(node: ast.AST, env: dict[str, list[str]]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and _str_list(node.iter):
            env = {**env, node.target.id: _str_list(node.iter)}
        if isinstance(node, ast.Call) and _call_name(node) == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    out.add(a.value)
                elif isinstance(a, ast.JoinedStr):
                    out.update(_expand_fstring(a, env))
        for child in ast.iter_child_nodes(node):
            visit(child, env)

    visit(tree, dict(env or {}))
    return out


def _expand_fstring(node: ast.JoinedStr, env: dict[str, list[str]]) -> set[str]:
    results = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            results = [r + str(part.value) for r in results]
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in env:
            results = [r + v for r in results for v in env[part.value.id]]
        else:
            return set()
    return {r for r in results if r.startswith("-")}


# --- verl ---------------------------------------------------------------------------------------

def _flatten(d: dict, prefix: str = "") -> tuple[set[str], set[str]]:
    keys, freeform = set(), set()
    for k, v in d.items():
        path = f"{prefix}{k}"
        keys.add(path)
        if isinstance(v, dict):
            if not v:
                freeform.add(path)
            sub_k, sub_f = _flatten(v, path + ".")
            keys |= sub_k
            freeform |= sub_f
    return keys, freeform


@functools.lru_cache(maxsize=None)
def verl_keys(root: Path, engine: str) -> tuple[frozenset[str], frozenset[str]]:
    """(every dotted key, the keys whose value is a free-form `{}` dict) of verl's flattened trainer
    config for engine `dp` (FSDP) or `megatron`."""
    name = "_generated_ppo_megatron_trainer.yaml" if engine == "megatron" else "_generated_ppo_trainer.yaml"
    data = yaml.safe_load((root / "verl/trainer/config" / name).read_text())
    keys, freeform = _flatten(data)
    return frozenset(keys), frozenset(freeform)


def verl_engine_groups(root: Path) -> set[str]:
    return {p.stem for p in (root / "verl/trainer/config/model_engine").glob("*.yaml")}


# --- OpenRLHF -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def openrlhf_flags(root: Path) -> frozenset[str]:
    return frozenset(literal_flags(_parse(root / "openrlhf/cli/train_ppo_ray.py")))


# --- Megatron -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _sources(root: Path, sub: str) -> tuple[tuple[Path, str], ...]:
    return tuple((p, p.read_text(encoding="utf-8")) for p in sorted((root / sub).rglob("*.py")))


class _ClassIndex:
    """Class definitions by name, parsing only the files that define the name asked for."""

    def __init__(self, root: Path, sub: str) -> None:
        self.root, self.sub = root, sub
        self._found: dict[str, list[ast.ClassDef]] = {}

    def __contains__(self, name: str) -> bool:
        return bool(self[name])

    def __getitem__(self, name: str) -> list[ast.ClassDef]:
        if name not in self._found:
            hits = []
            for path, text in _sources(self.root, self.sub):
                if f"class {name}(" in text or f"class {name}:" in text:
                    hits += [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == name]
            self._found[name] = hits
        return self._found[name]


@functools.lru_cache(maxsize=None)
def _class_index(root: Path, sub: str) -> _ClassIndex:
    return _ClassIndex(root, sub)


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(d) for d in cls.decorator_list)


@dataclass(frozen=True)
class DCField:
    name: str
    is_bool: bool
    default_true: bool
    init: bool
    arg_names: tuple[str, ...]


def _field_call(value: ast.AST | None) -> ast.Call | None:
    if isinstance(value, ast.Call) and _call_name(value) == "field":
        return value
    return None


def _dataclass_fields(index: _ClassIndex, name: str, seen: set[str] | None = None) -> list[DCField]:
    seen = set() if seen is None else seen
    if name in seen or name not in index:
        return []
    seen.add(name)
    candidates = [c for c in index[name] if _is_dataclass(c)] or index[name]
    cls = candidates[0]
    out: list[DCField] = []
    for base in cls.bases:
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        out += _dataclass_fields(index, base_name, seen)
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = ast.unparse(node.annotation)
        if "ClassVar" in ann or "InitVar" in ann:
            continue
        call = _field_call(node.value)
        default: ast.AST | None = node.value
        init, arg_names = True, ()
        if call is not None:
            default = None
            for kw in call.keywords:
                if kw.arg == "default":
                    default = kw.value
                elif kw.arg == "init" and isinstance(kw.value, ast.Constant):
                    init = bool(kw.value.value)
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values):
                        if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                            for k2, v2 in zip(v.keys, v.values):
                                if isinstance(k2, ast.Constant) and k2.value == "arg_names":
                                    arg_names = tuple(_str_list(v2))
        is_bool = ann.replace(" ", "") in ("bool", "Optional[bool]", "bool|None", "None|bool")
        default_true = isinstance(default, ast.Constant) and default.value is True
        out.append(DCField(node.target.id, is_bool, default_true, init, arg_names))
    return out


def _factory_flags(fields: list[DCField], exclude: set[str]) -> set[str]:
    flags = set()
    for f in fields:
        if f.name in exclude or not f.init:
            continue
        if f.arg_names:
            flags.update(f.arg_names)
            continue
        dashed = f.name.replace("_", "-")
        if f.is_bool and f.default_true:
            flags.update({f"--no-{dashed}", f"--disable-{dashed}"})
        else:
            flags.add(f"--{dashed}")
    return flags


@functools.lru_cache(maxsize=None)
def megatron_flags(root: Path) -> frozenset[str]:
    tree = _parse(root / "megatron/training/arguments.py")
    flags = literal_flags(tree)
    index = _class_index(root, "megatron")
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        lists = {n.targets[0].id: set(_str_list(n.value)) for n in ast.walk(fn)
                 if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                 and isinstance(n.value, ast.List)}
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and _call_name(call) == "ArgumentGroupFactory" and call.args):
                continue
            cls = call.args[0]
            cls_name = cls.id if isinstance(cls, ast.Name) else cls.attr if isinstance(cls, ast.Attribute) else ""
            exclude: set[str] = set()
            for kw in call.keywords:
                if kw.arg == "exclude":
                    exclude = set(_str_list(kw.value)) or lists.get(getattr(kw.value, "id", ""), set())
            flags |= _factory_flags(_dataclass_fields(index, cls_name), exclude)
    return frozenset(flags)


@functools.lru_cache(maxsize=None)
def megatron_config_fields(root: Path, class_name: str) -> frozenset[str]:
    """Field names of a Megatron-Core config dataclass (e.g. DistributedDataParallelConfig)."""
    return frozenset(f.name for f in _dataclass_fields(_class_index(root, "megatron"), class_name))


# --- vLLM ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def vllm_flags(root: Path) -> frozenset[str]:
    flags: set[str] = set()
    for rel in ("vllm/engine/arg_utils.py", "vllm/entrypoints/common/cli_args.py"):
        flags |= literal_flags(_parse(root / rel))
    return frozenset(flags)


# --- SGLang -------------------------------------------------------------------------------------

def _annotated_meta(ann: ast.AST) -> list[ast.AST] | None:
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id in ("A", "Annotated"):
        sl = ann.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        return list(elts[1:])
    return None


@functools.lru_cache(maxsize=None)
def sglang_flags(root: Path) -> frozenset[str]:
    flags = set(literal_flags(_parse(root / "sglang/srt/server_args.py")))
    for path in sorted((root / "sglang/srt/arg_groups").rglob("*.py")):
        tree = _parse(path)
        flags |= literal_flags(tree)
        if "fields" not in path.parts:
            continue
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for node in cls.body:
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                meta = _annotated_meta(node.annotation)
                if not meta:
                    continue
                names: list[str] | None = None
                for m in meta:
                    if isinstance(m, ast.Constant) and isinstance(m.value, str):
                        names = [f"--{node.target.id.replace('_', '-')}"]
                    elif isinstance(m, ast.Call) and _call_name(m) == "Arg":
                        kws = {kw.arg: kw.value for kw in m.keywords}
                        if isinstance(kws.get("no_cli"), ast.Constant) and kws["no_cli"].value is True:
                            names = []
                            break
                        cli = kws.get("cli_name")
                        first = cli.value if isinstance(cli, ast.Constant) else f"--{node.target.id.replace('_', '-')}"
                        names = [first] + _str_list(kws.get("aliases"))
                flags.update(names or [])
    return frozenset(flags)


# --- DeepSpeed ----------------------------------------------------------------------------------

def _module_strings(tree: ast.Module) -> set[str]:
    out = set()
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str):
            if all(isinstance(t, ast.Name) and t.id.isupper() for t in n.targets):
                out.add(n.value.value)
    return out


def _in_literals(tree: ast.AST) -> set[str]:
    """String constants tested with `"key" in <dict>`."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) and isinstance(n.left.value, str) \
                and any(isinstance(op, ast.In) for op in n.ops):
            out.add(n.left.value)
    return out


def _pydantic_keys(tree: ast.Module, cls_name: str) -> set[str]:
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name):
        keys = set()
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                keys.add(node.target.id)
                if isinstance(node.value, ast.Call):
                    for kw in node.value.keywords:
                        if kw.arg == "alias" and isinstance(kw.value, ast.Constant):
                            keys.add(kw.value.value)
        return keys
    raise KeyError(cls_name)


def _get_literals(tree: ast.AST, func: str) -> set[str]:
    out = set()
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func):
        for n in ast.walk(fn):
            if isinstance(n, ast.Call) and _call_name(n) == "get" and n.args and isinstance(n.args[0], ast.Constant):
                out.add(n.args[0].value)
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                out.add(n.slice.value)
    return out


@functools.lru_cache(maxsize=None)
def deepspeed_schema(root: Path) -> dict[str, frozenset[str]]:
    """{"": top-level keys, "zero_optimization": its keys, "zero_optimization.offload_param": ...}."""
    rt = root / "deepspeed/runtime"
    config = _parse(rt / "config.py")
    top = _module_strings(_parse(rt / "constants.py")) | _module_strings(config) \
        | _module_strings(_parse(rt / "zero/config.py")) | _in_literals(config) \
        | _in_literals(_parse(rt / "tensor_parallel/config.py"))
    offload = _parse(rt / "zero/offload_config.py")
    return {
        "": frozenset(top),
        "zero_optimization": frozenset(_pydantic_keys(_parse(rt / "zero/config.py"), "DeepSpeedZeroConfig")),
        "zero_optimization.offload_param": frozenset(_pydantic_keys(offload, "DeepSpeedZeroOffloadParamConfig")),
        "zero_optimization.offload_optimizer": frozenset(_pydantic_keys(offload, "DeepSpeedZeroOffloadOptimizerConfig")),
        "bf16": frozenset(_pydantic_keys(_parse(rt / "precision_config.py"), "DeepSpeedBF16Config")),
        "tensor_parallel": frozenset(_pydantic_keys(_parse(rt / "tensor_parallel/config.py"), "TPTrainingConfig")),
        "expert_parallel": frozenset(_get_literals(_parse(root / "deepspeed/module_inject/auto_ep_config.py"),
                                                   "parse_autoep_config")),
    }


@functools.lru_cache(maxsize=None)
def deepspeed_removed_keys(root: Path) -> frozenset[str]:
    """Top-level keys DeepSpeed rejects outright (`_REMOVED_TOP_LEVEL_CONFIG_KEYS`)."""
    tree = _parse(root / "deepspeed/runtime/config.py")
    for n in tree.body:
        target = n.targets[0] if isinstance(n, ast.Assign) else n.target if isinstance(n, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "_REMOVED_TOP_LEVEL_CONFIG_KEYS" \
                and isinstance(n.value, ast.Dict):
            return frozenset(k.value for k in n.value.keys if isinstance(k, ast.Constant))
    return frozenset()
