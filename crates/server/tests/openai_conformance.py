#!/usr/bin/env python3
"""Conformance of pagoda's server with the official `openai` Python client (1.x).

Drives a running server through `openai.OpenAI`: completions, chat, streaming, logprobs in
both forms, n, stop, seed, max_tokens, tool calls (streamed too), response_format json_schema,
and errors raised as the client's typed exceptions.
Runs every check, prints one line per check, exits 1 if any failed (with the reasons).
Started by crates/server/tests/openai_conformance.rs, which runs the real server in-process.

Usage: openai_conformance.py --base-url http://127.0.0.1:PORT/v1
           [--auth-base-url http://127.0.0.1:PORT2/v1 --auth-key KEY]
"""

import argparse
import io
import json
import math
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

import checks

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


class Failed(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise Failed(message)


def expect_eq(got, want, what):
    if got != want:
        raise Failed(f"{what}: got {got!r}, want {want!r}")


class Ctx:
    """What every check needs: the client, the model id, the server root for /tokenize."""

    def __init__(self, args):
        self.args = args
        self.client = openai.OpenAI(
            base_url=args.base_url, api_key="x", max_retries=0, timeout=120.0
        )
        self.root = args.base_url.rstrip("/").removesuffix("/v1")
        self.model = self.client.models.list().data[0].id
        self._ctx_len = None

    def tokenize(self, **body):
        """The server's own tokenization (vLLM's /tokenize): the ids of a prompt or a chat."""
        r = httpx.post(f"{self.root}/tokenize", json=body, timeout=60.0)
        expect_eq(r.status_code, 200, f"POST /tokenize {body} status ({r.text})")
        return r.json()

    def context_len(self):
        if self._ctx_len is None:
            self._ctx_len = self.tokenize(prompt="x").get("max_model_len") or 1024
        return self._ctx_len

    def complete(self, **kw):
        kw.setdefault("model", self.model)
        return self.client.completions.create(**kw)

    def chat(self, **kw):
        kw.setdefault("model", self.model)
        return self.client.chat.completions.create(**kw)


PROMPT = "The capital of France is Paris. The capital of Germany is"
STORY = [{"role": "user", "content": "Write a long story about a dragon who loves tea."}]


# ---------------------------------------------------------------------------------------
# models


@check
def models_list(c):
    models = c.client.models.list().data
    expect(len(models) >= 1, "GET /v1/models lists no model")
    m = models[0]
    expect_eq(m.object, "model", "model.object")
    expect(isinstance(m.id, str) and m.id, f"model.id is {m.id!r}")
    expect(m.owned_by is not None, "model.owned_by is missing")
    expect(isinstance(m.created, int), f"model.created is {m.created!r}")


# ---------------------------------------------------------------------------------------
# completions


@check
def completion_text_usage_and_length(c):
    r = c.complete(prompt=PROMPT, max_tokens=8, temperature=0)
    expect_eq(r.object, "text_completion", "object")
    expect(r.id, "id is empty")
    expect(r.created > 0, f"created is {r.created}")
    expect_eq(r.model, c.model, "model")
    expect_eq(len(r.choices), 1, "number of choices")
    ch = r.choices[0]
    expect_eq(ch.index, 0, "choice index")
    expect(isinstance(ch.text, str) and ch.text, f"text is {ch.text!r}")
    expect_eq(ch.finish_reason, "length", "finish_reason at max_tokens")
    n_prompt = c.tokenize(prompt=PROMPT)["count"]
    expect_eq(r.usage.prompt_tokens, n_prompt, "usage.prompt_tokens vs /tokenize count")
    expect_eq(r.usage.completion_tokens, 8, "usage.completion_tokens at max_tokens=8")
    expect_eq(r.usage.total_tokens, n_prompt + 8, "usage.total_tokens")


@check
def completion_stream_equals_non_stream(c):
    full = c.complete(prompt=PROMPT, max_tokens=12, temperature=0)
    chunks = list(c.complete(prompt=PROMPT, max_tokens=12, temperature=0, stream=True))
    expect(len(chunks) >= 2, f"only {len(chunks)} chunks")
    text = ""
    finish = []
    for i, ch in enumerate(chunks):
        expect_eq(ch.id, chunks[0].id, f"chunk {i} id")
        expect_eq(ch.object, "text_completion", f"chunk {i} object")
        expect_eq(len(ch.choices), 1, f"chunk {i} number of choices")
        text += ch.choices[0].text
        if ch.choices[0].finish_reason is not None:
            finish.append((i, ch.choices[0].finish_reason))
    expect_eq(text, full.choices[0].text, "streamed text vs non-streamed text")
    expect_eq(finish, [(len(chunks) - 1, full.choices[0].finish_reason)],
              "finish_reason (chunk index, value) in the stream")


@check
def completion_stream_include_usage(c):
    full = c.complete(prompt=PROMPT, max_tokens=6, temperature=0)
    chunks = list(c.complete(prompt=PROMPT, max_tokens=6, temperature=0, stream=True,
                             stream_options={"include_usage": True}))
    last = chunks[-1]
    expect_eq(last.choices, [], "choices of the final usage chunk")
    expect(last.usage is not None, "final chunk has no usage")
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        expect_eq(getattr(last.usage, k), getattr(full.usage, k), f"streamed usage.{k}")
    for i, ch in enumerate(chunks[:-1]):
        expect(ch.usage is None, f"chunk {i} (not the last) carries usage {ch.usage}")
    text = "".join(ch.choices[0].text for ch in chunks[:-1])
    expect_eq(text, full.choices[0].text, "streamed text")


@check
def completion_logprobs(c):
    r = c.complete(prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    ch = r.choices[0]
    lp = ch.logprobs
    expect(lp is not None, "choices[0].logprobs is null with logprobs=3")
    n = r.usage.completion_tokens
    expect_eq(len(lp.tokens), n, "len(logprobs.tokens) vs completion_tokens")
    expect_eq(len(lp.token_logprobs), n, "len(logprobs.token_logprobs)")
    expect_eq(len(lp.top_logprobs), n, "len(logprobs.top_logprobs)")
    expect_eq("".join(lp.tokens), ch.text, "joined logprobs.tokens vs text")
    if lp.text_offset is not None:
        expect_eq(len(lp.text_offset), n, "len(logprobs.text_offset)")
        expect(all(a <= b for a, b in zip(lp.text_offset, lp.text_offset[1:])),
               f"text_offset not monotone: {lp.text_offset}")
    for i, (tok, tlp, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        expect(isinstance(tlp, float) and tlp <= 0.0 and math.isfinite(tlp),
               f"token_logprobs[{i}] = {tlp!r}")
        # OpenAI: up to logprobs entries, plus the sampled token when it is not among them.
        expect(3 <= len(top) <= 4, f"top_logprobs[{i}] has {len(top)} entries: {top}")
        expect(all(v <= 0.0 for v in top.values()), f"top_logprobs[{i}] positive: {top}")
        # Greedy: the sampled token is the most likely one.
        expect(tok in top, f"sampled token {tok!r} not in top_logprobs[{i}] {top}")
        expect(abs(top[tok] - tlp) < 1e-4, f"top_logprobs[{i}][{tok!r}]={top[tok]} vs {tlp}")
        expect(abs(max(top.values()) - tlp) < 1e-4,
               f"greedy token {tok!r} ({tlp}) is not the max of top_logprobs[{i}] {top}")


@check
def completion_echo(c):
    r = c.complete(prompt=PROMPT, max_tokens=4, temperature=0, echo=True)
    plain = c.complete(prompt=PROMPT, max_tokens=4, temperature=0)
    expect_eq(r.choices[0].text, PROMPT + plain.choices[0].text, "echo text")


@check
def completion_echo_with_logprobs(c):
    r = c.complete(prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=1)
    lp = r.choices[0].logprobs
    n = r.usage.prompt_tokens + r.usage.completion_tokens
    expect_eq(len(lp.tokens), n, "len(tokens) with echo (prompt + completion)")
    expect_eq(len(lp.token_logprobs), n, "len(token_logprobs) with echo")
    expect(lp.token_logprobs[0] is None, f"first prompt token's logprob {lp.token_logprobs[0]!r}")
    expect(all(isinstance(x, float) for x in lp.token_logprobs[1:]),
           f"token_logprobs after the first: {lp.token_logprobs}")
    expect_eq("".join(lp.tokens), r.choices[0].text, "joined tokens vs echoed text")


@check
def completion_n(c):
    kw = dict(prompt=PROMPT, max_tokens=6, temperature=1.0, seed=7, n=2)
    r = c.complete(**kw)
    expect_eq(sorted(ch.index for ch in r.choices), [0, 1], "choice indexes with n=2")
    expect_eq(r.usage.completion_tokens, 12, "usage.completion_tokens with n=2, max_tokens=6")
    again = c.complete(**kw)
    texts = lambda resp: [ch.text for ch in sorted(resp.choices, key=lambda ch: ch.index)]
    expect_eq(texts(again), texts(r), "n=2 with the same seed, twice")
    # Streaming with n: each chunk names its choice; the texts match per index.
    streamed = {0: "", 1: ""}
    for ch in c.complete(stream=True, **kw):
        for choice in ch.choices:
            streamed[choice.index] += choice.text
    expect_eq([streamed[0], streamed[1]], texts(r), "streamed n=2 texts per index")


@check
def completion_stop(c):
    full = c.complete(prompt=PROMPT, max_tokens=24, temperature=0).choices[0].text
    stop = next((w for w in full[4:].split() if len(w) >= 3), None)
    expect(stop is not None, f"no word to stop on in {full!r}")
    want = full[: full.index(stop)]
    r = c.complete(prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop, "\x00never"])
    expect_eq(r.choices[0].text, want, f"text with stop={stop!r} (full text {full!r})")
    expect_eq(r.choices[0].finish_reason, "stop", "finish_reason on a stop string")
    chunks = list(c.complete(prompt=PROMPT, max_tokens=24, temperature=0, stop=stop, stream=True))
    expect_eq("".join(ch.choices[0].text for ch in chunks), want, "streamed text with stop")
    expect_eq(chunks[-1].choices[0].finish_reason, "stop", "streamed finish_reason on stop")


@check
def completion_seed(c):
    kw = dict(prompt="Once upon a time", max_tokens=16, temperature=1.0, top_p=1.0)
    a = c.complete(seed=1234, **kw).choices[0].text
    b = c.complete(seed=1234, **kw).choices[0].text
    expect_eq(b, a, "same seed, temperature 1, twice")
    s = "".join(ch.choices[0].text for ch in c.complete(seed=1234, stream=True, **kw))
    expect_eq(s, a, "same seed, streamed")


@check
def completion_token_id_prompt(c):
    ids = c.tokenize(prompt=PROMPT)["tokens"]
    by_text = c.complete(prompt=PROMPT, max_tokens=8, temperature=0)
    by_ids = c.complete(prompt=ids, max_tokens=8, temperature=0)
    expect_eq(by_ids.usage.prompt_tokens, len(ids), "prompt_tokens of a token-id prompt")
    expect_eq(by_ids.choices[0].text, by_text.choices[0].text, "token-id prompt vs text prompt")
    batch = c.complete(prompt=[ids, ids[:3]], max_tokens=2, temperature=0)
    expect_eq(sorted(ch.index for ch in batch.choices), [0, 1], "indexes of a 2-prompt batch")
    expect_eq(batch.usage.prompt_tokens, len(ids) + 3, "prompt_tokens of a 2-prompt batch")


# ---------------------------------------------------------------------------------------
# chat


def chat_stream(c, **kw):
    """Streams a chat; checks the chunk format and returns (content, finish_reason, chunks)."""
    chunks = list(c.chat(stream=True, **kw))
    body = [ch for ch in chunks if ch.choices]
    expect(len(body) >= 2, f"only {len(body)} chunks with choices")
    for i, ch in enumerate(chunks):
        expect_eq(ch.object, "chat.completion.chunk", f"chunk {i} object")
        expect_eq(ch.id, chunks[0].id, f"chunk {i} id")
        expect_eq(ch.model, c.model, f"chunk {i} model")
    first = body[0].choices[0].delta
    expect_eq(first.role, "assistant", "role of the first chunk's delta")
    expect(not first.content, f"first chunk carries content {first.content!r} with its role")
    for i, ch in enumerate(body[1:], 1):
        expect(ch.choices[0].delta.role in (None, "assistant"), f"chunk {i} role")
    finishes = [(i, ch.choices[0].finish_reason) for i, ch in enumerate(body)
                if ch.choices[0].finish_reason is not None]
    expect(len(finishes) == 1 and finishes[0][0] == len(body) - 1,
           f"finish_reason must be on the last choice chunk only: {finishes}")
    content = "".join(ch.choices[0].delta.content or "" for ch in body)
    return content, finishes[0][1], chunks


@check
def chat_message(c):
    r = c.chat(messages=[{"role": "user", "content": "Name three colors."}],
               max_tokens=16, temperature=0)
    expect_eq(r.object, "chat.completion", "object")
    expect(r.id, "id is empty")
    expect(r.created > 0, f"created is {r.created}")
    expect_eq(r.model, c.model, "model")
    m = r.choices[0].message
    expect_eq(m.role, "assistant", "message.role")
    expect(isinstance(m.content, str) and m.content.strip(), f"message.content is {m.content!r}")
    expect(r.choices[0].finish_reason in ("stop", "length"),
           f"finish_reason {r.choices[0].finish_reason!r}")
    expect_eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens,
              "usage.total_tokens")


@check
def chat_stream_equals_non_stream(c):
    kw = dict(messages=[{"role": "user", "content": "Name three colors."}],
              max_tokens=16, temperature=0)
    full = c.chat(**kw)
    content, finish, chunks = chat_stream(c, **kw)
    expect_eq(content, full.choices[0].message.content, "streamed content vs non-streamed")
    expect_eq(finish, full.choices[0].finish_reason, "streamed finish_reason")
    expect(all(ch.usage is None for ch in chunks), "usage chunk sent without include_usage")


@check
def chat_stream_include_usage(c):
    kw = dict(messages=STORY, max_tokens=6, temperature=0)
    full = c.chat(**kw)
    content, finish, chunks = chat_stream(c, stream_options={"include_usage": True}, **kw)
    last = chunks[-1]
    expect_eq(last.choices, [], "choices of the final usage chunk")
    expect(last.usage is not None, "final chunk has no usage")
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        expect_eq(getattr(last.usage, k), getattr(full.usage, k), f"streamed usage.{k}")
    expect_eq(content, full.choices[0].message.content, "streamed content")


@check
def chat_logprobs(c):
    r = c.chat(messages=STORY, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    lp = r.choices[0].logprobs
    expect(lp is not None and lp.content is not None, f"choices[0].logprobs is {lp!r}")
    expect_eq(len(lp.content), r.usage.completion_tokens, "len(logprobs.content)")
    expect_eq("".join(t.token for t in lp.content), r.choices[0].message.content,
              "joined logprobs tokens vs content")
    for i, t in enumerate(lp.content):
        expect(t.logprob <= 0.0 and math.isfinite(t.logprob), f"content[{i}].logprob {t.logprob}")
        expect_eq(len(t.top_logprobs), 2, f"len(content[{i}].top_logprobs)")
        tops = [x.logprob for x in t.top_logprobs]
        expect(abs(max(tops) - t.logprob) < 1e-4,
               f"greedy token {t.token!r} ({t.logprob}) is not the max of its top_logprobs {tops}")
        if t.bytes is not None:
            expect_eq(bytes(t.bytes).decode("utf-8", "replace"), t.token, f"content[{i}].bytes")
    plain = c.chat(messages=STORY, max_tokens=3, temperature=0, logprobs=True)
    for i, t in enumerate(plain.choices[0].logprobs.content):
        expect_eq(t.top_logprobs, [], f"top_logprobs without top_logprobs (token {i})")
    none = c.chat(messages=STORY, max_tokens=3, temperature=0)
    expect(none.choices[0].logprobs is None, "logprobs present without logprobs=true")


@check
def chat_n(c):
    r = c.chat(messages=STORY, max_tokens=5, temperature=1.0, seed=3, n=2)
    expect_eq(sorted(ch.index for ch in r.choices), [0, 1], "choice indexes with n=2")
    if all(ch.finish_reason == "length" for ch in r.choices):
        expect_eq(r.usage.completion_tokens, 10, "usage.completion_tokens with n=2, max_tokens=5")
    else:
        expect(r.usage.completion_tokens <= 10, f"usage.completion_tokens {r.usage.completion_tokens}")
    for ch in r.choices:
        expect(ch.message.content, f"choice {ch.index} has no content")


@check
def chat_stop(c):
    kw = dict(messages=STORY, max_tokens=24, temperature=0)
    full = c.chat(**kw).choices[0].message.content
    stop = next((w for w in full[4:].split() if len(w) >= 3), None)
    expect(stop is not None, f"no word to stop on in {full!r}")
    want = full[: full.index(stop)]
    r = c.chat(stop=stop, **kw)
    expect_eq(r.choices[0].message.content, want, f"content with stop={stop!r} (full {full!r})")
    expect_eq(r.choices[0].finish_reason, "stop", "finish_reason on a stop string")
    content, finish, _ = chat_stream(c, stop=[stop], **kw)
    expect_eq(content, want, "streamed content with stop")
    expect_eq(finish, "stop", "streamed finish_reason on stop")


@check
def chat_max_tokens_and_max_completion_tokens(c):
    a = c.chat(messages=STORY, max_tokens=5, temperature=0)
    expect_eq(a.usage.completion_tokens, 5, "completion_tokens with max_tokens=5")
    expect_eq(a.choices[0].finish_reason, "length", "finish_reason with max_tokens=5")
    b = c.chat(messages=STORY, max_completion_tokens=5, temperature=0)
    expect_eq(b.usage.completion_tokens, 5, "completion_tokens with max_completion_tokens=5")
    expect_eq(b.choices[0].finish_reason, "length", "finish_reason with max_completion_tokens")
    expect_eq(b.choices[0].message.content, a.choices[0].message.content,
              "max_completion_tokens vs max_tokens content")


@check
def chat_system_and_user(c):
    msgs = [{"role": "system", "content": "You are a pirate. Answer briefly."},
            {"role": "user", "content": "What is the sea?"}]
    r = c.chat(messages=msgs, max_tokens=8, temperature=0)
    expect(r.choices[0].message.content, "empty content")
    n_prompt = c.tokenize(messages=msgs)["count"]
    expect_eq(r.usage.prompt_tokens, n_prompt, "prompt_tokens vs /tokenize of the messages")
    user_only = c.chat(messages=msgs[1:], max_tokens=1, temperature=0)
    expect(user_only.usage.prompt_tokens != r.usage.prompt_tokens,
           "the system message does not change the prompt")
    turns = msgs + [{"role": "assistant", "content": "Wet."}, {"role": "user", "content": "More?"}]
    multi = c.chat(messages=turns, max_tokens=4, temperature=0)
    expect_eq(multi.usage.prompt_tokens, c.tokenize(messages=turns)["count"],
              "prompt_tokens of a multi-turn chat")


@check
def chat_content_as_text_parts(c):
    text = "Name three colors."
    plain = c.chat(messages=[{"role": "user", "content": text}], max_tokens=8, temperature=0)
    parts = c.chat(messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
                   max_tokens=8, temperature=0)
    expect_eq(parts.choices[0].message.content, plain.choices[0].message.content,
              "one text part vs the plain string")
    expect_eq(parts.usage.prompt_tokens, plain.usage.prompt_tokens, "prompt_tokens")
    two = c.chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Name three"},
                                                         {"type": "text", "text": "colors."}]}],
                 max_tokens=4, temperature=0)
    expect(two.choices[0].message.content, "empty content with two text parts")


