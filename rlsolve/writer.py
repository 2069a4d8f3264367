"""Files a command writes: all of them or none, each atomically.

    with Outputs(inputs=[spec_path]) as out:
        out.add(plan_path, "-o")                 # checked now, before any solving
        out.add(picture_path, "--timeline")
        ...                                      # solve
        out.write_text(plan_path, text)          # written to a temporary file beside the target
        write_picture(plan, out.stage(picture_path))
    # leaving the block without an error renames every temporary file over its target;
    # an error (or a later SpecError) removes them, so nothing is written

A target is refused (SpecError, exit code 2) when its folder does not exist, when it is a
folder, when it is one of the command's input files (`rlsolve spec.yaml -o spec.yaml` would
replace the spec with the plan), or when two outputs name one file. A failed write (a full
disk) leaves the target as it was: the rename happens only after the whole file is written.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

from rlsolve.errors import SpecError
from rlsolve.reader import STDIN


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _mode_for(target: Path) -> int:
    """The target's permissions when it exists, else what the umask gives a new file
    (a temporary file is created 0600)."""
    try:
        return target.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class Outputs:
    """The files one command promises; see the module docstring."""

    def __init__(self, inputs: Iterable["str | os.PathLike | None"] = (), overwrite_ok: Iterable["str | None"] = ()):
        self._inputs = [Path(p) for p in inputs if p is not None and str(p) != STDIN]
        self._overwrite_ok = [Path(p) for p in overwrite_ok if p is not None]
        self._fields: dict[Path, str] = {}
        self._staged: dict[Path, Path] = {}

    def add(self, path: "str | os.PathLike | None", field: str) -> None:
        """Check a target before the work starts; None is no target."""
        if path is None:
            return
        target = Path(path)
        folder = target.parent
        if not folder.is_dir():
            raise SpecError(f"folder {str(folder)!r} does not exist; create it first or write elsewhere",
                            field=field)
        if target.is_dir():
            raise SpecError(f"{target} is a folder; give a file name", field=field)
        for src in self._inputs:
            if _same_file(target, src) and not any(_same_file(target, ok) for ok in self._overwrite_ok):
                raise SpecError(f"{target} is an input of this command; write the output to another file",
                                field=field)
        for other, other_field in self._fields.items():
            if _same_file(target, other):
                raise SpecError(f"{target} is also the target of {other_field}; give each output its own file",
                                field=field)
        self._fields[target] = field

    def stage(self, path: "str | os.PathLike") -> str:
        """A temporary file beside `path` (same suffix, so writers that choose the format by the
        name still do) that becomes `path` on commit."""
        target = Path(path)
        if target not in self._fields:
            raise ValueError(f"{target} was not declared with add()")  # a bug in the command
        field = self._fields[target]
        try:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=f".tmp{target.suffix}")
            os.close(fd)
        except OSError as e:
            raise SpecError(f"cannot write into {str(target.parent)!r}: {e.strerror or e}", field=field) from None
        self._staged[target] = Path(tmp)
        return tmp

    def write_text(self, path: "str | os.PathLike", text: str) -> None:
        tmp = self.stage(path)
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise SpecError(f"cannot write {path}: {e.strerror or e}; nothing was written",
                            field=self._fields[Path(path)]) from None

    def commit(self) -> None:
        """Rename every staged file over its target (a rename within one folder is atomic)."""
        missing = [t for t in self._fields if t not in self._staged]
        if missing:
            raise ValueError(f"declared but never written: {', '.join(map(str, missing))}")  # a bug in the command
        for target, tmp in list(self._staged.items()):
            try:
                os.chmod(tmp, _mode_for(target))
                os.replace(tmp, target)
            except OSError as e:
                raise SpecError(f"cannot write {target}: {e.strerror or e}", field=self._fields[target]) from None
            del self._staged[target]

    def discard(self) -> None:
        for tmp in self._staged.values():
            try:
                tmp.unlink()
            except OSError:
                pass
        self._staged.clear()

    def __enter__(self) -> "Outputs":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            try:
                self.commit()
            finally:
                self.discard()
        else:
            self.discard()
