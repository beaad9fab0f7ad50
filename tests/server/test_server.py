"""`kascade serve` through the real `openai` client and raw HTTP.

Started by scripts/test.sh (phase "server tests") with the venv it makes:
    build/server-venv/bin/python -m pytest tests/server/test_server.py
Needs build/kascade and the default model (~/.cache/kascade/models/). Each
server runs on 127.0.0.1 with a port the kernel picks (--port 0). Prompts are
short and completions a few tokens, so the whole file takes about two
minutes on two cores.
"""

import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import openai
import pytest
from openai import OpenAI

ROOT = Path(__file__).resolve().parents[2]
KASCADE = Path(os.environ.get("KASCADE_BINARY", ROOT / "build" / "kascade"))
CACHE = Path(os.environ.get("KASCADE_CACHE", Path.home() / ".cache" / "kascade"))
MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"

pytestmark = pytest.mark.skipif(not MODEL.exists() or not KASCADE.exists(),
                                reason=f"needs {KASCADE} and {MODEL}")


class Server:
    """A `kascade serve` process on a free port."""

    def __init__(self, *args):
        self.api_key = args[args.index("--api-key") + 1] if "--api-key" in args else None
        self.process = subprocess.Popen(
            [str(KASCADE), "serve", "-m", str(MODEL), "--port", "0", "--threads", "2", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 120
        self.port = None
        while self.port is None:
            line = self.process.stderr.readline()
            if not line:
                raise RuntimeError("kascade serve exited: " + "".join(self.log))
            self.log.append(line)
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if match:
                self.port = int(match.group(1))
            if time.time() > deadline:
                raise RuntimeError("kascade serve did not start")
        # Keep reading stderr so that the pipe never fills.
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, **kwargs):
        kwargs.setdefault("api_key", "unused")
        return OpenAI(base_url=self.url + "/v1", max_retries=0, timeout=300, **kwargs)

    def request(self, method, path, body=None, headers=None):
        """(status, headers, body bytes) of one raw HTTP request."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        connection.close()
        return response.status, dict(response.getheaders()), data

    def metrics(self):
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        status, _, body = self.request("GET", "/metrics", headers=headers)
        assert status == 200
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def rss(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def wait_idle(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.metrics()
            if m["kascade_running_requests"] == 0 and m["kascade_queue_depth"] == 0:
                return m
            time.sleep(0.1)
        raise AssertionError("the server did not become idle")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            return self.process.wait(timeout=60)
        return self.process.returncode


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "16", "--max-queue", "64", "--ctx-size", "1024", "--max-body", "1048576", "-q")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def small_server():
    """One request at a time, one waiting, an API key: for 401, 503 and SIGTERM."""
    s = Server("--parallel", "1", "--max-queue", "1", "--ctx-size", "512", "--api-key", "sekret",
               "--shutdown-grace", "30", "-q")
    yield s
    s.stop()


def generate(prompt, *args):
    """`kascade generate`'s text and summary line for the same request."""
    done = subprocess.run([str(KASCADE), "generate", "-m", str(MODEL), "--threads", "2", "-p", prompt, *args],
                          capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.endswith("\n")
    return done.stdout[:-1], done.stderr


def prompt_tokens_of(summary):
    return int(re.search(r"prompt (\d+) tokens", summary).group(1))


CHAT_CASES = [
    ("Why is the sky blue?", "dense", 20),
    ("Name a famous painter.", "kascade", 16),
    ("What is 7 times 6?", "dense", 12),
    ("Write a haiku about the sea.", "kascade", 18),
]


@pytest.fixture(scope="module")
def expected_chat():
    return {(p, a, n): generate(p, "-n", str(n), "--attention", a) for p, a, n in CHAT_CASES}


def chat(client, prompt, attention, n, **kwargs):
    return client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=n, temperature=0,
        extra_body={"kascade": {"attention": attention}}, **kwargs)


def test_health_and_models(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL_ID]


def test_chat_equals_generate_with_usage(server, expected_chat):
    prompt, attention, n = CHAT_CASES[0]
    text, summary = expected_chat[(prompt, attention, n)]
    response = chat(server.client(), prompt, attention, n)
    assert response.choices[0].message.role == "assistant"
    assert response.choices[0].message.content == text
    assert response.choices[0].finish_reason == "length"
    assert response.usage.prompt_tokens == prompt_tokens_of(summary)
    assert response.usage.completion_tokens == n
    assert response.usage.total_tokens == response.usage.prompt_tokens + n
    assert response.model == MODEL_ID


def test_kascade_per_request(server, expected_chat):
    prompt, attention, n = CHAT_CASES[1]
    response = chat(server.client(), prompt, attention, n)
    assert response.choices[0].message.content == expected_chat[(prompt, attention, n)][0]
    assert response.model_extra["kascade"]["attention"] == "kascade"


def test_kascade_budget_per_request(server):
    """The extra field's budget, min_k and sparse_from reach the attention: the answer
    equals `kascade generate` with the same flags, and differs from the one
    with another budget (so a budget that was dropped would fail here)."""
    haystack = (ROOT / "data" / "haystack" / "haystack.txt").read_text()
    prompt = haystack[haystack.index("In the beginning"):][:1300] + " In summary,"
    # A prompt this short attends densely at the engine's break-even: sparse_from 0 makes it sparse.
    sparse = ("--raw", "-n", "16", "--attention", "kascade", "--min-k", "16", "--sparse-from", "0")
    text, summary = generate(prompt, *sparse, "--budget", "5")
    other, _ = generate(prompt, *sparse, "--budget", "10")
    assert text != other, "pick a prompt on which the budget changes the answer"
    response = server.client().completions.create(
        model=MODEL_ID, prompt=prompt, max_tokens=16, temperature=0,
        extra_body={"kascade": {"attention": "kascade", "budget": 5, "min_k": 16, "sparse_from": 0}})
    assert response.choices[0].text == text
    assert response.usage.prompt_tokens == prompt_tokens_of(summary)
    assert response.model_extra["kascade"]["attention"] == "kascade"


def test_metrics(server):
    """Prometheus text with requests, tokens, queue depth, prefill/decode
    tok/s and KV memory in use; the counters move with a request."""
    status, headers, body = server.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    for name in ("kascade_requests_total", "kascade_queue_depth", "kascade_running_requests",
                 "kascade_prompt_tokens_total", "kascade_generated_tokens_total",
                 "kascade_prefill_tokens_per_second", "kascade_decode_tokens_per_second",
                 "kascade_kv_tokens_used", "kascade_kv_tokens_total"):
        assert f"# TYPE {name} " in text, name
    before = server.wait_idle()
    response = server.client().completions.create(model=MODEL_ID, prompt="One, two, three,", max_tokens=6,
                                                  temperature=0)
    after = server.wait_idle()
    finished = 'kascade_requests_total{outcome="finished"}'
    assert after[finished] == before[finished] + 1
    assert after["kascade_generated_tokens_total"] - before["kascade_generated_tokens_total"] == \
        response.usage.completion_tokens
    assert after["kascade_prompt_tokens_total"] - before["kascade_prompt_tokens_total"] == \
        response.usage.prompt_tokens
    assert after["kascade_prefill_tokens_per_second"] > 0 and after["kascade_decode_tokens_per_second"] > 0
    assert after["kascade_kv_tokens_total"] >= 16 * 1024 and after["kascade_kv_tokens_used"] == 0
    assert after['kascade_http_requests_total{path="/v1/completions",status="200"}'] >= 1


def test_completion_equals_generate(server):
    prompt = "The three primary colours are"
    text, summary = generate(prompt, "--raw", "-n", "12")
    response = server.client().completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0)
    assert response.choices[0].text == text
    assert response.usage.prompt_tokens == prompt_tokens_of(summary)
    assert response.usage.completion_tokens == 12


