#!/usr/bin/env python3
"""Validate .mlpackage directories with coremltools, an independent reader of the Core ML format.

Usage: validate_mlpackage.py PACKAGE [PACKAGE ...]

For each package, in order:
  1. coremltools.libmodelpackage.ModelPackage.isValid   (Manifest.json and Data/ layout)
  2. coremltools.models.utils.load_spec                 (the Model protobuf parses)
  3. the MIL-proto frontend loader, which rebuilds every op through coremltools' op definitions
     with full type inference and reads every weight blob (sentinel and dtype checked):
     coremltools.converters.mil.frontend.milproto.load.load(spec, specification_version=...,
         file_weights_dir=coremltools.models.utils._try_get_weights_dir_path(package))

Prints one JSON line per package on stdout: {"path", "ok", "error", "coremltools"}.
Exit status: 0 all accepted, 1 some rejected, 2 usage error, 3 coremltools unavailable (then a
single line {"unavailable": reason} is printed instead).

coremltools does NOT check the ModelDescription against the program; the TypeScript reader does.
"""

import contextlib
import json
import os
import sys


def _validate(pkg, ct_modules):
    ModelPackage, load_spec, weights_dir_of, milproto_load = ct_modules
    if not os.path.isdir(pkg):
        raise ValueError("not a directory")
    if not ModelPackage.isValid(pkg):
        raise ValueError("ModelPackage.isValid is False (Manifest.json or Data/ layout)")
    spec = load_spec(pkg)
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError("the model is not an ML Program")
    weights_dir = weights_dir_of(pkg)
    milproto_load(
        spec,
        specification_version=spec.specificationVersion,
        file_weights_dir=weights_dir if weights_dir is not None else "",
    )


def main(argv):
    paths = argv[1:]
    if not paths or any(p in ("-h", "--help") for p in paths):
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.stdout
    # coremltools prints warnings (e.g. "Failed to load _MLModelProxy" on Linux) on stdout:
    # keep stdout for our JSON lines only.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            import coremltools
            from coremltools.converters.mil.frontend.milproto.load import load as milproto_load
            from coremltools.libmodelpackage import ModelPackage
            from coremltools.models.utils import _try_get_weights_dir_path, load_spec
        except Exception as e:  # noqa: BLE001 - any import failure means "unavailable"
            print(json.dumps({"unavailable": f"cannot import coremltools: {type(e).__name__}: {e}"}), file=out)
            return 3
        modules = (ModelPackage, load_spec, _try_get_weights_dir_path, milproto_load)
        rejected = 0
        for pkg in paths:
            error = None
            try:
                _validate(pkg, modules)
            except Exception as e:  # noqa: BLE001 - every failure is a verdict
                error = f"{type(e).__name__}: {e}"
                rejected += 1
            verdict = {"path": pkg, "ok": error is None, "error": error, "coremltools": coremltools.__version__}
            print(json.dumps(verdict), file=out, flush=True)
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
