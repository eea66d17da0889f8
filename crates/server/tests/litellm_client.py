#!/usr/bin/env python3
"""litellm's own client against pagoda, as applications use it: a two-turn conversation that
replays litellm's assistant message (with its `provider_specific_fields` bookkeeping, which
pagoda once refused with a 400), and a tool call -> result -> answer round trip, plain and
streamed. litellm needs openai>=2, so it runs from its own virtualenv (scripts/test.sh).
Runs every check, prints one line per check, exits 1 if any failed.
Started by crates/server/tests/client_compat.rs.

Usage: litellm_client.py --base-url http://127.0.0.1:PORT/v1 --model NAME
"""

import argparse
import json
import os
import sys

# No network: litellm would fetch its model price map from GitHub at import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402

import checks
from checks import Failed

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn




def expect(cond, message):
    if not cond:
        raise Failed(message)


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


class Ctx:
    def __init__(self, args):
        self.base, self.model = args.base_url, args.model

    def completion(self, **kw):
        kw.setdefault("temperature", 0)
        kw.setdefault("max_tokens", 24)
        return litellm.completion(model=f"openai/{self.model}", api_base=self.base,
                                  api_key="x", num_retries=0, timeout=120, **kw)


@check
def two_turn_conversation(c):
    messages = [{"role": "user", "content": "Name one colour of the rainbow."}]
    first = c.completion(messages=messages)
    reply = first.choices[0].message
    expect((reply.content or "").strip(), "empty first answer")
    # Exactly what applications do: the response's message object goes back as the next turn.
    messages.append(reply)
    messages.append({"role": "user", "content": "And another one?"})
    second = c.completion(messages=messages)
    expect((second.choices[0].message.content or "").strip(), "empty second answer")
    streamed = "".join(chunk.choices[0].delta.content or ""
                       for chunk in c.completion(messages=messages, stream=True)
                       if chunk.choices)
    expect(streamed.strip(), "empty streamed second answer")


@check
def tool_round_trip(c):
    messages = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    first = c.completion(messages=messages, tools=[WEATHER_TOOL], tool_choice="required")
    msg = first.choices[0].message
    calls = msg.tool_calls or []
    expect(len(calls) == 1, f"tool calls {calls!r} (content {msg.content!r})")
    expect(calls[0].function.name == "get_weather", f"called {calls[0].function.name!r}")
    args = json.loads(calls[0].function.arguments)
    expect(isinstance(args.get("city"), str), f"arguments {args!r}")
    messages.append(msg)
    messages.append({"role": "tool", "tool_call_id": calls[0].id,
                     "content": "18 degrees Celsius and cloudy"})
    answer = c.completion(messages=messages, tools=[WEATHER_TOOL], tool_choice="none")
    a = answer.choices[0]
    expect((a.message.content or "").strip(), "empty final answer")
    expect(a.finish_reason in ("stop", "length"), f"final finish_reason {a.finish_reason!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    args = p.parse_args()
    c = Ctx(args)
    sys.exit(checks.run_all(CHECKS, c))


if __name__ == "__main__":
    main()
