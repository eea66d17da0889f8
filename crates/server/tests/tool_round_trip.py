#!/usr/bin/env python3
"""Tool round trips as agent frameworks run them, through the official `openai` client (1.x):
`tool_choice: "auto"` yields a call (whatever syntax the model wrote it in), streamed as
`delta.tool_calls`; the call and its result go back; the model answers in text. Tagged calls
stream their arguments as they are generated. Also a named
`tool_choice` (finish_reason "stop", as OpenAI reports it) and `parallel_tool_calls: false`.
Runs every check, prints one line per check, exits 1 if any failed.
Started by crates/server/tests/front_apis.rs for each tool-trained model.

Usage: tool_round_trip.py --base-url http://127.0.0.1:PORT/v1 --model NAME [--checks a,b]
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


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TOOLS = [WEATHER_TOOL, TIME_TOOL]
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


class Ctx:
    def __init__(self, args):
        self.client = openai.OpenAI(base_url=args.base_url, api_key="x", max_retries=0,
                                    timeout=120.0)
        self.model = args.model

    def chat(self, **kw):
        kw.setdefault("model", self.model)
        kw.setdefault("temperature", 0)
        kw.setdefault("max_tokens", 80)
        return self.client.chat.completions.create(**kw)


def one_call(choice, what):
    calls = choice.message.tool_calls or []
    expect_eq(len(calls), 1, f"{what}: tool calls (content {choice.message.content!r})")
    call = calls[0]
    expect_eq(call.function.name, "get_weather", f"{what}: function name")
    args = json.loads(call.function.arguments)
    expect(isinstance(args.get("city"), str) and "paris" in args["city"].lower(),
           f"{what}: arguments {args!r}")
    return call


@check
def auto_round_trip(c):
    r = c.chat(messages=ASK, tools=TOOLS, tool_choice="auto")
    ch = r.choices[0]
    expect_eq(ch.finish_reason, "tool_calls", f"finish_reason (content {ch.message.content!r})")
    call = one_call(ch, "auto")
    expect(not (ch.message.content or "").strip(), f"content {ch.message.content!r} beside the call")
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees Celsius and cloudy"},
    ]
    answer = c.chat(messages=follow, tools=TOOLS, tool_choice="auto")
    a = answer.choices[0]
    expect(not a.message.tool_calls, f"called again instead of answering: {a.message.tool_calls}")
    expect(a.finish_reason in ("stop", "length"), f"final finish_reason {a.finish_reason!r}")
    expect((a.message.content or "").strip(), "empty final answer")


@check
def auto_call_streams_as_tool_calls(c):
    whole = c.chat(messages=ASK, tools=TOOLS, tool_choice="auto")
    want = one_call(whole.choices[0], "non-streamed")
    pieces, content, finish = {}, "", None
    for chunk in c.chat(messages=ASK, tools=TOOLS, tool_choice="auto", stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            p = pieces.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function and tc.function.name:
                p["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                p["arguments"] += tc.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    expect(not content.strip(), f"content {content!r} streamed beside the call")
    expect_eq(finish, "tool_calls", "streamed finish_reason")
    expect_eq([(p["name"], json.loads(p["arguments"])) for p in pieces.values()],
              [(want.function.name, json.loads(want.function.arguments))], "streamed call")


@check
def arguments_stream_as_they_are_generated(c):
    # A tagged call (the grammar of `required` writes the template's <tool_call> tags) streams
    # its arguments token by token, not in one piece at the end; joined they are the
    # non-streamed call's arguments, byte for byte.
    whole = c.chat(messages=ASK, tools=TOOLS, tool_choice="required")
    want = one_call(whole.choices[0], "non-streamed")
    heads, pieces = [], []
    for chunk in c.chat(messages=ASK, tools=TOOLS, tool_choice="required", stream=True):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if tc.id:
                heads.append(tc.function.name)
            if tc.function and tc.function.arguments:
                pieces.append(tc.function.arguments)
    expect_eq(heads, [want.function.name], "streamed call heads")
    expect(len(pieces) >= 3, f"arguments came in {len(pieces)} piece(s): {pieces!r}")
    expect_eq("".join(pieces), want.function.arguments, "joined argument pieces")


@check
def named_tool_choice_finishes_with_stop(c):
    r = c.chat(messages=ASK, tools=TOOLS,
               tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ch = r.choices[0]
    one_call(ch, "named")
    expect_eq(ch.finish_reason, "stop", "finish_reason of a named tool_choice")


@check
def parallel_tool_calls_false_gives_one_call(c):
    ask = [{"role": "user", "content": "What are the weather and the local time in Paris?"}]
    r = c.chat(messages=ask, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    calls = r.choices[0].message.tool_calls or []
    expect_eq(len(calls), 1, "calls with parallel_tool_calls=false")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--checks", help="comma-separated check names (default: all)")
    args = p.parse_args()
    c = Ctx(args)
    sys.exit(checks.run_all(checks.select(CHECKS, args.checks), c))


if __name__ == "__main__":
    main()