# ---------------------------------------------------------------------------------------
# tools and structured output

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@check
def chat_tool_calls_parse_and_stream_the_same(c):
    kw = dict(messages=WEATHER_ASK, tools=[WEATHER_TOOL], tool_choice="required",
              max_tokens=40, temperature=0)
    r = c.chat(**kw)
    ch = r.choices[0]
    expect_eq(ch.finish_reason, "tool_calls", "finish_reason")
    expect(ch.message.content is None, f"content {ch.message.content!r} next to the calls")
    calls = ch.message.tool_calls or []
    expect_eq(len(calls), 1, "number of tool calls")
    call = calls[0]
    expect(call.id.startswith("call_"), f"tool call id {call.id!r}")
    expect_eq(call.type, "function", "tool call type")
    expect_eq(call.function.name, "get_weather", "function name")
    args = json.loads(call.function.arguments)
    expect(isinstance(args.get("city"), str), f"arguments {args!r}")
    expect(args.get("unit") in ("celsius", "fahrenheit"), f"arguments {args!r}")
    # Streamed: delta.tool_calls pieces reassemble to the same call.
    chunks = list(c.chat(stream=True, **kw))
    pieces = {}
    finish = None
    for chunk in chunks:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        expect(not (d.content or "").strip(), f"content {d.content!r} in a tool-call stream")
        for tc in d.tool_calls or []:
            p = pieces.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            if tc.id:
                p["id"] = tc.id
            if tc.function and tc.function.name:
                p["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                p["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    expect_eq(finish, "tool_calls", "streamed finish_reason")
    expect_eq(sorted(pieces), [0], "streamed tool-call indexes")
    expect(pieces[0]["id"] and pieces[0]["id"].startswith("call_"), f"streamed id {pieces[0]}")
    expect_eq((pieces[0]["name"], json.loads(pieces[0]["arguments"])),
              (call.function.name, args), "streamed call")
    # The call and its result go back into the conversation.
    follow = WEATHER_ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "21 degrees and sunny"}]
    r2 = c.chat(messages=follow, tools=[WEATHER_TOOL], max_tokens=8, temperature=0)
    expect(r2.choices[0].finish_reason in ("stop", "length", "tool_calls"),
           f"follow-up finish_reason {r2.choices[0].finish_reason!r}")


