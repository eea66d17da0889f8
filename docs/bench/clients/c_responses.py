"""The OpenAI Responses API through the openai Python SDK: create, stream, parse into a Pydantic
model, a function-call round trip with function_call_output, errors, usage."""

import openai

from common import (CHAT_ASK, STRUCT_ASK, TOOL_ASK, TOOL_RESULT, WEATHER_PARAMS, Capital,
                    capital_ok, check, expect, short, weather_args_ok)

LIB = "responses"
TOOL = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": WEATHER_PARAMS}


def client(t):
    return openai.OpenAI(base_url=t.v1, api_key="x", max_retries=0, timeout=120.0)


def create(t, **kw):
    kw.setdefault("model", t.model)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", 32)
    return client(t).responses.create(**kw)


@check(LIB)
def create_text(t):
    r = create(t, input=CHAT_ASK)
    expect(r.output_text.strip(), "empty output_text")
    expect(r.status == "completed", f"status {r.status!r}")


@check(LIB)
def stream_events(t):
    whole = create(t, input=CHAT_ASK)
    text, done = "", None
    for ev in create(t, input=CHAT_ASK, stream=True):
        if ev.type == "response.output_text.delta":
            text += ev.delta
        elif ev.type == "response.completed":
            done = ev.response
    expect(done is not None, "no response.completed event")
    expect(text == whole.output_text, f"stream {text!r} != {whole.output_text!r}")
    expect(done.output_text == text, f"completed output {done.output_text!r}")


@check(LIB)
def structured_output_parse(t):
    r = client(t).responses.parse(model=t.model, temperature=0, max_output_tokens=80,
                                  input=STRUCT_ASK, text_format=Capital)
    capital_ok(r.output_parsed)


@check(LIB)
def tool_round_trip(t):
    ask = [{"role": "user", "content": TOOL_ASK}]
    r = create(t, input=ask, tools=[TOOL], max_output_tokens=80)
    calls = [o for o in r.output if o.type == "function_call"]
    expect(len(calls) == 1 and calls[0].name == "get_weather",
           f"first turn: output {short(r.output)}")
    weather_args_ok(calls[0].arguments)
    follow = ask + [o.model_dump(exclude_none=True) for o in r.output] + [
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": TOOL_RESULT}]
    a = create(t, input=follow, tools=[TOOL], max_output_tokens=80)
    again = [o for o in a.output if o.type == "function_call"]
    expect(not again, f"second turn called again: {short(again)}")
    expect(a.output_text.strip(), "empty answer after the tool result")


@check(LIB)
def error_bad_request(t):
    try:
        create(t, input=CHAT_ASK, temperature=-1)
    except openai.BadRequestError:
        return
    raise AssertionError("temperature -1 was accepted")


@check(LIB)
def usage(t):
    r = create(t, input=CHAT_ASK)
    u = r.usage
    expect(u and u.input_tokens > 0 and u.output_tokens > 0, f"usage {u!r}")
    expect(u.total_tokens == u.input_tokens + u.output_tokens, f"usage {u!r}")
