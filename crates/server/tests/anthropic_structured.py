#!/usr/bin/env python3
"""Anthropic structured outputs and strict tools through the official `anthropic` SDK:
`messages.parse` into a Pydantic model, streamed (`messages.stream(output_format=...)`) and
not, the raw `output_config` form, a strict tool whose input always validates against its
schema (under `auto` and `any`), and the errors in Anthropic's shape.
Runs every check, prints one line per check, exits 1 if any failed.
Started by crates/server/tests/client_compat.rs on the real Qwen server.

Usage: anthropic_structured.py --base-url http://127.0.0.1:PORT --model NAME
"""

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import anthropic
import jsonschema
from pydantic import BaseModel

import checks
from checks import Failed

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn




def expect(cond, message):
    if not cond:
        raise Failed(message)


class City(BaseModel):
    name: str
    country: str
    population: int
    capital: bool
    climate: Literal["oceanic", "continental", "mediterranean", "arid"]


ASK = [{"role": "user", "content": "Describe Paris: name, country, population, whether it is a capital, climate."}]

FORECAST = {
    "name": "get_forecast",
    "description": "Weather forecast for a city",
    "strict": True,
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "minLength": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit", "days"],
        "additionalProperties": False,
    },
}


class Ctx:
    def __init__(self, args):
        self.client = anthropic.Anthropic(base_url=args.base_url, api_key="x", max_retries=0,
                                          timeout=120.0)
        self.model = args.model

    def kw(self, kw):
        kw.setdefault("model", self.model)
        kw.setdefault("max_tokens", 200)
        kw.setdefault("messages", ASK)
        kw.setdefault("extra_body", {"temperature": 0})
        return kw


@check
def parse_into_a_pydantic_model(c):
    r = c.client.messages.parse(output_format=City, **c.kw({}))
    expect(isinstance(r.parsed_output, City), f"parsed_output {r.parsed_output!r}")
    expect(r.parsed_output.name == "Paris", f"parsed_output {r.parsed_output!r}")
    expect(r.stop_reason == "end_turn", f"stop_reason {r.stop_reason!r}")


@check
def streamed_parse_equals_the_non_streamed(c):
    whole = c.client.messages.parse(output_format=City, **c.kw({}))
    with c.client.messages.stream(output_format=City, **c.kw({})) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    expect(text == whole.content[0].text, f"stream {text!r} != {whole.content[0].text!r}")
    expect(final.parsed_output == whole.parsed_output, f"{final.parsed_output!r}")


@check
def raw_output_config_constrains_the_reply(c):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"], "additionalProperties": False}
    r = c.client.messages.create(
        output_config={"format": {"type": "json_schema", "schema": schema}},
        **c.kw({"messages": [{"role": "user", "content": "What is 6 times 7?"}]}))
    jsonschema.validate(json.loads(r.content[0].text), schema)


def tool_inputs(r):
    return [b.input for b in r.content if b.type == "tool_use"]


@check
def strict_tool_input_always_validates(c):
    asks = ["What's the forecast for Paris?", "Will it rain in Oslo this week? Use fahrenheit."]
    cases = [(ask, choice) for ask in asks for choice in ({"type": "auto"}, {"type": "any"})]

    def ask_one(case):
        ask, choice = case
        return choice, c.client.messages.create(tools=[FORECAST], tool_choice=choice, **c.kw(
            {"messages": [{"role": "user", "content": ask}], "max_tokens": 80}))

    # Streamed: the joined input_json_delta pieces are the input, and it validates.
    def stream_one():
        with c.client.messages.stream(tools=[FORECAST], tool_choice={"type": "any"}, **c.kw(
                {"messages": [{"role": "user", "content": asks[0]}]})) as s:
            pieces = [e.delta.partial_json for e in s
                      if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
            return pieces, s.get_final_message()

    # The five requests are independent: sent at once, the server decodes them in one batch.
    with ThreadPoolExecutor(max_workers=len(cases) + 1) as pool:
        streamed = pool.submit(stream_one)
        replies = list(pool.map(ask_one, cases))
        pieces, final = streamed.result()
    called = 0
    for choice, r in replies:
        inputs = tool_inputs(r)
        if choice["type"] == "any":
            expect(inputs, f"no tool_use under any: {r.content!r}")
        for i in inputs:
            jsonschema.validate(i, FORECAST["input_schema"])
            called += 1
    expect(called >= len(asks), f"only {called} calls")
    [inp] = tool_inputs(final)
    expect(json.loads("".join(pieces)) == inp, f"{pieces!r} vs {inp!r}")
    jsonschema.validate(inp, FORECAST["input_schema"])


@check
def errors_come_in_anthropics_shape(c):
    bad = [
        ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "no-such-type"}}}},
         "output_config.format"),
        ({"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
          "tools": [FORECAST], "tool_choice": {"type": "any"}}, "tool_choice"),
        ({"output_config": {"effort": "high"}}, "output_config.effort"),
    ]
    for body, field in bad:
        try:
            c.client.messages.create(**c.kw(dict(body)))
        except anthropic.BadRequestError as e:
            expect(e.body.get("type") == "error", f"{field}: body {e.body!r}")
            expect(field in e.body["error"]["message"] or field in str(e.body),
                   f"{field}: {e.body!r}")
            continue
        raise Failed(f"{field}: no error")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    c = Ctx(args)
    sys.exit(checks.run_all(CHECKS, c))


if __name__ == "__main__":
    main()
