"""Write one copy of an ONNX model per batch size, with the batch dimension fixed.

Turns a model.onnx with a dynamic batch axis into the seeds' per-size layout
(model.b1.onnx, model.b8.onnx, ...): the symbolic batch dimension of every graph
input and output becomes the given size. bench/batch-specialisation.js uses it
to measure whether specialised sessions beat one dynamic session.

Run:  python tools/specialise_batch.py MODEL.onnx OUT_DIR SIZE [SIZE ...] [--axis N]
"""
import argparse
import pathlib

import onnx


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("out_dir")
    parser.add_argument("sizes", nargs="+", type=int)
    parser.add_argument("--axis", type=int, default=0, help="position of the batch axis (default 0)")
    args = parser.parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for size in args.sizes:
        model = onnx.load(args.model)
        for value in list(model.graph.input) + list(model.graph.output):
            dim = value.type.tensor_type.shape.dim[args.axis]
            if dim.HasField("dim_value"):
                raise SystemExit(f"{value.name}: axis {args.axis} is already fixed to {dim.dim_value}")
            dim.ClearField("dim_param")
            dim.dim_value = size
        onnx.checker.check_model(model)
        onnx.save(model, out / f"model.b{size}.onnx")
    print(f"wrote {', '.join(f'model.b{s}.onnx' for s in args.sizes)} to {out}")


if __name__ == "__main__":
    main()