def test_streaming_equals_non_streaming(server):
    client = server.client()
    prompt, attention, n = CHAT_CASES[2]
    whole = chat(client, prompt, attention, n).choices[0].message.content
    pieces, finish, usage, roles = [], None, None, 0
    for chunk in chat(client, prompt, attention, n, stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            roles += choice.delta.role == "assistant"
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(pieces) == whole
    assert roles == 1 and finish == "length"
    assert usage.completion_tokens == n
    # Completions stream too.
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt="Once upon a time", max_tokens=10, temperature=0, stream=True) if c.choices)
    assert text == client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=10,
                                             temperature=0).choices[0].text


def test_stop_strings(server):
    prompt = "The days of the week are Monday, Tuesday,"
    full, _ = generate(prompt, "--raw", "-n", "20")
    assert "Friday" in full  # else the stop string below would not be tested
    text, _ = generate(prompt, "--raw", "-n", "20", "--stop", "Friday")
    assert text == full[:full.index("Friday")]
    client = server.client()
    response = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=20, temperature=0,
                                         stop=["Friday", "no such text"])
    assert response.choices[0].text == text
    assert response.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt=prompt, max_tokens=20, temperature=0, stop="Friday", stream=True) if c.choices)
    assert streamed == text


def test_ignore_eos_runs_to_max_tokens(server):
    client = server.client()
    messages = [{"role": "user", "content": "Say just the word yes."}]
    short = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=24, temperature=0)
    assert short.choices[0].finish_reason == "stop" and short.usage.completion_tokens < 24
    full = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=24, temperature=0,
                                          extra_body={"ignore_eos": True})
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 24
    assert full.choices[0].message.content.startswith(short.choices[0].message.content)
    completion = client.completions.create(model=MODEL_ID, prompt="The end.", max_tokens=30, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert completion.usage.completion_tokens == 30


def test_seeded_sampling_is_reproducible(server):
    client = server.client()
    kwargs = dict(model=MODEL_ID, prompt="My favourite animal is", max_tokens=12, temperature=0.9, top_p=0.95,
                  seed=1234, extra_body={"top_k": 40})
    first = client.completions.create(**kwargs).choices[0].text
    assert client.completions.create(**kwargs).choices[0].text == first


def test_eight_concurrent_requests_equal_generate(server, expected_chat):
    client = server.client()
    cases = CHAT_CASES * 2
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(chat, client, *case) for case in cases]
        for case, future in zip(cases, futures):
            assert future.result().choices[0].message.content == expected_chat[case][0], case


