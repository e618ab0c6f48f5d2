"""Pack this Python environment for Spark executors: ``rstreams spark pack-env``.

PySpark's way of giving executors the driver's packages ("Python Package Management"
in its documentation) is an archive of an environment passed with ``spark.archives``
and run with ``spark.pyspark.python=./environment/bin/python``. :func:`pack_env` builds
that archive from what this interpreter has installed, exactly (same distributions,
same versions, same files), and checks it before writing it:

- **What goes in**: rstreams with its ``spark`` extra's requirements and everything
  they need, plus the distributions you name (``include``: the pipeline's own imports),
  with the files their installer recorded. PySpark and py4j stay out: Spark puts its own
  ``pyspark.zip`` and py4j on the executors' ``PYTHONPATH``, matching the cluster's
  Spark. A distribution installed in editable mode (``pip install -e``, rstreams itself
  in a checkout) is packed from the source the driver imports, so the executors run the
  very code the driver runs.
- **The interpreter**: ``python="bundle"`` (the default) copies this Python itself (its
  executable, ``libpython`` and standard library, without the test suite, IDLE and
  tkinter) into the archive, so the executors need no Python of their own: only the same
  OS and CPU family (glibc, OpenSSL, zlib... as on this machine). ``python="link"``
  packs a virtual environment whose ``bin/python`` is a link to a Python the executors
  already have, at ``python_prefix`` (default: this interpreter's own base prefix), as
  ``venv-pack`` does; the archive is smaller, and that Python must be the same minor
  version as the driver's.
- **Checked**: before the archive is written, the packed interpreter is started from
  the staging directory with Spark's own ``pyspark.zip`` and py4j on ``PYTHONPATH`` (as
  executors start it) and must import rstreams, its Spark runtime and the included
  distributions from inside the archive, and nothing from this machine's other
  environments.

The archive is a ``.tar.gz`` whose root is the environment (``bin/``, ``lib/``,
``rstreams-env.json``, a manifest of what is inside), which Spark unpacks into the
directory named after ``#`` in ``spark.archives``::

    rstreams spark pack-env -o env.tar.gz
    rstreams run pipeline.py --backend spark --master spark://host:7077 \\
        --conf spark.archives=env.tar.gz#environment \\
        --conf spark.pyspark.python=./environment/bin/python ...

Pack on a machine like the executors (same OS image and CPU architecture, e.g. in the
executors' container image): compiled packages (pyarrow, numpy, rocksdict) and the
interpreter are binaries for this platform.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rstreams.errors import ConfigError
from rstreams.runtime.spark.packdists import (
    DEFAULT_EXCLUDE,
    copy_distribution,
    installed,
    normalize,
    place,
    requirement_class,
    resolve,
)

__all__ = [
    "DEFAULT_EXCLUDE",
    "MANIFEST",
    "SPARK_CONF",
    "STDLIB_SKIP",
    "PackedEnv",
    "add_parsers",
    "installed",
    "main",
    "normalize",
    "pack_env",
    "resolve",
    "spark_python_path",
]

log = logging.getLogger("rstreams.spark")

#: Parts of the standard library a Spark executor never imports (tests, GUIs, installers,
#: the static library for embedding): about 200 MB of a typical install.
STDLIB_SKIP = frozenset(
    {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip"}
)
MANIFEST = "rstreams-env.json"
#: The options that make executors run a packed archive; ``{archive}`` is its path/URL.
SPARK_CONF = {
    "spark.archives": "{archive}#environment",
    "spark.pyspark.python": "./environment/bin/python",
}

# Run by the packed interpreter: what it is, where its modules come from.
_CHECK = r"""
import importlib, json, os, sys
out = {"executable": sys.executable, "prefix": sys.prefix, "base_prefix": sys.base_prefix,
       "version": "%d.%d.%d" % sys.version_info[:3], "modules": {}, "failed": {}}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
    except BaseException as e:
        out["failed"][name] = "%s: %s" % (type(e).__name__, e)
    else:
        out["modules"][name] = getattr(module, "__file__", None) or ""