@check
def chat_response_format_json_schema(c):
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 16},
                             "legs": {"type": "integer", "minimum": 0, "maximum": 8}},
              "required": ["name", "legs"], "additionalProperties": False}
    r = c.chat(messages=[{"role": "user", "content": "Describe a spider as JSON."}],
               response_format={"type": "json_schema",
                                "json_schema": {"name": "animal", "schema": schema, "strict": True}},
               max_tokens=40, temperature=0)
    expect_eq(r.choices[0].finish_reason, "stop", "finish_reason")
    out = json.loads(r.choices[0].message.content)
    expect(set(out) == {"name", "legs"} and isinstance(out["name"], str)
           and isinstance(out["legs"], int) and 0 <= out["legs"] <= 8, f"output {out!r}")
    expect_raises(openai.BadRequestError,
                  lambda: c.chat(messages=STORY, max_tokens=2,
                                 response_format={"type": "json_schema", "json_schema": {
                                     "name": "x", "schema": {"type": "nonsense"}}}),
                  "invalid schema", status=400, param="response_format")


# ---------------------------------------------------------------------------------------
# errors as the client's typed exceptions


def expect_raises(exc_type, fn, what, status=None, param=None, mentions=()):
    try:
        r = fn()
    except exc_type as e:
        if status is not None:
            expect_eq(e.status_code, status, f"{what}: status")
        expect(isinstance(e.body, dict) and "message" in e.body and "type" in e.body,
               f"{what}: error body {e.body!r} is not the OpenAI shape")
        if param is not None:
            expect_eq(e.param, param, f"{what}: error.param")
        for word in mentions:
            expect(str(word) in e.message, f"{what}: message {e.message!r} does not name {word!r}")
        return e
    except openai.APIError as e:
        raise Failed(f"{what}: raised {type(e).__name__} ({getattr(e, 'status_code', None)}): "
                     f"{e}, want {exc_type.__name__}")
    raise Failed(f"{what}: succeeded ({str(r)[:200]}), want {exc_type.__name__}")


