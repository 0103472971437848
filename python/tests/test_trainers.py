"""The adapters called the way the trainers call them, against a real server: verl's batch
reward manager and async reward loop, TRL's async reward functions, the async client,
the 413 answer, and the multi-turn paths (TRL environment, verl tool sessions).

verl's calling conventions are those of volcengine/verl at b178a3c (2026-01-29):
`verl/workers/reward_manager/batch.py` (`BatchRewardManager.verify` calls
`compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`
with one `extra_info` per item and reads each result's `score`, gathering every key of the
dicts into a column) and `verl/experimental/reward_loop/reward_manager/naive.py` (one
`await compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` per sample,
the samples of a batch run concurrently)."""

import asyncio
import inspect
import json
import urllib.request

import pytest

import cudaperf_client.rewards as rewards_mod
from conftest import metric, start_server, stop_server
from cudaperf_client import (
    AsyncCudaperfClient,
    CudaperfClient,
    CudaperfError,
    KernelEnvironment,
    KernelToolSessions,
    compute_score_async,
    compute_score_batch,
    trl_reward_async,
)
from test_client import BROKEN, NO_CODE, fenced


@pytest.fixture(scope="module")
def reference(repo):
    return (repo / "fixtures" / "tasks" / "vector_add" / "reference.cu").read_text()


def score_requests(url):
    return metric(url, "cudaperf_http_requests_total", route="/v1/score")


def test_verl_batch_manager_one_request_per_group_with_per_item_settings(server_url, reference, monkeypatch):
    monkeypatch.setattr(rewards_mod, "_default_client", CudaperfClient(server_url, timeout=300))
    good = fenced(reference)
    # Two GRPO groups of 3 in one verl batch, each item's extra_info its own: the first
    # group at step 0 of the dhrcl curriculum, the second asks for `correctness`.
    solutions = [good, BROKEN, NO_CODE, BROKEN, NO_CODE, BROKEN]
    ground_truths = ["vector_add"] * 3 + ["saxpy"] * 3
    extra_infos = [{"index": i, "reward": "dhrcl", "step": 0} for i in range(3)] + [
        {"index": i, "reward": "correctness"} for i in range(3, 6)
    ]
    before = score_requests(server_url)
    # As verl's BatchRewardManager.verify calls it (reward_kwargs from the config).
    scores = compute_score_batch(
        data_sources=["cudaperf"] * 6,
        solution_strs=solutions,
        ground_truths=ground_truths,
        extra_infos=extra_infos,
        retry_for_s=0,
    )
    assert score_requests(server_url) - before == 2  # one request per group
    assert [s["verdict"] for s in scores] == [
        "compiled", "compile_error", "extract_error", "extract_error", "extract_error", "extract_error"
    ]
    assert [s["score"] for s in scores[:3]] == [pytest.approx(1.0), pytest.approx(0.5), pytest.approx(0.0)]
    assert [s["score"] for s in scores[3:]] == [0.0, 0.0, 0.0]
    # verl gathers each key of the dicts into one column: the same keys everywhere.
    assert len({tuple(sorted(s)) for s in scores}) == 1
    # A step-dependent reward with no step anywhere is refused, not run at step 0.
    with pytest.raises(ValueError, match="extra_info"):
        compute_score_batch(["d"], [good], ["vector_add"], [{"reward": "dhrcl"}])


def test_verl_async_reward_loop_sends_a_group_as_one_request(server_url, reference, monkeypatch):
    monkeypatch.setenv("CUDAPERF_URL", server_url)
    assert inspect.iscoroutinefunction(compute_score_async)  # how verl's reward loop tells
    good = fenced(reference)
    before = score_requests(server_url)

    async def reward_loop():
        # As verl's NaiveRewardManager.run_single: one call per sample, all at once.
        calls = [
            compute_score_async(
                data_source="cudaperf",
                solution_str=s,
                ground_truth="vector_add",
                extra_info={"step": 0, "reward": "dhrcl"},
                with_feedback=True,
            )
            for s in [good, BROKEN, NO_CODE, good]
        ]
        out = await asyncio.gather(*calls)
        await rewards_mod._coalescers[asyncio.get_running_loop()].client.close()
        return out

    results = asyncio.run(reward_loop())
    assert score_requests(server_url) - before == 1
    assert [r["score"] for r in results] == [1.0, 0.5, 0.0, 1.0]
    assert "undefined_name" in results[1]["feedback"]


