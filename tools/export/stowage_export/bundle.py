"""A PyTorch module to a Stowage bundle, checked against PyTorch before anything is written.

The steps, each of which can refuse with a message a user can act on (ExportError):

1. Run the module on the example in eval mode: the reference outputs, their names and dtypes.
2. Check what the KServe protocol and Stowage can carry: dtypes, a batch axis (dimension 0 of
   every input and output), names that do not clash, axis letters.
3. torch.onnx.export with dimension 0 of every tensor dynamic and named "n"; every other
   dimension is fixed and gets its axis letter as an ONNX dimension denotation, so the file
   describes itself (`node main.js bundle create` reads the letters back).
4. Load the file in ONNX Runtime (an operator it lacks is named here) and run it on the example
   and on random batches of several sizes; refuse (DriftError) when an output differs from
   PyTorch's beyond atol + rtol * |torch| anywhere, naming the worst element.
5. Write model.onnx, manifest.yaml and optionally a model.js template, into a staging directory
   renamed into place, so a server watching the repository never sees half a bundle.
"""
import json
import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

# torch dtype name -> manifest dtype. What ONNX Runtime's Node binding and KServe both carry.
MANIFEST_DTYPES = {
    "float32": "f32", "float16": "f16", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "bool": "bool",
}
# Letters for the axes after the batch axis, in order (the same as `bundle create` suggests).
AXIS_LETTERS = "chwdklmopqrstuvxyzabefgij"
BATCH_AXIS = "n"


class ExportError(Exception):
    """The module cannot become a bundle as it is; the message says why and what to change."""


class DriftError(ExportError):
    """ONNX Runtime's outputs differ from PyTorch's beyond the tolerance."""

    def __init__(self, message, worst):
        super().__init__(message)
        self.worst = worst


@dataclass
class Exported:
    """A written bundle and the largest difference from PyTorch its checks saw."""
    path: pathlib.Path
    worst: "Worst"


@dataclass
class Worst:
    """The largest difference found: where, and both values."""
    output: str
    batch: int
    index: tuple
    torch_value: float
    onnx_value: float
    difference: float
    allowed: float


def _torch():
    try:
        import torch  # noqa: PLC0415 (imported late: the CLI's --help works without it)
    except ImportError as err:
        raise ExportError("PyTorch is not installed in this Python: install it (Debian: apt install python3-torch; "
                          "a venv made with --system-site-packages sees it)") from err
    return torch


def _as_tuple(value, what):
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    raise ExportError(f"{what} must be a tensor or a tuple of tensors, not {type(value).__name__}"
                      + (" (a dict: return a tuple and give output_names)" if isinstance(value, dict) else ""))


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _manifest_dtype(t, side, name):
    dtype = _dtype_name(t)
    if dtype in MANIFEST_DTYPES:
        return MANIFEST_DTYPES[dtype]
    if dtype == "bfloat16":
        raise ExportError(f"{side} {name!r} is bfloat16: KServe carries BF16, but ONNX Runtime's Node binding cannot "
                          "hold it; cast it to float32 or float16 in the module")
    raise ExportError(f"{side} {name!r} is {dtype}, which the KServe protocol cannot carry; cast it in the module to "
                      f"one of {', '.join(MANIFEST_DTYPES)}")


def _names(given, count, default, side):
    names = list(given) if given is not None else ([default] if count == 1 else [f"{default}_{i}" for i in range(count)])
    if len(names) != count:
        raise ExportError(f"{side}_names has {len(names)} names, but the module has {count} {side}s")
    for n in names:
        if not isinstance(n, str) or not n:
            raise ExportError(f"{side}_names: {n!r} is not a name; give non-empty strings")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ExportError(f"{side}_names names {', '.join(map(repr, dup))} twice; give each {side} its own name")
    return names


def _letters(name, t, axes):
    rank = t.dim()
    if rank == 0:
        raise ExportError(f"{name!r} is a scalar; Stowage needs a batch axis first on every tensor: return shape [n] instead")
    letters = axes.get(name)
    if letters is None:
        if rank - 1 > len(AXIS_LETTERS):
            raise ExportError(f"{name!r} has {rank} axes; give its letters in axes")
        return BATCH_AXIS + AXIS_LETTERS[:rank - 1]
    if len(letters) != rank or not letters.isalpha() or not letters.islower() or len(set(letters)) != rank:
        raise ExportError(f"axes[{name!r}] = {letters!r}: {name!r} has shape {list(t.shape)}; give {rank} distinct lower-case letters")
    if letters[0] != BATCH_AXIS or BATCH_AXIS in letters[1:]:
        raise ExportError(f"axes[{name!r}] = {letters!r}: the batch axis {BATCH_AXIS!r} comes first and only first "
                          "(the exporter makes dimension 0 the batch axis)")
    return letters


