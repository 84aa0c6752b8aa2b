"""autoshard.plan: the C++ planner's report from Python, equal to `autoshard plan --json`."""

import json
import os
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

import autoshard
import autoshard.keras as keras
from autoshard.keras.distribution import DeviceMesh

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("AUTOSHARD_CLI", os.path.join(REPO, "build", "autoshard"))
# A cluster preset whose figures do not depend on this machine's load or free
# memory, so that the CLI and Python pose the same problem.
CLUSTER = "a100-80g"
# The comparisons with the CLI count the solver's limits in work, not seconds
# (--deterministic): two processes on a busy machine otherwise get different
# time to plan, and can choose different meshes (a CI run did).


def cli_plan(*args):
    out = subprocess.run([CLI, "plan", "--json", "--predict", "--deterministic", "--cluster",
                          CLUSTER, *args],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def mlp():
    model = keras.Sequential([keras.Input((16,)),
                              keras.layers.Dense(64, activation="relu", name="dense"),
                              keras.layers.Dense(10, name="dense_1")])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("where", [("--devices", "4"), ("--mesh", "data=2,model=2")])
def test_language_model_plan_equals_the_cli(where):
    mesh_or_devices = 4 if where[0] == "--devices" else DeviceMesh((2, 2), ("data", "model"))
    p = autoshard.plan("test", mesh_or_devices, batch=8, cluster=CLUSTER, deterministic=True)
    want = cli_plan("--model", "test", "--batch", "8", *where)
    # Both price pipelines for a device count (the plan without a pipe axis
    # won here): their lines are among the reasons.
    piped = [r for r in want.get("reasons", []) if r.startswith("pipeline ")]
    assert (where[0] == "--devices") == bool(piped)
    assert p.pipeline is None and p.stage_plan is None
    assert p.to_dict() == want  # every key: layouts, collectives, memory, reasons, prediction
    assert p.layouts == {k: tuple(v["layout"]) for k, v in want["parameters"].items()}
    assert p.step_time == want["predicted"]["step_s"]
    assert p.memory_per_device == want["bytes_per_device"]
    assert p.explanation == want["reasons"]
    assert p.mesh == want["mesh"]


# A cluster whose links are so slow that splitting a step's values over a data
# or model axis costs more than sending one micro-batch's activations between
# two stages (cli_test.cc's TrainDevicesChoosesAPipelineWhereOneIsPredictedFaster).
SLOW_LINKS = {"name": "slow",
              "device": {"flops": {"f32": 50e9}, "gemm_efficiency": [[1e9, 0.8]],
                         "memory_bytes": 8589934592, "memory_bandwidth": 2e10},
              "shared_cores": 0,
              "links": [{"name": "slow", "devices_per_group": 0, "bandwidth": 1e8,
                         "latency_s": 1e-5}]}


def test_devices_choose_a_pipeline_where_one_is_faster(tmp_path):
    cluster = tmp_path / "slow.json"
    cluster.write_text(json.dumps(SLOW_LINKS))
    args = ["--model", "mini", "--batch", "8", "--seq", "32"]
    p = autoshard.plan("mini", 2, batch=8, seq=32, cluster=str(cluster), deterministic=True)
    out = subprocess.run([CLI, "plan", "--json", "--predict", "--deterministic", "--cluster",
                          str(cluster), *args, "--devices", "2"], capture_output=True, text=True,
                         timeout=60, check=True)
    want = json.loads(out.stdout)
    assert p.to_dict() == want  # the same pipeline, prediction and reasons
    assert p.mesh == {"data": 1, "pipe": 2, "model": 1}
    assert p.pipeline["stages"] == 2 and p.pipeline["microbatches"] == 8
    assert [s["layer_count"] for s in p.pipeline["per_stage"]] == [2, 2]  # mini's 4 blocks
    assert p.step_time == want["predicted"]["step_s"]
    assert p.memory_per_device["total"] == want["predicted"]["peak_bytes_per_device"]
    assert p.layouts == {} and p.collectives == []
    # Faster than the best plan without a pipe axis, planned on its own.
    unpiped = p.explanation[-1]
    assert unpiped.startswith("without a pipe axis: ")
    mesh = dict(a.split("=") for a in unpiped.split()[4].split(","))
    alone = autoshard.plan("mini", DeviceMesh(tuple(int(n) for n in mesh.values()),
                                              tuple(mesh)), batch=8, seq=32, cluster=str(cluster))
    assert p.step_time < alone.step_time
    assert "a pipeline" in repr(p) and "1f1b, 2 stages, 8 micro-batches" in repr(p)
    assert p._repr_html_() is None
    # On this machine's own cluster the plan without a pipe axis is faster.
    assert autoshard.plan("mini", 2, batch=8, seq=32).pipeline is None


def test_keras_model_plan():
    model = mlp()
    p = autoshard.plan(model, DeviceMesh((2, 2), ("data", "model")), batch=32, cluster=CLUSTER)
    assert set(p.layouts) == {"dense.kernel", "dense.bias", "dense_1.kernel", "dense_1.bias"}
    assert p.shapes["dense.kernel"] == (16, 64)
    assert all(len(p.layouts[k]) == len(p.shapes[k]) for k in p.layouts)
    assert all(a in (None, "data", "model") for v in p.layouts.values() for a in v)
    assert p.step_time > 0
    m = p.memory_per_device
    assert m["total"] == m["weights"] + m["optimizer_state"] + m["activations"] > 0
    assert p.explanation and p.explanation[0].startswith("predicted")
    assert p.mesh == {"data": 2, "model": 2}
    # Devices: AutoShard chooses the mesh (of 4 devices).
    chosen = autoshard.plan(model, 4, batch=32, cluster=CLUSTER)
    assert np.prod(list(chosen.mesh.values())) == 4
    assert any(r.startswith("mesh ") for r in chosen.explanation)


def test_planning_leaves_the_model_as_it_was():
    x = np.random.default_rng(0).normal(size=(32, 16)).astype(np.float32)
    y = np.arange(32) % 10
    a, b = mlp(), mlp()
    autoshard.plan(a, 4, batch=32, cluster=CLUSTER)
    b.set_weights(a.get_weights())
    assert a.train_on_batch(x, y) == b.train_on_batch(x, y)  # still one device, same numbers
    np.testing.assert_array_equal(a.predict(x), b.predict(x))


def test_plan_prices_sparse_and_dense_targets():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    assert autoshard.plan(model, 2, batch=4, cluster=CLUSTER).step_time > 0


class Checker(HTMLParser):
    """Checks that every tag opened is closed in order (no void tags are used)."""

    def __init__(self):
        super().__init__()
        self.stack, self.cells = [], []

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"</{tag}> closes nothing open"

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "td":
            self.cells.append(data)


def test_html_is_well_formed_and_escaped():
    inputs = keras.Input((16,))
    outputs = keras.layers.Dense(10, name="a<b>&c")(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("adam", "mse")
    p = autoshard.plan(model, 2, batch=8, cluster=CLUSTER)
    page = p._repr_html_()
    assert "a<b>" not in page and "a&lt;b&gt;&amp;c.kernel" in page
    checker = Checker()
    checker.feed(page)
    checker.close()
    assert checker.stack == []
    assert "a<b>&c.kernel" in checker.cells  # the parser unescapes it back
    text = repr(p)
    assert "a<b>&c.kernel" in text and "why (AutoShard)" in text


def test_bad_arguments_raise_value_error():
    model = mlp()
    for bad in (0, -2, "data=2", 2.0, True, None):
        with pytest.raises(ValueError, match="DeviceMesh or a number of devices|at least 1"):
            autoshard.plan(model, bad, batch=8)
    with pytest.raises(ValueError, match="no axis 'batch'"):
        autoshard.plan(model, DeviceMesh((2,), ("model",)), batch=8, batch_dim_name="batch")
    with pytest.raises(ValueError, match="batch"):
        autoshard.plan(model, 2, batch=0)
    with pytest.raises(ValueError, match="dtype"):
        autoshard.plan(model, 2, batch=8, dtype="float16")
    with pytest.raises(ValueError, match="memory_per_device"):
        autoshard.plan(model, 2, batch=8, memory_per_device="lots")
    with pytest.raises(ValueError, match="fit"):
        autoshard.plan(model, 2, batch=8, cluster=CLUSTER, memory_per_device="1KiB")
    uncompiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="compile"):
        autoshard.plan(uncompiled, 2, batch=8)


def stub_names(path):
    """Top-level names of a .pyi, and each class's members: {name: set or None}."""
    import ast

    tree = ast.parse(open(path).read())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name if not isinstance(n, ast.AnnAssign) else n.target.id
                                for n in node.body
                                if isinstance(n, (ast.FunctionDef, ast.AnnAssign))}
        elif isinstance(node, ast.FunctionDef) and node.name != "__getattr__":
            names[node.name] = None
    return names


def test_stubs_name_what_exists():
    import inspect

    import sys

    from autoshard import _native, tensor_parallel

    plan_module = sys.modules["autoshard.plan"]

    package = os.path.dirname(autoshard.__file__)
    for stub, module in (("_native.pyi", _native), ("plan.pyi", plan_module),
                         ("tensor_parallel.pyi", tensor_parallel)):
        for name, members in stub_names(os.path.join(package, stub)).items():
            assert hasattr(module, name), f"{stub}: {name} is not in {module.__name__}"
            for m in members or ():
                if m.startswith("__") or m in ("_repr_html_",):
                    continue
                owner = getattr(module, name)
                if not hasattr(owner, m):  # instance attributes set in __init__
                    assert m in inspect.getsource(owner), f"{stub}: {name}.{m} does not exist"
    # The functions' parameters as the stubs give them.
    assert list(inspect.signature(autoshard.plan).parameters) == [
        "model", "mesh_or_devices", "batch", "cluster", "dtype", "memory_per_device", "seq",
        "plan_time", "deterministic", "batch_dim_name", "seed"]
    assert "plan_keras" in _native.plan_keras.__doc__ and "plan_language_model" in dir(_native)
