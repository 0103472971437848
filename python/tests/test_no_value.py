""""No value" under the trainers' own aggregation rules, against real servers: one that can
never score (no GPU here: the `cudaperf` preset's GPU stages answer `unavailable`), one that
starts late, one that restarts, and a queue whose node joins late.

TRL's rule, reproduced in NumPy from `trl/trainer/grpo_trainer.py`
(`_calculate_rewards`: a reward function's `None` becomes NaN;
`_generate_and_score_completions`, `multi_objective_aggregation="sum_then_normalize"`):

* TRL 1.5.0 (and earlier): `rewards = (rewards_per_func * weights).nansum(dim=1)`, then the
  group's plain mean and std: an all-NaN row becomes 0.0 and takes part in the baseline.
* TRL 1.6.0 … 1.9.0 (PR #5902): the same `nansum`, but rows whose reward functions are all
  NaN are set back to NaN, left out of `nanmean`/`nanstd`, and get advantage 0.
"""

import threading
import time

import numpy as np
import pytest

from conftest import Redis, free_port, metric, start_node, start_server, stop_server
from cudaperf_client import (
    FLOORS,
    CudaperfClient,
    CudaperfUnavailable,
    NoValuePolicy,
    trl_reward,
)
from test_client import BROKEN, NO_CODE, fenced


