#!/usr/bin/env python3
"""Conformance of pagoda's Responses API with the official `openai` Python client (1.x).

Drives a running server through `client.responses`: plain and streamed responses (through the
SDK's streaming helper; streamed text equal to the non-streamed), the event order and sequence
numbers, max_output_tokens, function tools (a call, its output, the answer; also through
previous_response_id; streamed too), text.format json_schema, store with retrieve / delete,
metadata, and the unsupported parts refused as the client's typed exceptions.
Runs every check, prints one line per check, exits 1 if any failed.
Started by crates/server/tests/front_apis.rs, which runs the real server in-process.

Usage: responses_conformance.py --base-url http://127.0.0.1:PORT/v1 --model NAME
"""

import argparse
import json
import sys

import openai

import checks
from checks import Failed

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn




def expect(cond, message):
    if not cond:
        raise Failed(message)


def expect_eq(got, want, what):
    if got != want:
        raise Failed(f"{what}: got {got!r}, want {want!r}")


class Ctx:
    def __init__(self, args):
        self.client = openai.OpenAI(base_url=args.base_url, api_key="x", max_retries=0,
                                    timeout=120.0)
        self.model = args.model

    def create(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("temperature", 0)
        return self.client.responses.create(**kw)

    def stream(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("temperature", 0)
        return self.client.responses.stream(**kw)


SHORT = "Answer with one word: what color is the sky on a clear day?"
WEATHER_TOOL = {
    "type": "function", "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def calls_of(r):
    return [o for o in r.output if o.type == "function_call"]


@check
def plain_response(c):
    r = c.create(input=SHORT, instructions="Be brief.", max_output_tokens=32,
                 metadata={"suite": "conformance"})
    expect_eq(r.object, "response", "object")
    expect(r.id.startswith("resp_"), f"id {r.id!r}")
    expect_eq(r.status, "completed", "status")
    expect(r.output_text.strip(), f"output_text {r.output_text!r}")
    expect_eq(r.output[0].type, "message", "first output item")
    expect_eq(r.output[0].role, "assistant", "message role")
    expect_eq(r.instructions, "Be brief.", "instructions echoed")
    expect_eq(r.metadata, {"suite": "conformance"}, "metadata echoed")
    expect(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, f"usage {r.usage!r}")
    expect_eq(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens, "total_tokens")


@check
def max_output_tokens_is_incomplete(c):
    r = c.create(input="Write a long story about a dragon.", max_output_tokens=3)
    expect_eq(r.status, "incomplete", "status")
    expect_eq(r.incomplete_details.reason, "max_output_tokens", "incomplete_details")
    expect_eq(r.usage.output_tokens, 3, "output_tokens")


@check
def streamed_text_equals_non_streamed(c):
    whole = c.create(input=SHORT, max_output_tokens=32)
    deltas = []
    with c.stream(input=SHORT, max_output_tokens=32) as s:
        for event in s:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = s.get_final_response()
    expect_eq("".join(deltas), whole.output_text, "streamed deltas")
    expect_eq(final.output_text, whole.output_text, "final response text")
    expect_eq(final.usage.output_tokens, whole.usage.output_tokens, "streamed output_tokens")
    raw = list(c.create(input=SHORT, max_output_tokens=32, stream=True))
    types = [e.type for e in raw]
    expect_eq(types[:4], ["response.created", "response.in_progress",
                          "response.output_item.added", "response.content_part.added"],
              "first events")
    expect_eq(types[-4:], ["response.output_text.done", "response.content_part.done",
                           "response.output_item.done", "response.completed"], "last events")
    expect_eq([e.sequence_number for e in raw], list(range(len(raw))), "sequence numbers")


@check
def function_call_round_trip(c):
    r = c.create(input=WEATHER_ASK, tools=[WEATHER_TOOL], tool_choice="required",
                 max_output_tokens=40)
    calls = calls_of(r)
    expect_eq(len(calls), 1, f"function calls in {r.output!r}")
    call = calls[0]
    expect_eq(call.name, "get_weather", "name")
    expect(call.call_id.startswith("call_"), f"call_id {call.call_id!r}")
    args = json.loads(call.arguments)
    expect(isinstance(args.get("city"), str), f"arguments {args!r}")
    # The call and its output go back as items; the model answers in text.
    follow = WEATHER_ASK + [
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id,
         "output": "21 degrees and sunny"},
    ]
    answer = c.create(input=follow, tools=[WEATHER_TOOL], tool_choice="none",
                      max_output_tokens=40)
    expect(answer.output_text.strip(), f"no answer after the call output: {answer.output!r}")
    # The same through previous_response_id (the stored conversation plus the output item).
    chained = c.create(previous_response_id=r.id, tools=[WEATHER_TOOL], tool_choice="none",
                       max_output_tokens=40,
                       input=[{"type": "function_call_output", "call_id": call.call_id,
                               "output": "21 degrees and sunny"}])
    expect_eq(chained.previous_response_id, r.id, "previous_response_id echoed")
    expect_eq(chained.output_text, answer.output_text, "chained answer vs explicit history")
    # Streamed: argument deltas, and the final response holds the same call.
    arg_deltas = []
    with c.stream(input=WEATHER_ASK, tools=[WEATHER_TOOL], tool_choice="required",
                  max_output_tokens=40) as s:
        for event in s:
            if event.type == "response.function_call_arguments.delta":
                arg_deltas.append(event.delta)
        final = s.get_final_response()
    expect(len(arg_deltas) >= 3, f"arguments came in {len(arg_deltas)} delta(s): {arg_deltas!r}")
    expect_eq("".join(arg_deltas), call.arguments, "streamed argument deltas")
    expect_eq([(f.name, f.arguments) for f in calls_of(final)], [(call.name, call.arguments)],
              "streamed call")


@check
def text_format_json_schema(c):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "legs": {"type": "integer"}},
              "required": ["name", "legs"], "additionalProperties": False}
    r = c.create(input="Describe a spider as JSON.", max_output_tokens=60,
                 text={"format": {"type": "json_schema", "name": "animal", "schema": schema,
                                  "strict": True}})
    v = json.loads(r.output_text)
    expect(isinstance(v.get("name"), str) and isinstance(v.get("legs"), int), f"value {v!r}")
    expect_eq(r.text.format.type, "json_schema", "text.format echoed")


