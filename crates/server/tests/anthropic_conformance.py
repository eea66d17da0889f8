#!/usr/bin/env python3
"""Conformance of pagoda's Messages API with the official `anthropic` Python SDK.

Drives a running server through `anthropic.Anthropic`: plain and streamed messages (streamed
text equal to the non-streamed), the event order, max_tokens and stop sequences, tool use (a
call, its result, the answer; streamed too), count_tokens, and errors raised as the SDK's typed
exceptions in Anthropic's error shape, `x-api-key` on a keyed server.
Runs every check, prints one line per check, exits 1 if any failed.
Started by crates/server/tests/front_apis.rs, which runs the real server in-process.

Usage: anthropic_conformance.py --base-url http://127.0.0.1:PORT --model NAME
           [--auth-base-url http://127.0.0.1:PORT2 --auth-key KEY]
"""

import argparse
import json
import sys

import anthropic
import httpx

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
        self.args = args
        self.client = anthropic.Anthropic(
            base_url=args.base_url, api_key="x", max_retries=0, timeout=120.0
        )
        self.model = args.model

    @staticmethod
    def _defaults(kw):
        kw.setdefault("max_tokens", 16)
        # Greedy, so streamed and non-streamed replies can be compared. SDK 2.x dropped the
        # `temperature` argument (older ones and raw clients still send it), so it goes as a
        # body field, which every version passes through.
        extra = dict(kw.pop("extra_body", None) or {})
        extra.setdefault("temperature", kw.pop("temperature", 0))
        kw["extra_body"] = extra
        return kw

    def create(self, **kw):
        kw.setdefault("model", self.model)
        return self.client.messages.create(**self._defaults(kw))

    def stream(self, **kw):
        kw.setdefault("model", self.model)
        return self.client.messages.stream(**self._defaults(kw))


ASK = [{"role": "user", "content": "Name three colors."}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
}
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


@check
def plain_message(c):
    r = c.create(messages=ASK, system="You are terse.")
    expect_eq(r.type, "message", "type")
    expect_eq(r.role, "assistant", "role")
    expect(r.id.startswith("msg_"), f"id {r.id!r}")
    expect_eq(r.model, c.model, "model")
    expect(r.content and r.content[0].type == "text" and r.content[0].text, f"content {r.content!r}")
    expect(r.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {r.stop_reason!r}")
    expect(r.usage.output_tokens > 0, f"usage {r.usage!r}")
    n = c.client.messages.count_tokens(model=c.model, messages=ASK, system="You are terse.")
    expect_eq(r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0), n.input_tokens,
              "input tokens vs count_tokens")


@check
def max_tokens_stops_the_reply(c):
    r = c.create(messages=ASK, max_tokens=3)
    expect_eq(r.stop_reason, "max_tokens", "stop_reason")
    expect_eq(r.usage.output_tokens, 3, "output_tokens")


@check
def streamed_text_equals_non_streamed(c):
    whole = c.create(messages=ASK, max_tokens=24)
    with c.stream(messages=ASK, max_tokens=24) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    expect_eq("".join(pieces), text_of(whole), "streamed text")
    expect_eq(text_of(final), text_of(whole), "final message text")
    expect_eq(final.stop_reason, whole.stop_reason, "streamed stop_reason")
    expect_eq(final.usage.output_tokens, whole.usage.output_tokens, "streamed output_tokens")
    expect(len(pieces) > 1, f"the text came in {len(pieces)} piece(s)")
    # The raw event order.
    events = [e.type for e in c.create(messages=ASK, max_tokens=8, stream=True)]
    expect_eq(events[:2], ["message_start", "content_block_start"], "first events")
    expect_eq(events[-3:], ["content_block_stop", "message_delta", "message_stop"], "last events")
    expect(set(events[2:-3]) == {"content_block_delta"}, f"events {events}")


@check
def stop_sequences(c):
    whole = text_of(c.create(messages=ASK, max_tokens=24))
    words = [w for w in whole.split() if len(w) > 2]
    expect(len(words) >= 2, f"too few words to pick a stop sequence from {whole!r}")
    stop = words[1]
    r = c.create(messages=ASK, max_tokens=24, stop_sequences=[stop])
    expect_eq(r.stop_reason, "stop_sequence", "stop_reason")
    expect_eq(r.stop_sequence, stop, "stop_sequence")
    expect_eq(text_of(r), whole[: whole.index(stop)], "text before the stop sequence")
    with c.stream(messages=ASK, max_tokens=24, stop_sequences=[stop]) as s:
        expect_eq(s.get_final_message().stop_sequence, stop, "streamed stop_sequence")