libs = set()
with open("/proc/self/maps") if os.path.exists("/proc/self/maps") else open(os.devnull) as f:
    for line in f:
        path = line.split(None, 5)[-1].strip()
        if "/libpython" in path:
            libs.add(path)
out["libpython"] = sorted(libs)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class PackedEnv:
    """What :func:`pack_env` wrote."""

    path: Path
    python: str  # "bundle" or "link"
    python_version: str
    #: normalized distribution name -> version, of everything packed
    distributions: dict[str, str]
    size: int  # bytes of the archive
    #: the interpreter the executors run: bundled, or the linked one
    interpreter: str
    checked: bool
    seconds: float
    notes: list[str] = field(default_factory=list)

    def spark_conf(self, archive: str | None = None) -> dict[str, str]:
        """``spark.archives`` and ``spark.pyspark.python`` to run executors on it;
        ``archive`` is where the executors find it (default: this local path)."""
        where = archive or str(self.path)
        return {k: v.format(archive=where) for k, v in SPARK_CONF.items()}


def pack_env(
    output: str | os.PathLike[str],
    *,
    python: str = "bundle",
    python_prefix: str | None = None,
    include: Sequence[str] = (),
    extras: Sequence[str] = ("spark",),
    exclude: Sequence[str] = DEFAULT_EXCLUDE,
    compresslevel: int = 6,
    check: bool = True,
) -> PackedEnv:
    """Write a ``.tar.gz`` of rstreams and its dependencies, as installed here, for
    ``spark.archives``; see the module documentation. Raises :class:`ConfigError` when
    the environment can not be packed or the packed one does not work."""
    started = time.monotonic()
    # (Absolute: the check starts the staged Python from another working directory.)
    out = Path(output).absolute()
    _check_options(out, python, python_prefix, compresslevel)
    dists = resolve(include=include, extras=extras, exclude=exclude)
    out.parent.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix=".rstreams-pack-", dir=out.parent) as tmp:
        stage = Path(tmp) / "environment"
        stage.mkdir()
        interpreter, site = _stage_python(stage, python, python_prefix)
        versions: dict[str, str] = {}
        for key, dist in dists.items():
            copy_distribution(dist, site)
            versions[key] = dist.version
        _write_manifest(stage, python, interpreter, versions)
        checked = False
        if check:
            runnable = python == "bundle" or Path(interpreter).exists()
            if runnable:
                _check(stage, python, include, dists)
                checked = True
            else:
                notes.append(
                    f"not checked: {interpreter} (the executors' Python) is not on this machine"
                )
        partial = Path(tmp) / out.name
        _write_tar(stage, partial, compresslevel)
        os.replace(partial, out)
    return PackedEnv(
        path=out,
        python=python,
        python_version=platform.python_version(),
        distributions=versions,
        size=out.stat().st_size,
        interpreter=interpreter,
        checked=checked,
        seconds=time.monotonic() - started,
        notes=notes,
    )


def _check_options(out: Path, python: str, python_prefix: str | None, compresslevel: int) -> None:
    """Refuse what :func:`pack_env` can not do, before it copies anything."""
    if not out.name.endswith((".tar.gz", ".tgz")):
        raise ConfigError(
            f"the archive must be a .tar.gz or .tgz (Spark unpacks those keeping links and "
            f"permissions); got {str(out)!r}"
        )
    if python not in ("bundle", "link"):
        raise ConfigError(f"python must be 'bundle' or 'link'; got {python!r}")
    if python_prefix and python != "link":
        raise ConfigError("a python prefix is for python='link' (the executors' own Python)")
    if os.name == "nt":
        raise ConfigError("packing an environment for Spark executors needs Linux or macOS")
    if not 0 <= compresslevel <= 9:
        raise ConfigError(f"compresslevel is 0-9; got {compresslevel}")


# -- the interpreter -----------------------------------------------------------------------