@check
def store_retrieve_and_delete(c):
    r = c.create(input=SHORT, max_output_tokens=16)
    got = c.client.responses.retrieve(r.id)
    expect_eq((got.id, got.output_text), (r.id, r.output_text), "retrieved response")
    c.client.responses.delete(r.id)
    try:
        c.client.responses.retrieve(r.id)
        raise Failed("a deleted response was still retrieved")
    except openai.NotFoundError:
        pass
    unstored = c.create(input=SHORT, max_output_tokens=4, store=False)
    expect_eq(unstored.store, False, "store echoed")
    try:
        c.client.responses.retrieve(unstored.id)
        raise Failed("a response with store=false was kept")
    except openai.NotFoundError:
        pass


@check
def unsupported_parts_are_refused_by_name(c):
    def raises(exc, fn, param):
        try:
            fn()
        except exc as e:
            got = (e.body or {}).get("param") if isinstance(e.body, dict) else None
            expect_eq(got, param, f"param of {exc.__name__} ({e})")
            return
        raise Failed(f"no {exc.__name__} for {param}")

    raises(openai.BadRequestError,
           lambda: c.create(input=SHORT, tools=[{"type": "web_search_preview"}]), "tools[0].type")
    raises(openai.BadRequestError, lambda: c.create(input=SHORT, background=True), "background")
    raises(openai.BadRequestError,
           lambda: c.create(input=SHORT, extra_body={"frobnicate": 1}), "frobnicate")
    raises(openai.BadRequestError,
           lambda: c.create(input=[{"type": "message", "role": "user", "content": [
               {"type": "input_image", "image_url": "http://x/y.png"}]}]),
           "input[0].content[0].type")
    raises(openai.NotFoundError,
           lambda: c.create(input=SHORT, previous_response_id="resp_missing"),
           "previous_response_id")
    raises(openai.BadRequestError, lambda: c.create(input=SHORT, temperature=5), "temperature")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    c = Ctx(args)
    sys.exit(checks.run_all(CHECKS, c, f"openai {openai.__version__}"))


if __name__ == "__main__":
    main()