def error_of(server, path, body, headers=None):
    status, response_headers, data = server.request("POST", path, body, headers)
    error = json.loads(data)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return status, error, response_headers


@pytest.mark.parametrize("body,param", [
    ("{not json", None),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": [1]}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
     "response_format"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 3}, "frequency_penalty"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"49152": 1}}, "logit_bias"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 3}, "n"),
    ({"messages": [{"role": "user", "content": "x"}], "ignore_eos": "yes"}, "ignore_eos"),
    ({"messages": [{"role": "user", "content": "x"}], "kascade": {"attention": "nope"}}, "kascade.attention"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "word " * 1500}]}, "messages"),
])
def test_bad_requests_are_400(server, body, param):
    status, error, _ = error_of(server, "/v1/chat/completions", body, {"Content-Type": "application/json"})
    assert status == 400
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_context_errors_through_the_client(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as over:
        client.completions.create(model=MODEL_ID, prompt="Hello", max_tokens=2000)
    assert over.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="no-such-model", prompt="Hello", max_tokens=2)
    assert unknown.value.code == "model_not_found"


def test_unknown_model_is_404(server):
    status, error, _ = error_of(server, "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"},
                                {"Content-Type": "application/json"})
    assert status == 404
    assert error["param"] == "model" and error["code"] == "model_not_found"


def test_logit_bias_and_penalties_reach_the_sampler(server):
    client = server.client()
    # Token 28 is "," in SmolLM2's vocabulary: a bias of 100 makes greedy decoding repeat it.
    forced = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=4, temperature=0,
                                       logit_bias={"28": 100})
    assert forced.choices[0].text == ",,,,"
    # Penalties change what greedy decoding repeats.
    repeated = client.completions.create(model=MODEL_ID, prompt="Write the word apple twenty times.",
                                         max_tokens=16, temperature=0)
    penalised = client.completions.create(model=MODEL_ID, prompt="Write the word apple twenty times.",
                                          max_tokens=16, temperature=0, presence_penalty=2, frequency_penalty=2)
    assert repeated.choices[0].text != penalised.choices[0].text