def _stage_python(stage: Path, python: str, prefix: str | None) -> tuple[str, Path]:
    """The interpreter in ``stage``, bundled or linked (``python``): the path executors
    run it by, and the (created) site-packages directory it reads."""
    if python == "bundle":
        interpreter = _bundle_python(stage)
        site = _site_packages(stage)
    else:
        interpreter = _link_python(stage, prefix)
        site = stage / "lib" / _pyname() / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    return interpreter, site


def _pyname() -> str:
    return f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _bundle_python(stage: Path) -> str:
    """Copy this Python's executable, libpython and standard library into ``stage``."""
    base = Path(sys.base_prefix)
    if (base / "conda-meta").is_dir():
        raise ConfigError(
            f"{base} is a conda environment, whose Python needs the libraries conda "
            "installed next to it: pack it with conda-pack, or use --link-python PREFIX "
            "with a Python the executors have"
        )
    executable = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    bindir = stage / "bin"
    bindir.mkdir()
    real = bindir / _pyname()
    shutil.copy2(executable, real)
    libs: list[str] = []
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
        libdir = sysconfig.get_config_var("LIBDIR")
        src = Path(libdir or "", soname or "")
        if not soname or not src.is_file():
            raise ConfigError(
                f"this Python ({executable}) uses a shared libpython that could not be "
                f"found ({src}); use --link-python PREFIX instead"
            )
        (stage / "lib").mkdir(exist_ok=True)
        shutil.copy2(src, stage / "lib" / src.name)
        libs.append(src.name)
    copied: set[Path] = set()
    bases = {"base": sys.base_prefix, "installed_base": sys.base_prefix}
    bases.update(platbase=sys.base_exec_prefix, installed_platbase=sys.base_exec_prefix)
    for key in ("stdlib", "platstdlib"):
        lib = Path(sysconfig.get_path(key, vars=bases))
        if lib in copied:
            continue
        copied.add(lib)
        try:
            rel = lib.relative_to(base)
        except ValueError:
            raise ConfigError(
                f"this Python's standard library ({lib}) is not under its prefix ({base}); "
                "use --link-python PREFIX instead"
            ) from None
        _copy_stdlib(lib, stage / rel)
    python = bindir / "python"
    if libs:
        # The executable finds libpython through an absolute path of this machine (its
        # RUNPATH); point the loader at the bundled copy instead.
        python.write_text(
            "#!/bin/sh\n"
            "# rstreams pack-env: the bundled Python, with its own libpython.\n"
            'bin=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd -P)\n'
            'LD_LIBRARY_PATH="$bin/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n'
            "export LD_LIBRARY_PATH\n"
            f'exec "$bin/{_pyname()}" "$@"\n',
            encoding="utf-8",
        )
        python.chmod(0o755)
    else:
        python.symlink_to(_pyname())
    (bindir / "python3").symlink_to("python")
    return "./environment/bin/python"


def _copy_stdlib(src: Path, dst: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        top = here == src
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not (top and (d in STDLIB_SKIP or d.startswith("config-")))
            and not (d == "tests" and here.name == "lib2to3")
        )
        target = dst / here.relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in filenames:
            if ".opt-1." in f or ".opt-2." in f:
                continue  # bytecode for -O/-OO, which PySpark's workers do not use
            s = here / f
            if s.is_symlink():
                os.symlink(os.readlink(s), target / f)
            else:
                place(s, target / f)


def _site_packages(stage: Path) -> Path:
    """Where the bundled interpreter looks for packages (``lib/pythonX.Y/site-packages``,
    or what this Python's distributor patched it to be)."""
    probe = "import json, site; print(json.dumps(site.getsitepackages()))"
    result = _run_python(stage, ["-c", probe])
    if result.returncode != 0:
        raise ConfigError(
            "the bundled copy of this Python does not start; use --link-python PREFIX "
            f"instead: {_tail(result.stderr)}"
        )
    root = os.path.realpath(stage)
    for path in json.loads(result.stdout):
        if os.path.realpath(path).startswith(root + os.sep):
            return Path(path)
    raise ConfigError(
        "the bundled copy of this Python does not look for packages inside its own "
        "prefix; use --link-python PREFIX instead"
    )