@check
def tool_use_round_trip(c):
    r = c.create(messages=WEATHER_ASK, tools=[WEATHER_TOOL], tool_choice={"type": "any"},
                 max_tokens=40)
    expect_eq(r.stop_reason, "tool_use", "stop_reason")
    uses = [b for b in r.content if b.type == "tool_use"]
    expect_eq(len(uses), 1, "tool_use blocks")
    use = uses[0]
    expect(use.id.startswith("toolu_"), f"id {use.id!r}")
    expect_eq(use.name, "get_weather", "tool name")
    expect(isinstance(use.input.get("city"), str), f"input {use.input!r}")
    # Streamed, the same call.
    # The input streams as generated: several input_json_delta pieces, not one at the end.
    pieces = []
    with c.stream(messages=WEATHER_ASK, tools=[WEATHER_TOOL], tool_choice={"type": "any"},
                  max_tokens=40) as s:
        for event in s:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                pieces.append(event.delta.partial_json)
        final = s.get_final_message()
    expect(len(pieces) >= 3, f"input came in {len(pieces)} piece(s): {pieces!r}")
    expect_eq(json.loads("".join(pieces)), use.input, "joined input_json_delta pieces")
    streamed = [b for b in final.content if b.type == "tool_use"]
    expect_eq([(b.name, b.input) for b in streamed], [(use.name, use.input)], "streamed call")
    expect_eq(final.stop_reason, "tool_use", "streamed stop_reason")
    # Named tool, then the result goes back and the model answers in text.
    named = c.create(messages=WEATHER_ASK, tools=[WEATHER_TOOL],
                     tool_choice={"type": "tool", "name": "get_weather"}, max_tokens=40)
    expect([b.name for b in named.content if b.type == "tool_use"] == ["get_weather"],
           f"named tool_choice content {named.content!r}")
    follow = WEATHER_ASK + [
        {"role": "assistant", "content": [b.model_dump() for b in r.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "21 degrees and sunny"}]},
    ]
    answer = c.create(messages=follow, tools=[WEATHER_TOOL], tool_choice={"type": "none"},
                      max_tokens=40)
    expect(text_of(answer).strip(), f"no text answer after the tool result: {answer.content!r}")
    expect(answer.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {answer.stop_reason!r}")


@check
def errors_are_typed_and_anthropic_shaped(c):
    def raises(exc, fn, needle):
        try:
            fn()
        except exc as e:
            body = e.body if isinstance(e.body, dict) else {}
            expect_eq(body.get("type"), "error", f"error body type ({body})")
            msg = body.get("error", {}).get("message", "")
            expect(needle in msg, f"message {msg!r} does not name {needle!r}")
            return
        raise Failed(f"no {exc.__name__} (wanted one naming {needle!r})")

    raises(anthropic.NotFoundError, lambda: c.create(model="nope", messages=ASK), "nope")
    raises(anthropic.BadRequestError, lambda: c.create(messages=ASK, temperature=5), "temperature")
    raises(anthropic.BadRequestError,
           lambda: c.create(messages=[{"role": "user", "content": [
               {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": "AA=="}}]}]),
           "messages[0].content[0].type")
    raises(anthropic.BadRequestError,
           lambda: c.create(messages=ASK, extra_body={"frobnicate": 1}), "frobnicate")
    raises(anthropic.BadRequestError,
           lambda: c.create(messages=ASK, tools=[{"type": "web_search_20250305",
                                                   "name": "web_search"}]), "tools[0].type")
    # A missing max_tokens (the SDK insists on it, so raw HTTP): 400, Anthropic's shape.
    r = httpx.post(f"{c.args.base_url}/v1/messages", json={"model": c.model, "messages": ASK},
                   timeout=60.0)
    expect_eq(r.status_code, 400, "missing max_tokens status")
    body = r.json()
    expect_eq(body.get("type"), "error", f"body {body}")
    expect_eq(body["error"]["type"], "invalid_request_error", "error type")
    expect("max_tokens" in body["error"]["message"], f"message {body['error']['message']!r}")


@check
def x_api_key_is_accepted(c):
    if not c.args.auth_base_url:
        return
    bad = anthropic.Anthropic(base_url=c.args.auth_base_url, api_key="wrong", max_retries=0)
    try:
        bad.messages.create(model=c.model, max_tokens=4, messages=ASK)
        raise Failed("a wrong x-api-key was accepted")
    except anthropic.AuthenticationError as e:
        expect_eq(e.body.get("error", {}).get("type"), "authentication_error", "error type")
    good = anthropic.Anthropic(base_url=c.args.auth_base_url, api_key=c.args.auth_key,
                               max_retries=0)
    try:
        good.messages.create(model=c.model, max_tokens=4, messages=ASK)
    except anthropic.AuthenticationError as e:
        raise Failed(f"the right x-api-key was refused: {e}")
    except anthropic.APIStatusError:
        pass  # past the key check (the keyed server has no model: 503)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--auth-base-url")
    p.add_argument("--auth-key")
    args = p.parse_args()
    c = Ctx(args)
    sys.exit(checks.run_all(CHECKS, c, f"anthropic {anthropic.__version__}"))


if __name__ == "__main__":
    main()