def test_large_body_is_413(server):
    status, error, _ = error_of(server, "/v1/completions", json.dumps({"prompt": "x" * (2 << 20)}),
                                {"Content-Type": "application/json"})
    assert status == 413


def test_unknown_route_is_404(server):
    status, _, data = server.request("GET", "/v1/nothing")
    assert status == 404 and "error" in json.loads(data)


def test_disconnect_mid_stream_cancels_and_frees_kv(server):
    before = server.wait_idle()
    sock = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"prompt": "Tell me everything about the history of Rome.", "max_tokens": 600,
                       "temperature": 0, "stream": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    received = b""
    while received.count(b"data: ") < 4:
        received += sock.recv(4096)
    assert b"200 OK" in received
    m = server.metrics()
    assert m["kascade_running_requests"] == 1 and m["kascade_kv_tokens_used"] > 0
    sock.close()
    after = server.wait_idle(timeout=30)
    assert after['kascade_requests_total{outcome="cancelled"}'] == before['kascade_requests_total{outcome="cancelled"}'] + 1
    assert after["kascade_kv_tokens_used"] == 0
    assert after["kascade_generated_tokens_total"] - before["kascade_generated_tokens_total"] < 600


def test_load_64_streams_no_lost_tokens_memory_returns(server):
    """64 concurrent streaming requests (16 running, the rest queued), twice:
    no errors, every stream's text equals the non-streamed answer, the usage
    counts match, and after the second round resident memory is back where
    the first left it and no KV memory is held."""
    client = server.client()
    prompts = [f"Give me a word that rhymes with {w}." for w in ("cat", "day", "light", "tree")]
    expected = {p: client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": p}],
                                                  max_tokens=8, temperature=0).choices[0].message.content
                for p in prompts}

    def one(i):
        prompt = prompts[i % len(prompts)]
        pieces, usage = [], None
        stream = client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": prompt}], max_tokens=8, temperature=0,
            stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
        return prompt, "".join(pieces), usage

    def round_of_64():
        start = time.time()
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            results = list(pool.map(one, range(64)))
        for prompt, text, usage in results:
            assert text == expected[prompt]
            assert usage.completion_tokens <= 8
        return time.time() - start

    first = round_of_64()
    baseline = server.wait_idle()
    rss_baseline = server.rss()
    second = round_of_64()
    after = server.wait_idle()
    time.sleep(0.5)  # the scheduler trims the heap when it goes idle
    rss_after = server.rss()
    assert first < 240 and second < 240
    assert after["kascade_kv_tokens_used"] == 0
    assert after['kascade_requests_total{outcome="failed"}'] == baseline['kascade_requests_total{outcome="failed"}']
    assert after['kascade_requests_total{outcome="finished"}'] - baseline['kascade_requests_total{outcome="finished"}'] == 64
    assert rss_after <= rss_baseline + (16 << 20), (rss_baseline, rss_after)


def test_api_key(small_server):
    body = {"prompt": "Hi", "max_tokens": 2}
    status, error, _ = error_of(small_server, "/v1/completions", body)
    assert status == 401 and error["code"] == "invalid_api_key"
    status, error, _ = error_of(small_server, "/v1/completions", body, {"Authorization": "Bearer wrong"})
    assert status == 401
    with pytest.raises(openai.AuthenticationError):
        small_server.client(api_key="wrong").completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
    response = small_server.client(api_key="sekret").completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
    assert response.usage.completion_tokens == 2
    assert small_server.request("GET", "/health")[0] == 200  # no key needed


