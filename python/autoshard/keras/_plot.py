"""keras.utils.plot_model and model_to_dot: a model's layers and calls as a
Graphviz graph, drawn by Graphviz's ``dot`` program (Debian's graphviz
package) into a PNG, SVG or PDF. Keras draws through pydot; the graph is
written here as DOT text and ``dot`` is run on it."""

import os
import shutil
import subprocess

from . import _functional


def _quoted(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(layer, show_shapes, show_dtype, show_layer_names, show_layer_activations):
    kind = type(layer).__name__
    text = f"{layer.name} ({kind})" if show_layer_names else kind
    if kind == "InputLayer" and (show_shapes or show_dtype):
        t = layer.output
        parts = ([f"shape {t.shape}"] if show_shapes else []) + (
            [f"dtype {t.dtype}"] if show_dtype else [])
        text += "\\n" + ", ".join(parts)
    args = getattr(layer, "_init_args", {}) or {}
    if show_layer_activations and args.get("activation") is not None:
        text += f"\\nactivation {args['activation']}"
    return text


def _edges(model):
    """(from layer, to layer) pairs: each call's arguments' makers."""
    if hasattr(model, "_layers"):  # a Sequential: a chain
        chain = _functional.model_layers(model, flat=True)
        inputs = getattr(model, "_input", None)
        if inputs is not None:
            chain = [_functional._input_layer(inputs)] + chain
        return chain, list(zip(chain, chain[1:]))
    layers = _functional.model_layers(model, flat=True)
    edges = []
    for t in _functional.calls(model._output_tensors):
        layer, args = t._history
        for a in args if isinstance(args, list) else [args]:
            source = a._history[0] if a._history is not None else _functional._input_layer(a)
            edges.append((source, layer))
    return layers, list(dict.fromkeys(edges))


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True,
                 rankdir="TB", expand_nested=False, dpi=200, subgraph=False,
                 show_layer_activations=False, show_trainable=False, **kwargs):
    """The model's graph as DOT text (Keras returns a pydot graph)."""
    if rankdir not in ("TB", "LR"):
        raise ValueError(f"plot_model: rankdir must be 'TB' or 'LR', got {rankdir!r}")
    if getattr(model, "_input_tensors", None) is None and not hasattr(model, "_layers"):
        raise ValueError(f"plot_model: model '{model.name}' was loaded from a file; its layers "
                         "are the file's (rebuild it with keras.models.model_from_json to plot "
                         "it)")
    layers, edges = _edges(model)
    lines = [f"digraph {_quoted(model.name)} {{", f"  rankdir={rankdir};", f"  dpi={int(dpi)};",
             "  node [shape=record, fontname=Helvetica];"]
    for layer in layers:
        label = _label(layer, show_shapes, show_dtype, show_layer_names, show_layer_activations)
        lines.append(f"  {_quoted(id(layer))} [label={_quoted(label)}];")
    for a, b in edges:
        lines.append(f"  {_quoted(id(a))} -> {_quoted(id(b))};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False,
               show_layer_names=True, rankdir="TB", expand_nested=False, dpi=200,
               show_layer_activations=False, show_trainable=False, **kwargs):
    """keras.utils.plot_model: draws the model into ``to_file`` (its
    extension picks PNG, SVG, PDF or DOT) with Graphviz's ``dot``."""
    text = model_to_dot(model, show_shapes, show_dtype, show_layer_names, rankdir,
                        expand_nested, dpi, show_layer_activations=show_layer_activations)
    path = os.fspath(to_file)
    ext = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    if ext == "dot":
        with open(path, "w") as f:
            f.write(text)
        return None
    if ext not in ("png", "svg", "pdf", "jpg", "jpeg"):
        raise ValueError(f"plot_model: to_file must end in .png, .svg, .pdf, .jpg or .dot, got "
                         f"'{path}'")
    dot = shutil.which("dot")
    if dot is None:
        raise ImportError("plot_model: Graphviz's `dot` program is not installed (Debian: "
                          "apt-get install graphviz; scripts/setup.sh installs it)")
    done = subprocess.run([dot, f"-T{'jpg' if ext == 'jpeg' else ext}", "-o", path],
                          input=text.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"plot_model: dot failed: {done.stderr.decode(errors='replace')}")
    return None
