"""Which distributions :func:`~rstreams.runtime.spark.packenv.pack_env` packs, and
copying them into the archive's staging directory.

rstreams with the extras asked for and the distributions named, with every requirement
they have in this environment (:func:`resolve`), are copied file by file as their
installer recorded them (hard links where the file system allows); one installed in
editable mode is copied from the source the driver imports, with a ``.dist-info`` of
its own (:func:`copy_distribution`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rstreams.errors import ConfigError

#: Distributions never packed: Spark ships its own PySpark (with py4j) to executors, and
#: installers are of no use there.
DEFAULT_EXCLUDE = ("pyspark", "py4j", "pip", "setuptools", "wheel")


def normalize(name: str) -> str:
    """PEP 503 name: ``Python_Dateutil`` -> ``python-dateutil``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, md.Distribution]:
    """Installed distributions by normalized name; the first on ``sys.path`` wins, but a
    bare ``*.egg-info`` of a source tree (no record of installed files) never does."""
    found: dict[str, md.Distribution] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = normalize(name)
        if key in found:
            continue
        if dist.read_text("RECORD") is None and dist.read_text("installed-files.txt") is None:
            continue
        found[key] = dist
    return found


def resolve(
    *,
    include: Sequence[str] = (),
    extras: Sequence[str] = ("spark",),
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
) -> dict[str, md.Distribution]:
    """rstreams (with ``extras``) and ``include``, with every requirement they have in
    this environment, minus ``exclude``: normalized name -> installed distribution."""
    requirement_cls = requirement_class()
    have = installed()
    skip = {normalize(x) for x in exclude}
    todo: list[tuple[str, frozenset[str], str]] = [("rstreams", frozenset(extras), "")]
    for spec in include:
        req = requirement_cls(spec)
        todo.append((req.name, frozenset(req.extras), ""))
    processed: dict[str, set[str]] = {}  # key -> extras whose requirements were followed
    out: dict[str, md.Distribution] = {}
    while todo:
        name, wanted, needed_by = todo.pop()
        key = normalize(name)
        if key in skip:
            continue
        dist = have.get(key)
        if dist is None:
            by = f" (needed by {needed_by})" if needed_by else ""
            raise ConfigError(
                f"{name}{by} is not installed in this environment ({sys.prefix}), so it "
                "can not be packed; install it (and check that the pipeline runs "
                "locally) first"
            )
        out[key] = dist
        done = processed.get(key)
        if done is None:
            first, envs = True, ["", *sorted(wanted)]
            processed[key] = set(wanted)
        else:
            first, envs = False, sorted(wanted - done)
            if not envs:
                continue
            done.update(envs)
        for text in dist.requires or ():
            req = requirement_cls(text)
            if req.marker is None:
                if not first:
                    continue  # followed the first time
            elif not any(req.marker.evaluate({"extra": e}) for e in envs):
                continue
            todo.append((req.name, frozenset(req.extras), dist.metadata["Name"]))
    return dict(sorted(out.items()))


def requirement_class() -> Any:
    """``packaging``'s Requirement (pip carries a copy when it is not installed)."""
    for module in ("packaging.requirements", "pip._vendor.packaging.requirements"):
        with contextlib.suppress(ImportError):
            return importlib.import_module(module).Requirement
    raise ConfigError(
        "packing an environment needs the 'packaging' distribution: pip install 'rstreams[spark]'"
    )


def _editable_source(dist: md.Distribution) -> bool:
    text = dist.read_text("direct_url.json")
    if not text:
        return False
    with contextlib.suppress(ValueError, AttributeError):
        return bool(json.loads(text).get("dir_info", {}).get("editable"))
    return False


def copy_distribution(dist: md.Distribution, site: Path) -> None:
    if _editable_source(dist):
        _copy_editable(dist, site)
        return
    files = dist.files
    if files is None:
        raise ConfigError(
            f"{dist.metadata['Name']} {dist.version} has no record of its installed files; "
            "reinstall it with pip to pack it"
        )
    for rel in files:
        parts = Path(str(rel)).parts
        if not parts or parts[0] == ".." or Path(str(rel)).is_absolute():
            continue  # scripts and data outside site-packages: of no use to executors
        src = Path(str(dist.locate_file(rel)))
        if not src.is_file():
            if str(rel).endswith(".pyc"):
                continue  # bytecode the installer recorded but nobody has compiled yet
            raise ConfigError(
                f"{dist.metadata['Name']} {dist.version} is damaged: {src} is missing; reinstall it"
            )
        place(src, site / Path(*parts))


def _copy_editable(dist: md.Distribution, site: Path) -> None:
    """An editable install: the modules it maps to, from their source, and a
    ``.dist-info`` with its metadata."""
    name, version = dist.metadata["Name"], dist.version
    tops = [t.strip() for t in (dist.read_text("top_level.txt") or "").splitlines()]
    tops = [t for t in tops if t] or [normalize(name).replace("-", "_")]
    written: list[Path] = []
    for top in tops:
        spec = importlib.util.find_spec(top)
        if spec is None:
            raise ConfigError(
                f"{name} is installed in editable mode but its module {top!r} can not be "
                "found; install it without -e to pack it"
            )
        if spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                root = Path(location)
                for src in _walk_source(root):
                    dst = site / top / src.relative_to(root)
                    place(src, dst)
                    written.append(dst)
        elif spec.origin and os.path.isfile(spec.origin):
            dst = site / Path(spec.origin).name
            place(Path(spec.origin), dst)
            written.append(dst)
    info = site / f"{normalize(name).replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(dist.read_text("METADATA") or "", encoding="utf-8")
    (info / "INSTALLER").write_text("rstreams-pack-env\n", encoding="utf-8")
    (info / "top_level.txt").write_text("".join(t + "\n" for t in tops), encoding="utf-8")
    written += [info / "METADATA", info / "INSTALLER", info / "top_level.txt"]
    lines = [f"{_record_path(p, site)},{_hash(p)},{p.stat().st_size}" for p in written]
    lines.append(f"{_record_path(info / 'RECORD', site)},,")
    (info / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _walk_source(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        for f in sorted(filenames):
            if not f.endswith((".pyc", ".pyo")) and not f.startswith("."):
                yield Path(dirpath) / f


def _record_path(p: Path, site: Path) -> str:
    return p.relative_to(site).as_posix()


def _hash(p: Path) -> str:
    import base64

    digest = hashlib.sha256(p.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def place(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (copy across file systems), keeping its mtime so that
    recorded bytecode stays valid."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink() and not os.path.isabs(os.readlink(src)):
        os.symlink(os.readlink(src), dst)
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