def _link_python(stage: Path, prefix: str | None) -> str:
    """A virtual environment whose ``bin/python`` links to ``PREFIX/bin/pythonX.Y``."""
    if prefix:
        home = Path(prefix) / "bin"
        target = home / _pyname()
    else:
        target = Path(getattr(sys, "_base_executable", sys.executable))
        home = target.parent
    if not target.is_absolute():
        raise ConfigError(f"the executors' Python prefix must be an absolute path; got {prefix}")
    bindir = stage / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(target)
    (bindir / "python3").symlink_to("python")
    (bindir / _pyname()).symlink_to("python")
    (stage / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = false\n"
        f"version = {platform.python_version()}\n",
        encoding="utf-8",
    )
    return str(target)


# -- checking and writing ------------------------------------------------------------------


def _clean_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "PYSPARK", "VIRTUAL_ENV", "CONDA_")) and k != "PYTHONPATH"
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run_python(
    stage: Path, args: list[str], extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**_clean_env(), **(extra_env or {})}
    with tempfile.TemporaryDirectory() as cwd:
        try:
            return subprocess.run(
                [str(stage / "bin" / "python"), *args],
                capture_output=True,
                text=True,
                env=env,
                cwd=cwd,
                timeout=300,
            )
        except OSError as e:
            raise ConfigError(f"could not start the packed Python: {e}") from e


def spark_python_path() -> list[str]:
    """Spark's own ``pyspark.zip`` and py4j zip, which executors get on ``PYTHONPATH``."""
    roots = []
    if os.environ.get("SPARK_HOME"):
        roots.append(Path(os.environ["SPARK_HOME"]))
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        roots.append(Path(spec.origin).parent)
    for root in roots:
        lib = root / "python" / "lib"
        zips = sorted(lib.glob("pyspark*.zip")) + sorted(lib.glob("py4j-*.zip"))
        if len(zips) >= 2:
            return [str(z) for z in zips]
    return []


def _check(stage: Path, python: str, include: Sequence[str], dists: dict[str, Any]) -> None:
    """Start the packed interpreter the way executors do and import rstreams' Spark
    runtime and the included distributions from the archive."""
    requirement_cls = requirement_class()
    modules = ["rstreams", "pandas", "pyarrow", "numpy"]
    zips = spark_python_path()
    if zips:
        modules.append("rstreams.runtime.spark.runner")  # pyspark, py4j: from Spark's zips
    for spec in include:
        dist = dists[normalize(requirement_cls(spec).name)]
        tops = (dist.read_text("top_level.txt") or "").split()
        modules += [t for t in tops if not t.startswith("_")][:5]
    env = {"PYTHONPATH": os.pathsep.join(zips)} if zips else {}
    result = _run_python(stage, ["-c", _CHECK, *modules], env)
    if result.returncode != 0:
        raise ConfigError(f"the packed Python fails to start: {_tail(result.stderr)}")
    info = json.loads(result.stdout.strip().splitlines()[-1])
    if info["failed"]:
        failed = "; ".join(f"{m}: {e}" for m, e in info["failed"].items())
        raise ConfigError(f"the packed environment can not import {failed}")
    if info["version"] != platform.python_version():
        raise ConfigError(
            f"the packed environment runs Python {info['version']}, this driver "
            f"{platform.python_version()}: PySpark needs the same version on both"
        )
    root = os.path.realpath(stage)

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return real == root or real.startswith(root + os.sep)

    allowed = [root, *(os.path.realpath(z) for z in zips)]
    if python == "link":
        allowed.append(os.path.realpath(info["base_prefix"]))
    outside = {
        m: f
        for m, f in info["modules"].items()
        if f and not any(os.path.realpath(f).startswith(a + os.sep) for a in allowed)
    }
    if not inside(info["prefix"]) or outside:
        raise ConfigError(
            f"the packed environment imports from outside the archive ({outside or info})"
        )
    if python == "bundle" and not inside(info["base_prefix"]):
        raise ConfigError(f"the bundled Python runs from {info['base_prefix']}, not the archive")
    if python == "bundle" and info["libpython"] and not all(inside(p) for p in info["libpython"]):
        raise ConfigError(f"the bundled Python loads {info['libpython']}, not its own copy")