@check
def error_temperature_out_of_range(c):
    expect_raises(openai.BadRequestError,
                  lambda: c.complete(prompt="Hi", max_tokens=2, temperature=5),
                  "completions temperature=5", status=400, param="temperature",
                  mentions=("temperature",))
    expect_raises(openai.BadRequestError,
                  lambda: c.chat(messages=STORY, max_tokens=2, temperature=5),
                  "chat temperature=5", status=400, param="temperature",
                  mentions=("temperature",))


@check
def error_unknown_parameter(c):
    expect_raises(openai.BadRequestError,
                  lambda: c.complete(prompt="Hi", max_tokens=2, extra_body={"frobnicate": 1}),
                  "completions unknown parameter", status=400, mentions=("frobnicate",))
    expect_raises(openai.BadRequestError,
                  lambda: c.chat(messages=STORY, max_tokens=2, extra_body={"frobnicate": 1}),
                  "chat unknown parameter", status=400, mentions=("frobnicate",))


@check
def error_prompt_longer_than_context(c):
    n_ctx = c.context_len()
    long_text = "hello " * (2 * n_ctx)
    expect_raises(openai.BadRequestError,
                  lambda: c.complete(prompt=long_text, max_tokens=2),
                  "completions prompt over the context", status=400, mentions=(n_ctx,))
    expect_raises(openai.BadRequestError,
                  lambda: c.chat(messages=[{"role": "user", "content": long_text}], max_tokens=2),
                  "chat prompt over the context", status=400, mentions=(n_ctx,))
    # A prompt that fits but leaves too little room for max_tokens: both numbers are named.
    one = c.tokenize(prompt=" hello", add_special_tokens=False)["tokens"][:1]
    prompt = one * (n_ctx - 10)
    expect_raises(openai.BadRequestError,
                  lambda: c.complete(prompt=prompt, max_tokens=100),
                  "prompt + max_tokens over the context", status=400,
                  mentions=(n_ctx, len(prompt)))


