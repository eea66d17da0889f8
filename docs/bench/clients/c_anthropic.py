"""anthropic (the official SDK on the Messages API): create, stream, messages.parse into a
Pydantic model, a tool_use / tool_result round trip, errors, usage."""

import anthropic

from common import (CHAT_ASK, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, WEATHER_PARAMS, Capital,
                    capital_ok, check, expect, short, weather_args_ok)

LIB = "anthropic"
TOOL = {"name": "get_weather", "description": "Get the current weather in a city",
        "input_schema": WEATHER_PARAMS}


def client(t):
    return anthropic.Anthropic(base_url=t.base, api_key="x", max_retries=0, timeout=120.0)


def kw(t, kw):
    kw.setdefault("model", t.model)
    kw.setdefault("max_tokens", 32)
    # Passed in the body: this SDK's create() no longer takes `temperature` as an argument.
    kw.setdefault("extra_body", {"temperature": 0})
    return kw


def text_of(r):
    return "".join(b.text for b in r.content if b.type == "text")


@check(LIB)
def create(t):
    r = client(t).messages.create(**kw(t, {"messages": [{"role": "user", "content": CHAT_ASK}]}))
    expect(text_of(r).strip(), f"content {short(r.content)}")
    expect(r.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {r.stop_reason!r}")


@check(LIB)
def stream(t):
    args = kw(t, {"messages": [{"role": "user", "content": CHAT_ASK}]})
    whole = text_of(client(t).messages.create(**args))
    with client(t).messages.stream(**args) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    expect(text == whole, f"stream {text!r} != {whole!r}")
    expect(final.usage.output_tokens > 0, f"final usage {final.usage!r}")


@check(LIB)
def parse(t):
    r = client(t).messages.parse(output_format=Capital, **kw(t, {
        "max_tokens": 80, "messages": [{"role": "user", "content": STRUCT_ASK}]}))
    capital_ok(r.parsed_output)


@check(LIB)
def tool_round_trip(t):
    msgs = [{"role": "user", "content": TOOL_ASK}]
    r = client(t).messages.create(tools=[TOOL], **kw(t, {"max_tokens": 80, "messages": msgs}))
    uses = [b for b in r.content if b.type == "tool_use"]
    expect(len(uses) == 1 and uses[0].name == "get_weather",
           f"first turn: content {short(r.content)}")
    expect(r.stop_reason == "tool_use", f"stop_reason {r.stop_reason!r}")
    weather_args_ok(uses[0].input)
    msgs += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                           "content": TOOL_RESULT}]}]
    a = client(t).messages.create(tools=[TOOL], **kw(t, {"max_tokens": 80, "messages": msgs}))
    again = [b for b in a.content if b.type == "tool_use"]
    expect(not again, f"second turn called again: {short(again)}")
    expect(text_of(a).strip(), "empty answer after the tool result")


@check(LIB)
def error_bad_request(t):
    try:
        client(t).messages.create(**kw(t, {"messages": [{"role": "user", "content": CHAT_ASK}],
                                           "extra_body": {"temperature": 1.5}}))
    except anthropic.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        expect(body.get("type") == "error", f"error body {short(e.body)}")
        return
    raise AssertionError("temperature 1.5 (Anthropic's range is [0, 1]) was accepted")


@check(LIB)
def usage(t):
    r = client(t).messages.create(**kw(t, {"messages": [{"role": "user", "content": CHAT_ASK}]}))
    expect(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, f"usage {r.usage!r}")