def open_stream(server, max_tokens):
    """A streaming request that has started generating; returns its connection and response."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    connection.request("POST", "/v1/completions",
                       json.dumps({"prompt": "Count to one hundred:", "max_tokens": max_tokens, "temperature": 0,
                                   "stream": True}),
                       {"Authorization": "Bearer sekret", "Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    while b'"text"' not in response.readline():
        pass
    return connection, response


def test_full_queue_is_503_with_retry_after(small_server):
    running, running_response = open_stream(small_server, 120)
    queued = concurrent.futures.ThreadPoolExecutor(1).submit(
        small_server.request, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
        {"Authorization": "Bearer sekret"})
    deadline = time.time() + 30
    while small_server.metrics()["kascade_queue_depth"] < 1 and time.time() < deadline:
        time.sleep(0.05)
    status, error, headers = error_of(small_server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                                      {"Authorization": "Bearer sekret"})
    assert status == 503 and "Retry-After" in headers and error["type"] == "server_error"
    running.close()
    assert queued.result(timeout=120)[0] == 200
    small_server.wait_idle()


def test_sigterm_finishes_in_flight_then_exits_0(small_server):
    connection, response = open_stream(small_server, 40)
    small_server.process.send_signal(signal.SIGTERM)
    # No new requests from now on: 503 (or a refused connection once the socket has closed).
    deadline = time.time() + 10
    while small_server.request("GET", "/health")[0] != 503:
        assert time.time() < deadline, "/health did not turn 503 after SIGTERM"
        time.sleep(0.05)
    try:
        status, error, headers = error_of(small_server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2},
                                          {"Authorization": "Bearer sekret"})
        assert status == 503 and "Retry-After" in headers
    except ConnectionRefusedError:
        pass
    rest = response.read().decode()  # the stream runs to its end
    assert rest.rstrip().endswith("data: [DONE]")
    assert re.search(r'"finish_reason":"(stop|length)"', rest), rest  # finished, not cancelled
    connection.close()
    assert small_server.process.wait(timeout=60) == 0


# Hostile clients (issue 31): one request must not end the server, a few
# sockets must not starve it, and what they send must not grow it.

@pytest.fixture(scope="module")
def abuse_server():
    s = Server("--parallel", "2", "--max-queue", "4", "--ctx-size", "256", "--max-body", "1048576",
               "--max-client-connections", "150", "-q")
    yield s
    assert s.stop() == 0


def raw_exchange(server, data, timeout=30):
    """Sends bytes on a fresh connection (the server may stop reading early)
    and returns everything it answers until it closes or `timeout`."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    def send():
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server answered and closed before the end
    sender = threading.Thread(target=send)
    sender.start()
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    sender.join()
    sock.close()
    return received


def status_of(response):
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else None


def test_invalid_utf8_paths_do_not_end_the_server(abuse_server):
    for path in ("/%ff", "/%c3%28", "/v1/%ed%a0%80", "/%fe%ff/x"):
        status, _, data = abuse_server.request("GET", path)
        assert status == 404 and "\ufffd" in json.loads(data)["error"]["message"], path
    assert abuse_server.process.poll() is None
    assert abuse_server.request("GET", "/health")[0] == 200


def test_malformed_json_and_nan_literals_are_400(abuse_server):
    for body in ("{not json", '{"prompt": "x", "temperature": NaN}', '{"prompt": "x", "top_p": Infinity}',
                 '{"prompt": "x", "max_tokens": 1e999}', "[" * 100000):
        status, error, _ = error_of(abuse_server, "/v1/completions", body, {"Content-Type": "application/json"})
        assert status == 400 and error["type"] == "invalid_request_error", body[:40]


def test_half_open_connections_do_not_starve_health(abuse_server):
    """90 connections that never finish a head (45 idle, 45 trickling one
    byte of a header every half second) hold no thread: /health answers at
    once meanwhile, and the server closes them when the head time is up."""
    idle = [socket.create_connection(("127.0.0.1", abuse_server.port)) for _ in range(45)]
    trickling = [socket.create_connection(("127.0.0.1", abuse_server.port)) for _ in range(45)]
    stop = threading.Event()
    def trickle():
        for sock in trickling:
            sock.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        while not stop.wait(0.5):
            for sock in trickling:
                try:
                    sock.sendall(b"a")
                except OSError:
                    pass
    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        time.sleep(1)
        for _ in range(5):
            start = time.time()
            assert abuse_server.request("GET", "/health")[0] == 200
            assert time.time() - start < 1.0
        # The head timeout (10 s) closes both kinds.
        deadline = time.time() + 20
        for sock in idle + trickling:
            sock.settimeout(max(0.1, deadline - time.time()))
            try:
                while sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
    finally:
        stop.set()
        thread.join()
        for sock in idle + trickling:
            sock.close()
    assert time.time() < deadline