@check
def error_unknown_model(c):
    expect_raises(openai.NotFoundError,
                  lambda: c.complete(model="no-such-model", prompt="Hi", max_tokens=2),
                  "completions unknown model", status=404, mentions=("no-such-model",))
    expect_raises(openai.NotFoundError,
                  lambda: c.chat(model="no-such-model", messages=STORY, max_tokens=2),
                  "chat unknown model", status=404, mentions=("no-such-model",))


@check
def error_in_stream_request_raises_before_streaming(c):
    expect_raises(openai.BadRequestError,
                  lambda: list(c.chat(messages=STORY, max_tokens=2, temperature=5, stream=True)),
                  "streamed chat temperature=5", status=400, param="temperature")


@check
def error_wrong_api_key(c):
    a = c.args
    if not a.auth_base_url:
        raise Skip("no --auth-base-url given (no server with an API key)")
    wrong = openai.OpenAI(base_url=a.auth_base_url, api_key="wrong-key", max_retries=0)
    expect_raises(openai.AuthenticationError, lambda: wrong.models.list(),
                  "models.list with a wrong key", status=401)
    expect_raises(openai.AuthenticationError,
                  lambda: wrong.completions.create(model=c.model, prompt="Hi", max_tokens=2),
                  "completions with a wrong key", status=401)
    expect_raises(openai.AuthenticationError,
                  lambda: wrong.chat.completions.create(model=c.model, messages=STORY,
                                                        max_tokens=2, stream=True),
                  "streamed chat with a wrong key", status=401)
    right = openai.OpenAI(base_url=a.auth_base_url, api_key=a.auth_key, max_retries=0)
    model = right.models.list().data[0].id
    r = right.completions.create(model=model, prompt="Hi", max_tokens=2, temperature=0)
    expect_eq(len(r.choices), 1, "completions with the right key")


