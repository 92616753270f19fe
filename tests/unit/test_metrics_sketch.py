"""The sketch: quantiles within 2 % of the exact order statistic, exact merges, a JSON form that round-trips."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from srm.metrics.model.schema import SketchData
from srm.metrics.model.sketch import ALPHA, Sketch

values = st.lists(st.floats(min_value=1.0, max_value=1e7, allow_nan=False), min_size=1, max_size=300)
with_small = st.lists(
    st.one_of(st.integers(min_value=-50, max_value=0).map(float), st.floats(min_value=1.0, max_value=1e6)),
    min_size=1,
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(values, st.sampled_from([0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]))
def test_quantile_within_alpha_of_numpy(samples: list[float], q: float) -> None:
    exact = float(np.quantile(np.array(samples), q, method="lower"))
    assert abs(Sketch.of(samples).quantile(q) - exact) <= ALPHA * exact * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(with_small)
def test_values_below_one_ms_go_to_the_zero_bucket_and_min_max_stay_exact(samples: list[float]) -> None:
    sketch = Sketch.of(samples)
    assert (sketch.n, sketch.min, sketch.max) == (len(samples), min(samples), max(samples))
    assert sketch.zero == sum(1 for x in samples if x < 1)
    median = float(np.quantile(np.array(samples), 0.5, method="lower"))
    got = sketch.quantile(0.5)
    assert got is not None
    if median < 1:
        assert got == min(max(0.0, sketch.min), sketch.max)  # the zero bucket stands for 0, within [min, max]
    else:
        assert abs(got - median) <= ALPHA * median * (1 + 1e-9)


@settings(max_examples=100, deadline=None)
@given(values, values, values)
def test_merge_is_associative_commutative_and_equals_the_sketch_of_the_union(
    a: list[float], b: list[float], c: list[float]
) -> None:
    left = Sketch.of(a).merge(Sketch.of(b)).merge(Sketch.of(c))
    right = Sketch.of(a).merge(Sketch.of(c).merge(Sketch.of(b)))
    union = Sketch.of(a + b + c)
    for sketch in (left, right):
        assert (sketch.n, sketch.min, sketch.max, sketch.zero, sketch.buckets) == (
            union.n,
            union.min,
            union.max,
            union.zero,
            union.buckets,
        )
        assert abs(sketch.sum - union.sum) <= 1e-9 * abs(union.sum)


@given(with_small)
def test_json_form_round_trips_through_the_schema(samples: list[float]) -> None:
    sketch = Sketch.of(samples)
    assert SketchData.of(sketch).sketch() == sketch