def test_trl_async_reward_and_async_client(server_url, reference):
    async def run():
        async with AsyncCudaperfClient(server_url, timeout=300) as client:
            health = await client.health()
            assert health["status"] == "ok" and health["limits"]["max_body_bytes"] > 0
            assert "vector_add" in [t["id"] for t in await client.tasks()]
            fn = trl_reward_async(client, reward="dhrcl")
            assert inspect.iscoroutinefunction(fn)  # TRL runs it on its event loop

            class State:
                global_step = 0

            values = await fn(
                ["p", "p", "p"],
                [fenced(reference), [{"role": "assistant", "content": BROKEN}], NO_CODE],
                task_id=["vector_add", "vector_add", "saxpy"],
                trainer_state=State(),
            )
            with pytest.raises(CudaperfError) as e:
                await client.score("no_such_task", ["x"])
            assert e.value.status == 404
            return values

    assert asyncio.run(run()) == [1.0, 0.5, 0.0]


def test_a_body_over_the_limit_says_413_not_broken_pipe():
    proc, url = start_server("--no-gpu", "--max-body-bytes", "4096")
    try:
        # Large enough that the server answers before the client has sent it all (which
        # the client used to report as "Broken pipe").
        big = ["x" * 8_000_000]
        with pytest.raises(CudaperfError) as e:
            CudaperfClient(url, timeout=30).score("vector_add", big)
        assert e.value.status == 413
        assert "limit of 4096 bytes" in e.value.message and "8000" in e.value.message

        async def run():
            async with AsyncCudaperfClient(url, timeout=30) as client:
                await client.score("vector_add", big)

        with pytest.raises(CudaperfError) as e:
            asyncio.run(run())
        assert e.value.status == 413 and "limit of 4096 bytes" in e.value.message
        # A small body over the limit is answered 413 by the server itself.
        with pytest.raises(CudaperfError) as e:
            CudaperfClient(url, timeout=30).score("vector_add", ["y" * 5000])
        assert e.value.status == 413
    finally:
        stop_server(proc)


def test_trl_multi_turn_environment(server_url, reference):
    env = KernelEnvironment(CudaperfClient(server_url, timeout=300), reward="dhrcl", step=lambda: 0)
    # TRL exposes the public methods other than reset/get_reward as tools, with their
    # type hints and docstring's Args.
    tools = [m for m in dir(env) if not m.startswith("_") and callable(getattr(env, m))]
    assert sorted(tools) == ["get_reward", "reset", "submit_kernel"]
    sig = inspect.signature(env.submit_kernel)
    assert sig.parameters["code"].annotation in (str, "str") and "code:" in env.submit_kernel.__doc__
    assert env.reset(task_id="vector_add", prompt="...") is None
    first = env.submit_kernel(BROKEN.split("```cuda\n")[1].split("```")[0])  # bare source
    assert first.startswith("Verdict: compile_error; reward 0.500")
    assert "undefined_name" in first  # the compiler's message, for the next turn
    second = env.submit_kernel(fenced(reference))
    assert second.startswith("Verdict: compiled; reward 1.000")
    assert env.get_reward() == 1.0
    env.reset(task_id="vector_add")
    assert env.get_reward() == 0.0  # never submitted: a completion without code


def test_verl_multi_turn_tool_sessions(server_url, reference):
    async def run():
        async with AsyncCudaperfClient(server_url, timeout=300) as client:
            tool = KernelToolSessions(client, reward="dhrcl")
            await tool.create("r1", task_id="vector_add", step=0)
            text, step_reward, metrics = await tool.execute("r1", {"code": BROKEN})
            assert text.startswith("Verdict: compile_error") and "undefined_name" in text
            assert step_reward == pytest.approx(0.5) and metrics["attempt"] == 1
            text, step_reward, metrics = await tool.execute("r1", {"code": fenced(reference)})
            assert step_reward == pytest.approx(0.5) and metrics["verdict"] == "compiled"
            assert await tool.calc_reward("r1") == 1.0
            bad = await tool.execute("r1", {"source": "x"})
            assert "`code`" in bad[0] and bad[1] == 0.0
            await tool.release("r1")
            with pytest.raises(ValueError):
                await tool.create("r2", task_id="vector_add")  # dhrcl without a step

    asyncio.run(run())


def test_healthz_and_reward_names_as_asked(server_url):
    h = json.loads(urllib.request.urlopen(server_url + "/healthz", timeout=30).read())
    assert h["limits"]["max_completions"] >= 1
    answer = CudaperfClient(server_url).score("vector_add", [NO_CODE], reward="dhrcl", step=0)
    assert answer["reward"] == "dhrcl"
    assert answer["results"][0]["report"]["reward"] == "dhrcl"


def test_64_async_clients_lose_nothing(server_url):
    # The load script, briefly, against the test server (a debug build: the rate is not
    # checked here; README's "Load" has the release figures).
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("load_async", rewards_mod.__file__.replace(
        "cudaperf_client/rewards.py", "bench/load_async.py"))
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    args = argparse.Namespace(
        url=server_url, clients=64, seconds=3.0, requests=1_000_000, group=8, reward="cudaperf",
        report=False, interval=0.0,
    )
    assert asyncio.run(load.run(args)) == 0