def _write_manifest(stage: Path, python: str, interpreter: str, versions: dict[str, str]) -> None:
    manifest = {
        "created_by": "rstreams spark pack-env",
        "python": python,
        "interpreter": interpreter,
        "python_version": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": sysconfig.get_platform(),
        "libc": "-".join(platform.libc_ver()),
        "distributions": versions,
        "spark_conf": SPARK_CONF,
    }
    (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _write_tar(stage: Path, path: Path, compresslevel: int) -> None:
    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(path, "w:gz", compresslevel=compresslevel) as tar:
        for child in sorted(stage.iterdir()):
            tar.add(child, arcname=child.name, filter=owner)


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


# -- command line --------------------------------------------------------------------------


def _size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def cmd_pack_env(args: argparse.Namespace) -> int:
    from rstreams.runtime.results import check_output_path

    check_output_path(args.output, "-o")  # (before minutes of packing)
    packed = pack_env(
        args.output,
        python="link" if args.link_python else "bundle",
        python_prefix=args.link_python or None,
        include=args.with_,
        compresslevel=args.compress_level,
        check=not args.no_check,
    )
    if not args.quiet:
        what = (
            f"Python {packed.python_version} bundled"
            if packed.python == "bundle"
            else f"linked to {packed.interpreter}"
        )
        print(
            f"wrote {packed.path} ({_size(packed.size)}, {what}, "
            f"{len(packed.distributions)} distributions, {packed.seconds:.0f}s"
            f"{', checked' if packed.checked else ''})",
            file=sys.stderr,
        )
        for note in packed.notes:
            print(f"  {note}", file=sys.stderr)
        conf = " ".join(f"--conf {k}={v}" for k, v in packed.spark_conf().items())
        print(f"run executors on it with:\n  {conf}", file=sys.stderr)
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pack-env``."""
    p.add_argument(
        "-o", "--output", required=True, metavar="ENV.tar.gz", help="the archive to write"
    )
    p.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        metavar="DIST",
        help="also pack this installed distribution and its requirements (the pipeline's "
        "own imports; repeatable)",
    )
    p.add_argument(
        "--link-python",
        metavar="PREFIX",
        nargs="?",
        const=sys.base_prefix,
        default=None,
        help="do not bundle this Python: link to the executors' own Python "
        f"PREFIX/bin/python{sys.version_info[0]}.{sys.version_info[1]} (default PREFIX: "
        "this interpreter's, as venv-pack does)",
    )
    p.add_argument(
        "--compress-level",
        type=int,
        default=6,
        choices=range(10),
        metavar="0-9",
        help="gzip level (default 6; 1 packs about twice as fast, 15%% bigger)",
    )
    p.add_argument(
        "--no-check", action="store_true", help="do not start the packed Python to check it"
    )


def add_parsers(sub: Any, common: Callable[[argparse.ArgumentParser], None]) -> None:
    """``rstreams spark pack-env`` under the ``rstreams`` command's subparsers."""
    spark = sub.add_parser("spark", help="tools for running on Apache Spark")
    spark_sub = spark.add_subparsers(dest="spark_command", metavar="COMMAND", required=True)
    p = spark_sub.add_parser(
        "pack-env",
        help="pack rstreams and its dependencies for Spark executors (spark.archives)",
        description="Write a .tar.gz of this environment's rstreams, its dependencies and "
        "(by default) this Python, for spark.archives and "
        "spark.pyspark.python=./environment/bin/python.",
    )
    add_arguments(p)
    common(p)
    p.set_defaults(func=cmd_pack_env)


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m rstreams.runtime.spark.packenv -o env.tar.gz``."""
    parser = argparse.ArgumentParser(
        prog="python -m rstreams.runtime.spark.packenv",
        description="Pack rstreams and its dependencies for Spark executors.",
    )
    add_arguments(parser)
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        return cmd_pack_env(args)
    except ConfigError as e:
        print(f"rstreams: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
