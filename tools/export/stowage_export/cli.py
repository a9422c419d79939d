"""stowage-export: a PyTorch module, named by FILE.py:FACTORY or package.module:FACTORY, to a bundle.

The factory is called with no arguments and returns the nn.Module (weights loaded), or a
(module, example) pair; otherwise --example-shape (and --example-dtype) describe the example
input, one per input, batch first.
"""
import argparse
import importlib
import importlib.util
import pathlib
import sys

from .bundle import ExportError, export_bundle


def _factory(spec):
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ExportError(f"{spec}: name the module's factory as FILE.py:FUNCTION or package.module:FUNCTION")
    if where.endswith(".py"):
        path = pathlib.Path(where)
        if not path.is_file():
            raise ExportError(f"{where} is not a file")
        sys.path.insert(0, str(path.resolve().parent))
        loaded = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    fn = getattr(module, attr, None)
    if fn is None:
        raise ExportError(f"{where} has no {attr}")
    return fn


def _shape(text):
    try:
        shape = [int(d) for d in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: write dimensions separated by commas, e.g. 1,3,224,224") from None
    if not shape or any(d < 1 for d in shape):
        raise argparse.ArgumentTypeError(f"{text}: dimensions are positive")
    return shape


def _pairs(values, what):
    out = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key or not val:
            raise ExportError(f"--{what} {v}: write NAME=VALUE")
        out[key] = val
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="stowage-export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("factory", help="FILE.py:FUNCTION or package.module:FUNCTION returning the module (or (module, example))")
    parser.add_argument("--out", required=True, help="the bundle directory to write (its name is the model name)")
    parser.add_argument("--name", help="the model name (default: --out's last part)")
    parser.add_argument("--example-shape", action="append", type=_shape, help="an example input's shape, batch first (one per input)")
    parser.add_argument("--example-dtype", action="append", help="its torch dtype (default float32; one per input)")
    parser.add_argument("--input-names", help="comma-separated (default input, or input_0, input_1, ...)")
    parser.add_argument("--output-names", help="comma-separated (default output, or output_0, output_1, ...)")
    parser.add_argument("--axes", action="append", help="TENSOR=LETTERS, one lower-case letter per axis, n first (e.g. image=nchw)")
    parser.add_argument("--batch-sizes", default="1,8,32", help="compiled_batch_sizes (default 1,8,32)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance against PyTorch (default 1e-3)")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance against PyTorch (default 1e-5)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    parser.add_argument("--hooks", action="store_true", help="also write a model.js template and client tensors")
    parser.add_argument("--force", action="store_true", help="replace an existing bundle")
    args = parser.parse_args(argv)
    try:
        built = _factory(args.factory)()
        module, example = built if isinstance(built, tuple) else (built, None)
        if example is None:
            if not args.example_shape:
                raise ExportError("give --example-shape (one per input), or return (module, example) from the factory")
            import torch  # noqa: PLC0415
            dtypes = args.example_dtype or []
            if len(dtypes) > len(args.example_shape):
                raise ExportError("more --example-dtype than --example-shape")
            tensors = []
            for i, shape in enumerate(args.example_shape):
                dtype = getattr(torch, dtypes[i] if i < len(dtypes) else "float32", None)
                if not isinstance(dtype, torch.dtype):
                    raise ExportError(f"--example-dtype {dtypes[i]}: not a torch dtype (float32, int64, ...)")
                tensors.append(torch.randn(shape).to(dtype) if dtype.is_floating_point else torch.zeros(shape, dtype=dtype))
            example = tuple(tensors)
        exported = export_bundle(
            module, example, args.out, name=args.name,
            input_names=args.input_names.split(",") if args.input_names else None,
            output_names=args.output_names.split(",") if args.output_names else None,
            axes=_pairs(args.axes, "axes"), batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
            rtol=args.rtol, atol=args.atol, opset=args.opset, hooks=args.hooks, overwrite=args.force,
            source=args.factory)
    except ExportError as err:
        print(f"stowage-export: {err}", file=sys.stderr)
        return 1
    w = exported.worst
    print(f"wrote {exported.path}: model.onnx, manifest.yaml{', model.js' if args.hooks else ''}")
    print(f"ONNX Runtime matches PyTorch within atol {args.atol} + rtol {args.rtol}; nearest the limit: output {w.output!r} "
          f"at {list(w.index)} of a batch of {w.batch}, difference {w.difference:.3g} where {w.allowed:.3g} is allowed")
    print((exported.path / "manifest.yaml").read_text(), end="")
    print(f"check it as the server will: node main.js bundle check {exported.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