def _tensor_line(name, dtype, letters, shape):
    dims = ", ".join(f"{letter}: {int(d)}" for letter, d in zip(letters[1:], shape[1:]))
    return f"  - {{ name: {json.dumps(name)}, dtype: {dtype}, shape: \"{letters}\"{', dims: { ' + dims + ' }' if dims else ''} }}"


def _manifest(name, source, inputs, outputs, batch_sizes, hooks):
    lines = [f"# Written by stowage-export from {source}; checked against PyTorch before it was written.",
             'format_version: "2.0"', f"name: {json.dumps(name)}"]
    if hooks:
        lines.append("client_inputs:            # what clients send; model.js preprocess turns them into executable_inputs")
        lines += [_tensor_line(*t) for t in inputs]
    lines.append("executable_inputs:")
    lines += [_tensor_line(*t) for t in inputs]
    lines.append("executable_outputs:")
    lines += [_tensor_line(*t) for t in outputs]
    if hooks:
        lines.append("client_outputs:           # what clients get back; model.js postprocess makes them")
        lines += [_tensor_line(*t) for t in outputs]
    lines += ["batching:", f"  compiled_batch_sizes: [{', '.join(str(b) for b in batch_sizes)}]"]
    return "\n".join(lines) + "\n"


MODEL_JS = """// Pre- and post-processing for {name}: runs on Stowage's hook threads, between what clients
// send (client_inputs in manifest.yaml) and what the model takes (executable_inputs), and back.
// Each tensor is {{ datatype, shape, data }} with data a typed array (BYTES: an array of Uint8Array).
// As written, both hooks pass tensors through unchanged: edit them and the client_* tensors together.

/** client_inputs -> executable_inputs */
export function preprocess(inputs) {{
  return inputs;
}}

/** executable_outputs -> client_outputs */
export function postprocess(outputs) {{
  return outputs;
}}
"""


def _random_like(example, batch, generator):
    torch = _torch()
    shape = (batch, *example.shape[1:])
    if example.dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if example.dtype.is_floating_point:
        ex = example.to(torch.float64)
        std = float(ex.std()) if ex.numel() > 1 else 1.0
        std = std if std > 0 else 1.0
        return (torch.randn(shape, generator=generator, dtype=torch.float64) * std + float(ex.mean())).to(example.dtype)
    low, high = int(example.min()), int(example.max())
    return torch.randint(low, high + 1, shape, generator=generator, dtype=torch.int64).to(example.dtype)


def _compare(names, reference, got, batch, rtol, atol, worst):
    """Update `worst` with the largest (difference - allowed) over every output; returns it."""
    for name, ref, out in zip(names, reference, got):
        ref = ref.detach().cpu().numpy()
        if ref.shape != out.shape:
            raise ExportError(f"output {name!r}: ONNX Runtime returned shape {list(out.shape)}, PyTorch {list(ref.shape)} "
                              f"(batch {batch}); the export fixed a size that depends on the input (check dynamic shapes in forward)")
        if ref.size == 0:
            continue
        exact = not np.issubdtype(ref.dtype, np.floating)
        r = ref.astype(np.float64)
        o = out.astype(np.float64)
        diff = np.abs(r - o)
        allowed = np.zeros_like(r) if exact else atol + rtol * np.abs(r)
        excess = np.where(np.isnan(r) & np.isnan(o), -np.inf, np.nan_to_num(diff - allowed, nan=np.inf))
        at = np.unravel_index(int(np.argmax(excess)), excess.shape)
        if worst is None or excess[at] > worst.difference - worst.allowed:
            worst = Worst(name, batch, tuple(int(i) for i in at), float(r[at]), float(o[at]), float(diff[at]), float(allowed[at]))
    return worst


