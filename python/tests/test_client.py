"""The Python client, TRL and verl reward functions against a real `cudaperf serve`
(CPU only: NVRTC compiles for real, the GPU stages answer `unavailable`)."""

import json
import urllib.error
import urllib.request

import pytest

from cudaperf_client import (
    CudaperfClient,
    CudaperfError,
    CudaperfUnavailable,
    completion_text,
    compute_score,
    compute_score_batch,
    trl_reward,
)
import cudaperf_client.rewards as rewards_mod


def fenced(source: str) -> str:
    return f"Here is my kernel.\n\n```cuda\n{source}\n```\n"


@pytest.fixture(scope="module")
def vector_add(repo):
    d = repo / "fixtures" / "tasks" / "vector_add"
    return {
        "reference": (d / "reference.cu").read_text(),
        "float4": (d / "vectorized_float4.cu").read_text(),
        "toml": (d / "task.toml").read_text(),
    }


BROKEN = fenced(
    "// @launch vector_add grid=(ceil_div(n, 256)) block=(256)\n"
    'extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) { c[0] = undefined_name; }'
)
NO_CODE = "I would write a kernel, but here is only prose."


@pytest.fixture(scope="module")
def client(server_url):
    return CudaperfClient(server_url, timeout=300)


def test_health_tasks_and_prompt(client):
    h = client.health()
    assert h["status"] == "ok" and h["mode"] == "local"
    ids = [t["id"] for t in client.tasks()]
    assert "vector_add" in ids and "softmax_rows" in ids
    t = client.task("softmax_rows")
    assert t["kind"] == "torch2cuda"
    assert "Kernel parameters" in t["prompt"] and "@launch" in t["prompt"]


def test_results_follow_request_order_with_real_verdicts(client, vector_add):
    completions = [NO_CODE, fenced(vector_add["reference"]), BROKEN, fenced(vector_add["float4"])]
    answer = client.score("vector_add", completions, reward="cudaperf")
    results = answer["results"]
    assert [r["index"] for r in results] == [0, 1, 2, 3]
    assert results[0]["verdict"] == "extract_error" and results[0]["value"] <= -0.9
    assert results[2]["verdict"] == "compile_error" and results[2]["value"] == pytest.approx(-0.75)
    assert "undefined_name" in results[2]["reason"]
    # Compiles, but the GPU stages are off: no number is made up.
    for r in (results[1], results[3]):
        assert r["verdict"] == "unavailable" and r["value"] is None
        assert "no_gpu" in r["reason"]
        assert r["report"]["stages"]["compile"]["ok"] is True
    assert all("feedback" in r for r in results)


def test_curriculum_step_and_report_flag(client, vector_add):
    answer = client.score("vector_add", [fenced(vector_add["reference"]), BROKEN], reward="dhrcl", step=0, report=False)
    ok, broken = answer["results"]
    assert ok["verdict"] == "compiled" and ok["value"] == pytest.approx(1.0)
    assert broken["verdict"] == "compile_error" and broken["value"] < ok["value"]
    assert ok["report"] is None and answer["step"] == 0


def test_weights_change_the_reward(client):
    a = client.score("vector_add", [BROKEN], reward="cudaperf")["results"][0]["value"]
    # Syntax credit only applies below compile; a compile error keeps -0.75 either way,
    # while a missing code block gets the extract floor.
    b = client.score("vector_add", [NO_CODE], weights={"syntax_credit": 0.0})["results"][0]
    assert a == pytest.approx(-0.75)
    assert b["value"] == pytest.approx(-1.0)


def test_inline_task(client, vector_add):
    toml = "\n".join(l for l in vector_add["toml"].splitlines() if not l.startswith("implementations"))
    task = {"toml": toml, "reference": vector_add["reference"], "original": "void add(float*a,float*b,float*c,int n);"}
    answer = client.score(task, [fenced(vector_add["reference"])], reward="dhrcl", step=0)
    assert answer["task"].startswith("vector_add@")
    assert answer["results"][0]["verdict"] == "compiled"