def trl_advantages(rewards_per_func, weights, group, version):
    """GRPO advantages as TRL computes them (scale_rewards="group")."""
    r = np.array([[np.nan if v is None else v for v in row] for row in rewards_per_func], dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    summed = np.nansum(r * w[None, :], axis=1)
    if version == "1.5":
        g = summed.reshape(-1, group)
        mean = np.repeat(g.mean(axis=1), group)
        std = np.repeat(g.std(axis=1, ddof=1), group)
        return (summed - mean) / (std + 1e-4)
    unscorable = np.isnan(r).all(axis=1)
    summed[unscorable] = np.nan
    g = summed.reshape(-1, group)
    mean = np.repeat(np.nanmean(g, axis=1), group)
    std = np.repeat(np.nanstd(g, axis=1, ddof=1), group)
    return np.nan_to_num((summed - mean) / (std + 1e-4), nan=0.0)


@pytest.fixture(scope="module")
def client(server_url):
    return CudaperfClient(server_url, timeout=300)


@pytest.fixture(scope="module")
def group(vector_add):
    # A compile error, a missing code block, and a kernel that compiles but cannot be run
    # here: the last one has no value under `cudaperf`.
    return [BROKEN, NO_CODE, fenced(vector_add["reference"])]


@pytest.fixture(scope="module")
def vector_add(repo):
    d = repo / "fixtures" / "tasks" / "vector_add"
    return {"reference": (d / "reference.cu").read_text()}


def test_a_none_would_outrank_a_compile_error_under_trl(client, group):
    # Why the adapters never return None: the server's real answers, as a None-returning
    # reward function would hand them to TRL 1.5.
    results = client.score("vector_add", group, reward="cudaperf", report=False)["results"]
    values = [r["value"] for r in results]
    assert values[0] == pytest.approx(-0.75) and values[2] is None
    adv = trl_advantages([[v] for v in values], [1.0], 3, "1.5")
    assert adv[2] > adv[0] and adv[2] > adv[1]
    # TRL >= 1.6 leaves the lone None out, but next to a second reward function it adds 0.
    length = [0.1, 0.1, 0.1]
    adv = trl_advantages([[v, l] for v, l in zip(values, length)], [1.0, 1.0], 3, "1.9")
    assert adv[2] > adv[0]


@pytest.mark.parametrize("version", ["1.5", "1.9"])
def test_the_fallback_ranks_below_every_outcome_under_trl(client, group, version):
    fn = trl_reward(client, reward="cudaperf", on_unavailable=-1.5, retry_for_s=0)
    values = fn(["p"] * 3, group, task_id=["vector_add"] * 3)
    assert values[2] == -1.5 and all(isinstance(v, float) for v in values)
    adv = trl_advantages([[v] for v in values], [1.0], 3, version)
    assert adv[2] < adv[0] and adv[2] < adv[1]
    adv = trl_advantages([[v, 0.1] for v in values], [1.0, 1.0], 3, version)
    assert adv[2] < adv[0] and adv[2] < adv[1]


def test_by_default_unscorable_is_retried_then_raised(client, server_url, group):
    before = metric(server_url, "cudaperf_http_requests_total", route="/v1/score")
    fn = trl_reward(client, reward="cudaperf", retry_for_s=1.5)
    t = time.monotonic()
    with pytest.raises(CudaperfUnavailable) as e:
        fn(["p"] * 3, group, task_id=["vector_add"] * 3)
    took = time.monotonic() - t
    assert 1.4 <= took < 15, took
    assert "1 of 3 completions could not be scored after retrying for 1.5 s" in str(e.value)
    assert "no_gpu" in e.value.results[0]["reason"]
    # The first request, then at least one retry of the unscored completion alone.
    assert metric(server_url, "cudaperf_http_requests_total", route="/v1/score") - before >= 2


@pytest.mark.parametrize("preset", sorted(FLOORS) + ["fast_p:1.5"])
def test_a_fallback_at_or_above_the_floor_is_refused(preset):
    floor = FLOORS["fast_p" if preset.startswith("fast_p") else preset]
    for bad in (floor, floor + 0.5, float("nan"), float("-inf"), True, "none"):
        with pytest.raises(ValueError):
            NoValuePolicy.of(bad, preset)
    assert NoValuePolicy.of(floor - 0.5, preset).fallback == floor - 0.5
    with pytest.raises(ValueError):
        NoValuePolicy.of("retry", "kevni")


def test_the_worst_real_outcomes_sit_at_or_above_the_floors(client, group):
    # The floors the fallback is checked against hold for the server's real values.
    for preset, step in [("cudaperf", None), ("dhrcl", 0), ("correctness", None), ("kevin", None), ("fast_p:1", None)]:
        results = client.score(
            "vector_add", group + ["", "```cuda\n}}}\n```"], reward=preset, step=step, report=False
        )["results"]
        floor = FLOORS["fast_p" if preset.startswith("fast_p") else preset]
        for r in results:
            assert r["value"] is None or r["value"] >= floor, (preset, r)


def _call_in_thread(fn, *args, **kwargs):
    out = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except Exception as e:  # handed to the test
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, out


class _State:
    global_step = 0


def test_a_server_that_starts_late_is_waited_for(vector_add):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    fn = trl_reward(CudaperfClient(url, timeout=60), reward="dhrcl", retry_for_s=60)
    t, out = _call_in_thread(
        fn, ["p", "p"], [fenced(vector_add["reference"]), BROKEN], task_id=["vector_add"] * 2, trainer_state=_State()
    )
    time.sleep(1.0)
    assert t.is_alive(), out  # still waiting: nothing listens yet
    proc, _ = start_server("--no-gpu", port=port)
    try:
        t.join(60)
        assert out.get("value") == [pytest.approx(1.0), pytest.approx(0.5)], out
    finally:
        stop_server(proc)


def test_a_server_that_restarts_is_waited_for(vector_add):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, _ = start_server("--no-gpu", port=port)
    fn = trl_reward(CudaperfClient(url, timeout=60), reward="dhrcl", retry_for_s=60)
    assert fn(["p"], [BROKEN], task_id=["vector_add"], trainer_state=_State()) == [pytest.approx(0.5)]
    stop_server(proc)
    t, out = _call_in_thread(fn, ["p"], [fenced(vector_add["reference"])], task_id=["vector_add"], trainer_state=_State())
    time.sleep(1.0)
    proc, _ = start_server("--no-gpu", port=port)
    try:
        t.join(60)
        assert out.get("value") == [pytest.approx(1.0)], out
    finally:
        stop_server(proc)


def test_a_queue_whose_node_joins_late(vector_add):
    # serve --queue with a 1 s deadline and no node yet: the first answer is `timeout`
    # (no value); the adapter asks again, a node joins, the completion is scored.
    redis = Redis()
    proc, url = start_server("--no-gpu", "--queue", redis.url, "--deadline", "1")
    node = None
    try:
        fn = trl_reward(CudaperfClient(url, timeout=60), reward="dhrcl", retry_for_s=60)
        t, out = _call_in_thread(
            fn, ["p"], [fenced(vector_add["reference"])], task_id=["vector_add"], trainer_state=_State()
        )
        deadline = time.monotonic() + 30
        while metric(url, "cudaperf_completions_total", verdict="timeout") < 1:
            assert time.monotonic() < deadline, "the first request never timed out"
            time.sleep(0.1)
        node = start_node(redis.url, "late")
        t.join(60)
        assert out.get("value") == [pytest.approx(1.0)], out
    finally:
        if node is not None:
            node.kill()
            node.wait(10)
        stop_server(proc)
        redis.stop()
