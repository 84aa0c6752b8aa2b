"""keras.metrics beyond the means: Precision, Recall, the confusion counts, AUC,
F1Score, R2Score, CategoricalAccuracy, TopKCategoricalAccuracy and MAPE as fit and
evaluate report them. Each epoch's value equals the metric computed here by brute
force from the same predictions (not a mean of batches), on one device and on a
data=2 mesh with an uneven last batch; metrics are logged by the names given."""

import numpy as np
import pytest

import autoshard.keras as keras
from autoshard.keras.distribution import DataParallel, DeviceMesh, set_distribution

RNG = np.random.default_rng(4)
X = RNG.standard_normal((23, 6)).astype("float32")
Y = (RNG.random((23, 1)) < 0.4).astype("float32")


def _binary_model():
    keras.utils.set_random_seed(2)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1, activation="sigmoid", name="o")])
    return m


def _brute(p, y, threshold=0.5):
    pos = p > threshold
    tp = float(np.sum(pos & (y > 0)))
    fp = float(np.sum(pos & (y == 0)))
    fn = float(np.sum(~pos & (y > 0)))
    tn = float(np.sum(~pos & (y == 0)))
    return tp, fp, tn, fn


def _roc_auc(p, y, n=200):
    thresholds = [-1e-7] + [i / (n - 1) for i in range(1, n - 1)] + [1 + 1e-7]
    tpr, fpr = [], []
    for t in thresholds:
        tp, fp, tn, fn = _brute(p, y, t)
        tpr.append(tp / (tp + fn) if tp + fn else 0.0)
        fpr.append(fp / (fp + tn) if fp + tn else 0.0)
    return sum((fpr[i] - fpr[i + 1]) * (tpr[i] + tpr[i + 1]) / 2 for i in range(n - 1))


@pytest.mark.parametrize("mesh", [None, 2], ids=["one-device", "data=2"])
def test_evaluate_reports_the_whole_sets_confusion_metrics(mesh):
    if mesh:
        set_distribution(DataParallel(DeviceMesh((mesh,), ("data",))))
    try:
        m = _binary_model()
        m.compile("sgd", "binary_crossentropy",
                  metrics=[keras.metrics.Precision(), keras.metrics.Recall(name="rec"),
                           keras.metrics.TruePositives(), keras.metrics.FalseNegatives(),
                           keras.metrics.AUC(), "acc"])
        logs = m.evaluate(X, Y, batch_size=5, verbose=0, return_dict=True)
        p = m.predict(X, batch_size=5, verbose=0)
    finally:
        set_distribution(None)
    tp, fp, tn, fn = _brute(p, Y)
    assert logs["precision"] == pytest.approx(tp / (tp + fp) if tp + fp else 0.0, abs=1e-9)
    assert logs["rec"] == pytest.approx(tp / (tp + fn), abs=1e-9)
    assert logs["true_positives"] == tp and logs["false_negatives"] == fn
    assert logs["auc"] == pytest.approx(_roc_auc(p, Y), abs=1e-9)
    assert logs["acc"] == pytest.approx((tp + tn) / len(Y), abs=1e-9)


def test_fit_logs_the_names_given_and_sharded_equals_one_device():
    def run(distribution):
        set_distribution(distribution)
        try:
            m = _binary_model()
            m.compile("sgd", "binary_crossentropy", metrics=["acc", keras.metrics.AUC(name="a")])
            return m.fit(X, Y, batch_size=5, epochs=2, verbose=0, shuffle=False,
                         validation_split=0.3).history
        finally:
            set_distribution(None)

    one = run(None)
    assert {"loss", "acc", "a", "val_loss", "val_acc", "val_a"} <= set(one)
    two = run(DataParallel(DeviceMesh((2,), ("data",))))
    for key in one:
        np.testing.assert_allclose(one[key], two[key], rtol=1e-5, atol=1e-7)


def test_multiclass_and_regression_metrics_against_numpy():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((17, 5)).astype("float32")
    labels = rng.integers(0, 4, 17)
    onehot = keras.utils.to_categorical(labels, 4).astype("float32")
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="softmax")])
    m.compile("sgd", "categorical_crossentropy",
              metrics=[keras.metrics.CategoricalAccuracy(), keras.metrics.TopKCategoricalAccuracy(2),
                       keras.metrics.F1Score(average="macro")])
    logs = m.evaluate(x, onehot, batch_size=4, verbose=0, return_dict=True)
    p = m.predict(x, verbose=0)
    assert logs["categorical_accuracy"] == pytest.approx(np.mean(p.argmax(1) == labels))
    top2 = np.argsort(-p, axis=1)[:, :2]
    assert logs["top_k_categorical_accuracy"] == pytest.approx(
        np.mean([labels[i] in top2[i] for i in range(17)]))
    chosen = p.argmax(1)
    f1s = []
    for c in range(4):
        tp = np.sum((chosen == c) & (labels == c))
        fp = np.sum((chosen == c) & (labels != c))
        fn = np.sum((chosen != c) & (labels == c))
        prec, rec = tp / (tp + fp + 1e-7), tp / (tp + fn + 1e-7)
        f1s.append(2 * prec * rec / (prec + rec + 1e-7))
    assert logs["f1_score"] == pytest.approx(np.mean(f1s), abs=1e-6)

    y = rng.standard_normal((17, 2)).astype("float32") + 3
    r = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
    r.compile("sgd", "mse", metrics=[keras.metrics.R2Score(), "mape"])
    logs = r.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    q = r.predict(x, verbose=0)
    r2 = 1 - ((y - q) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)
    assert logs["r2_score"] == pytest.approx(r2.mean(), rel=1e-4)
    assert logs["mape"] == pytest.approx(np.mean(100 * np.abs(y - q) / np.abs(y)), rel=1e-4)


@pytest.mark.parametrize("make, message", [
    (lambda: keras.metrics.F1Score(), "average=None is not supported"),
    (lambda: keras.metrics.Precision(thresholds=[0.3, 0.6]), "give one threshold, not 2"),
    (lambda: keras.metrics.AUC(curve="PRGAIN"), "curve must be 'ROC' or 'PR'"),
    (lambda: keras.metrics.R2Score(class_aggregation=None), "class_aggregation must be"),
    (lambda: keras.metrics.Recall(thresholds=2.0), "thresholds must be"),
])
def test_unsupported_arguments_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_saved_model_with_these_metrics_loads_and_reports_them(tmp_path):
    m = _binary_model()
    m.compile("sgd", "binary_crossentropy",
              metrics=[keras.metrics.AUC(), keras.metrics.Precision(), keras.metrics.R2Score()])
    path = str(tmp_path / "m.keras")
    m.save(path)
    want = m.evaluate(X, Y, batch_size=5, verbose=0, return_dict=True)
    got = keras.models.load_model(path).evaluate(X, Y, batch_size=5, verbose=0, return_dict=True)
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-9)