class Skip(Exception):
    pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--auth-base-url", help="a server started with an API key")
    p.add_argument("--auth-key", help="that server's API key")
    p.add_argument("--only", help="run only the checks whose name contains this")
    args = p.parse_args()
    print(f"openai {openai.__version__}, server {args.base_url}", flush=True)
    c = Ctx(args)
    failures = []
    start = time.monotonic()

    def run(fn):
        # Output is collected per check and printed in order below: the checks are independent
        # (each makes its own requests), so they run at once and the server batches them.
        out = io.StringIO()
        t0 = time.monotonic()
        try:
            fn(c)
            print(f"PASS {fn.__name__} ({time.monotonic() - t0:.2f}s)", file=out)
            return out.getvalue(), None
        except Skip as e:
            print(f"SKIP {fn.__name__}: {e}", file=out)
            return out.getvalue(), None
        except Failed as e:
            print(f"FAIL {fn.__name__}: {e}", file=out)
            return out.getvalue(), (fn.__name__, str(e))
        except Exception as e:  # an unexpected exception is a failure too, with its trace
            print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", file=out)
            traceback.print_exc(file=out)
            return out.getvalue(), (fn.__name__, f"{type(e).__name__}: {e}")

    chosen = [fn for fn in CHECKS if not args.only or args.only in fn.__name__]
    checks.complete_sdk_models()
    with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
        for text, failure in pool.map(run, chosen):
            print(text, end="", flush=True)
            if failure:
                failures.append(failure)
    total = time.monotonic() - start
    if failures:
        print(f"\n{len(failures)} check(s) FAILED ({total:.1f}s):", flush=True)
        for name, msg in failures:
            print(f"  {name}: {msg}", flush=True)
        sys.exit(1)
    print(f"\nall checks passed ({total:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