def test_connections_per_client_are_bounded(abuse_server):
    held = [socket.create_connection(("127.0.0.1", abuse_server.port)) for _ in range(150)]
    try:
        time.sleep(0.5)
        extra = socket.create_connection(("127.0.0.1", abuse_server.port), timeout=5)
        response = extra.recv(4096)
        extra.close()
        assert status_of(response) == 503 and b"Retry-After" in response, response
    finally:
        for sock in held:
            sock.close()
    deadline = time.time() + 5
    while abuse_server.request("GET", "/health")[0] != 200:
        assert time.time() < deadline
        time.sleep(0.05)


def test_settings_beyond_the_machine_are_refused():
    done = subprocess.run([str(KASCADE), "serve", "-m", str(MODEL), "--port", "0", "--parallel", "4096",
                           "--max-queue", "65536", "--ctx-size", "64"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "--parallel 4096 with --max-queue 65536" in done.stderr, done.stderr


def test_second_server_on_a_port_in_use_is_refused(abuse_server):
    done = subprocess.run([str(KASCADE), "serve", "-m", str(MODEL), "--port", str(abuse_server.port), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"port {abuse_server.port} is in use" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert abuse_server.request("GET", "/health")[0] == 200


def chunked_request(path, body, chunk=65536):
    out = [f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n".encode()]
    for at in range(0, len(body), chunk):
        piece = body[at:at + chunk]
        out.append(b"%x\r\n%s\r\n" % (len(piece), piece))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


def test_max_body_holds_for_chunked_bodies(abuse_server):
    rss_before = abuse_server.rss()
    for size in (6 << 20, 48 << 20):
        body = json.dumps({"prompt": "x" * size, "max_tokens": 1}).encode()
        response = raw_exchange(abuse_server, chunked_request("/v1/completions", body))
        assert status_of(response) == 413 and b"payload_too_large" in response, response[:200]
    small = json.dumps({"prompt": "Hi", "max_tokens": 1}).encode()
    assert status_of(raw_exchange(abuse_server, chunked_request("/v1/completions", small, 5))) == 200
    assert abuse_server.rss() < rss_before + (32 << 20)


def test_metrics_injection_and_growth(abuse_server):
    abuse_server.request("GET", "/a%22%7D%20666%0Afake_metric%201")
    for i in range(300):
        abuse_server.request("GET", f"/no/such/path/{i}")
    status, _, body = abuse_server.request("GET", "/metrics")
    text = body.decode()
    assert status == 200 and "\nfake_metric" not in text
    series = [line for line in text.splitlines() if line.startswith("kascade_http_requests_total{")]
    assert len(series) < 20, series
    assert any(line.startswith('kascade_http_requests_total{path="other",status="404"}') for line in series)
    for line in text.splitlines():
        assert line.startswith("#") or re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? \S+',
                                                    line), line


def test_rss_returns_after_abuse(abuse_server):
    """Two rounds of the above; after the second, resident memory is back
    near where the first left it."""
    def round_of_abuse():
        for path in ("/%ff", "/a%22%7D%0Ab%201"):
            abuse_server.request("GET", path)
        for i in range(200):
            abuse_server.request("GET", f"/round/{i}")
        raw_exchange(abuse_server, chunked_request("/v1/completions", b'{"prompt": "' + b"x" * (4 << 20) + b'"}'))
        raw_exchange(abuse_server, b"GET /health HTTP/1.1\r\n" + b"X-Big: " + b"y" * (100 << 10))
        held = [socket.create_connection(("127.0.0.1", abuse_server.port)) for _ in range(100)]
        for sock in held:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n" + b"z" * 1000)
        time.sleep(0.5)
        for sock in held:
            sock.close()
        error_of(abuse_server, "/v1/completions", '{"prompt": "x", "temperature": NaN}')
        assert abuse_server.request("GET", "/health")[0] == 200
        abuse_server.wait_idle()
        time.sleep(0.5)
        return abuse_server.rss()

    first = round_of_abuse()
    second = round_of_abuse()
    assert second <= first + (16 << 20), (first, second)