def export_bundle(module, example, out, *, name=None, input_names=None, output_names=None, axes=None,
                  batch_sizes=(1, 8, 32), check_batch_sizes=(1, 3, 8), rtol=1e-3, atol=1e-5, opset=17,
                  hooks=False, overwrite=False, seed=0, source=None):
    """Export `module` run on `example` (a tensor or a tuple of tensors, batch first) to the bundle
    directory `out`, whose name is the model name. Returns an Exported: the bundle's path and the
    largest difference from PyTorch seen.

    Raises ExportError when the module cannot be served as it is, and DriftError (with `.worst`)
    when ONNX Runtime's outputs differ from PyTorch's by more than atol + rtol * |PyTorch's|
    (integer and boolean outputs must match exactly). Nothing is written unless every check passed.
    """
    torch = _torch()
    import onnx  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    out = pathlib.Path(out)
    name = name or out.name
    if out.name != name:
        out = out / name
    if not name or name.startswith(".") or "/" in name:
        raise ExportError(f"model name {name!r}: use letters, digits, '_', '.' and '-' (it is the bundle's directory name)")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ExportError(f"{out} already exists and is not empty; choose another directory or pass overwrite=True (--force)")
    axes = dict(axes or {})
    batch_sizes = sorted(set(int(b) for b in batch_sizes))
    if not batch_sizes or batch_sizes[0] < 1:
        raise ExportError(f"batch_sizes {batch_sizes}: give positive sizes, e.g. (1, 8, 32)")

    examples = _as_tuple(example, "example")
    module = module.eval()
    with torch.no_grad():
        reference = _as_tuple(module(*examples), "the module's output")
    input_names = _names(input_names, len(examples), "input", "input")
    output_names = _names(output_names, len(reference), "output", "output")
    clash = sorted(set(input_names) & set(output_names))
    if clash:
        raise ExportError(f"{', '.join(map(repr, clash))} names both an input and an output; requests and responses "
                          "match tensors by name: rename one (input_names / output_names)")
    unknown = sorted(set(axes) - set(input_names) - set(output_names))
    if unknown:
        raise ExportError(f"axes names {', '.join(map(repr, unknown))}, which the module has not; its tensors are "
                          f"{', '.join(map(repr, input_names + output_names))}")
    batch = int(examples[0].shape[0]) if examples[0].dim() > 0 else 0
    inputs, outputs = [], []
    for side, names, tensors, into in (("input", input_names, examples, inputs), ("output", output_names, reference, outputs)):
        for n, t in zip(names, tensors):
            dtype = _manifest_dtype(t, side, n)
            letters = _letters(n, t, axes)
            if int(t.shape[0]) != batch:
                raise ExportError(f"{side} {n!r} has shape {list(t.shape)}: its first dimension is not the batch "
                                  f"({batch} in the example); Stowage batches every tensor along its first axis")
            into.append((n, dtype, letters, tuple(t.shape)))

    with tempfile.TemporaryDirectory(prefix="stowage-export-") as tmp:
        path = pathlib.Path(tmp) / "model.onnx"
        dynamic = {n: {0: BATCH_AXIS} for n in input_names + output_names}
        try:
            with torch.no_grad():
                torch.onnx.export(module, examples, str(path), input_names=input_names, output_names=output_names,
                                  dynamic_axes=dynamic, opset_version=opset, do_constant_folding=True)
        except Exception as err:  # torch raises several types for an operator it cannot export
            raise ExportError(f"torch.onnx.export failed: {str(err).strip().splitlines()[0]} (replace that operation, "
                              "or try another opset with --opset)") from err

        # Denote every axis with its letter: the file says what the manifest says.
        model = onnx.load(str(path))
        letters = {t[0]: t[2] for t in inputs + outputs}
        for value in list(model.graph.input) + list(model.graph.output):
            if value.name in letters:
                for dim, letter in zip(value.type.tensor_type.shape.dim, letters[value.name]):
                    dim.denotation = letter
        onnx.save(model, str(path))

        try:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ExportError(f"ONNX Runtime cannot load the exported model: {str(err).strip()} (an operator it lacks "
                              "is named there: replace it in the module, or try another opset)") from err

        generator = torch.Generator().manual_seed(seed)
        worst = None
        trials = [(batch, examples)] + [(b, tuple(_random_like(e, b, generator) for e in examples)) for b in check_batch_sizes]
        for b, feeds in trials:
            with torch.no_grad():
                expected = _as_tuple(module(*feeds), "the module's output")
            try:
                got = session.run(output_names, {n: f.detach().cpu().numpy() for n, f in zip(input_names, feeds)})
            except Exception as err:
                raise ExportError(f"ONNX Runtime fails on a batch of {b}: {str(err).strip()} (the export may have fixed "
                                  "a size to the example's; check forward for shapes taken from the input)") from err
            worst = _compare(output_names, expected, got, b, rtol, atol, worst)
        if worst is not None and worst.difference > worst.allowed:
            raise DriftError(
                f"ONNX Runtime differs from PyTorch beyond the tolerance (atol {atol}, rtol {rtol}): output "
                f"{worst.output!r} at index {list(worst.index)} of a batch of {worst.batch}: PyTorch {worst.torch_value!r}, "
                f"ONNX Runtime {worst.onnx_value!r}, difference {worst.difference:.3g} > allowed {worst.allowed:.3g}. "
                "Nothing was written. Causes: Python control flow on tensor values or shapes (tracing kept one branch), "
                "ops that differ between the runtimes; loosen rtol/atol only if the difference is acceptable", worst)

        staging = out.parent / f".{name}.export-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            shutil.copyfile(path, staging / "model.onnx")
            (staging / "manifest.yaml").write_text(_manifest(name, source or type(module).__name__, inputs, outputs, batch_sizes, hooks))
            if hooks:
                (staging / "model.js").write_text(MODEL_JS.format(name=name))
            if out.exists():
                shutil.rmtree(out)
            staging.rename(out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Exported(out, worst)


__all__ = ["export_bundle", "Exported", "ExportError", "DriftError", "Worst"]