def test_errors_name_the_field(client, server_url):
    with pytest.raises(CudaperfError) as e:
        client.score("no_such_task", ["x"])
    assert e.value.status == 404 and "unknown task `no_such_task`" in e.value.message
    with pytest.raises(CudaperfError) as e:
        client.score("vector_add", ["x"], reward="kevni")
    assert e.value.status == 400 and "cudaperf, correctness, kevin, fast_p:<p>, dhrcl" in e.value.message
    # Wrong types and malformed JSON, sent raw.
    for body, says in [(b'{"task": "vector_add", "completions": [1]}', "completions[0]"), (b"{nope", "malformed JSON")]:
        req = urllib.request.Request(server_url + "/v1/score", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as h:
            urllib.request.urlopen(req, timeout=30)
        assert h.value.code == 400
        assert says in json.loads(h.value.read())["error"]


def test_completion_text_handles_conversations():
    assert completion_text("plain") == "plain"
    conv = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "skip"}]
    assert completion_text(conv) == "a"
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "b"}, {"type": "image"}]}]
    assert completion_text(parts) == "b"


def test_trl_reward_function(client, vector_add):
    fn = trl_reward(client, reward="cudaperf", on_unavailable=-1.5, retry_for_s=0)
    prompts = ["p1", "p2", "p3", "p4"]
    completions = [
        [{"role": "assistant", "content": BROKEN}],
        NO_CODE,
        [{"role": "assistant", "content": fenced(vector_add["reference"])}],
        BROKEN,
    ]
    values = fn(prompts, completions, task_id=["vector_add", "saxpy", "vector_add", "saxpy"])
    assert fn.__name__ == "cudaperf"
    assert len(values) == 4
    assert values[0] == pytest.approx(-0.75)  # vector_add: compile error
    assert values[1] <= -0.9  # saxpy: no code block
    assert values[2] == -1.5  # compiles; no GPU: the explicit fallback, below every outcome
    assert values[3] <= -0.9  # the vector_add kernel does not fit saxpy's ABI
    strict = trl_reward(client, on_unavailable="raise")
    with pytest.raises(CudaperfUnavailable) as e:
        strict(["p"], [fenced(vector_add["reference"])], task_id=["vector_add"])
    assert e.value.results[0]["verdict"] == "unavailable"
    with pytest.raises(KeyError):
        fn(["p"], ["x"])


def test_trl_reward_reads_the_step(client, vector_add):
    class State:
        global_step = 0

    fn = trl_reward(client, reward="dhrcl")
    values = fn(["p"], [fenced(vector_add["reference"])], task_id=["vector_add"], trainer_state=State())
    assert values == [pytest.approx(1.0)]


def test_verl_compute_score(server_url, vector_add, monkeypatch):
    monkeypatch.setattr(rewards_mod, "_default_client", CudaperfClient(server_url, timeout=300))
    r = compute_score("cudaperf", BROKEN, "vector_add")
    assert r["score"] == pytest.approx(-0.75) and r["verdict"] == "compile_error"
    with pytest.raises(CudaperfUnavailable):
        compute_score("cudaperf", fenced(vector_add["reference"]), "vector_add", on_unavailable="raise")
    r = compute_score("cudaperf", fenced(vector_add["reference"]), "vector_add", extra_info={"reward": "dhrcl", "step": 0})
    assert r["score"] == pytest.approx(1.0)
    batch = compute_score_batch(["a", "b"], [BROKEN, NO_CODE], ["vector_add", "vector_add"], [None, None])
    assert [b["verdict"] for b in batch] == ["compile_error", "extract_error"]


def test_metrics_count_what_was_served(client):
    client.score("vector_add", [NO_CODE])
    text = client.metrics()
    assert "cudaperf_http_requests_total" in text
    assert 'cudaperf_completions_total{verdict="extract_error"}' in text
    assert "cudaperf_stage_duration_seconds_bucket" in text
    assert "cudaperf_queue_depth" in text


def test_verl_loads_the_entry_file_by_path(repo, server_url, monkeypatch):
    # The way verl's get_custom_reward_fn loads `custom_reward_function.path`.
    import importlib.util

    spec = importlib.util.spec_from_file_location("custom_module", repo / "python" / "verl_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(rewards_mod, "_default_client", CudaperfClient(server_url, timeout=300))
    assert module.compute_score("x", NO_CODE, "vector_add")["verdict"] == "extract_error"
